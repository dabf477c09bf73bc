// Package server serves a delay queue over HTTP: the API of tockd, its
// Prometheus metrics and its status page.
//
// # Basics
//
// [New] returns a [Server], an [http.Handler], for a [queue.Engine]: the
// embedded delayq engine (a *delayq.Queue is one), or any other engine. The
// server is written against package queue only. The routes, whose request
// and answer bodies are the types of package api, are:
//
//	POST   /v1/topics/{topic}/messages  {"id"?, "payload", "delay" | "deliver_at"}  201 {"id", "deliver_at"}; 409
//	POST   /v1/topics/{topic}/batch     {"messages": [...]}                          201 {"ids": [...]}; 409
//	DELETE /v1/messages/{id}                                                         204, or 404
//	POST   /v1/topics/{topic}/receive   {"max", "wait", "visibility"}                200 {"messages": [...]}
//	POST   /v1/ack                      {"receipts": [...]}                          204, or 400 {"acked", "failed"}
//	POST   /v1/nack                     {"receipt", "delay"?, "reason"?, "dead_letter"?}  204
//	POST   /v1/extend                   {"receipt" | "receipts", "visibility"}       204, or 400 {"extended", "failed"}
//	GET    /v1/stats                                                                 200 [api.Stats]
//	GET    /metrics  /healthz  /readyz  /  (the status page)
//	GET    /openapi.json  (every route's bodies, error codes and auth: [api.OpenAPI])
//
// The routes that operate the queue need an engine that is a [queue.Admin] (both of tock's
// engines are); for any other they answer 501 with code "not_implemented", and the routes above
// work as before:
//
//	GET    /v1/topics                                                                200 [api.TopicsResponse]
//	GET    /v1/topics/{topic}/messages?state=&cursor=&limit=                         200 [api.MessagesResponse]
//	GET    /v1/messages/{id}                                                         200 [api.MessageInfo] with payload, or 404
//	POST   /v1/messages/{id}/deliver    (no body)                                    200 {"moved": 1}, or 404
//	POST   /v1/topics/{topic}/requeue   {"ids": [...]} | {"all": true}               200 {"moved": n}
//	POST   /v1/topics/{topic}/purge     {"state": "scheduled" | "due" | "dead"}      200 {"removed": n}
//	POST   /v1/topics/{topic}/pause     (no body)                                    200 {"topic", "paused": true}
//	POST   /v1/topics/{topic}/resume    (no body)                                    200 {"topic", "paused": false}
//
// The routes of delivery limits need an engine that is a [queue.Limiter]
// (501 otherwise); a topic's limit binds every consumer of the engine, and
// /v1/topics shows it beside the topic's counts:
//
//	GET    /v1/limits                                                                200 [api.LimitsResponse]
//	PUT    /v1/topics/{topic}/limit     {"rate"?, "burst"?, "concurrency"?}           200 [api.Limit] as kept
//	DELETE /v1/topics/{topic}/limit                                                  204
//
// A page of messages names its state (scheduled, due, leased or dead) and holds 50 messages
// unless limit says otherwise (1 to [queue.MaxPage]); its "next" is the cursor of the following
// page, absent on the last. A message's "preview" is the first [queue.PreviewLen] bytes of its
// payload as text. The rates of /v1/topics are per second over about the last minute, from
// samples of the engine's counts the server takes when the topics are asked for. The actions and
// the moved messages are counted in tock_admin_actions_total and tock_admin_messages_moved_total
// by action, and each action is logged at level info with its topic or IDs and count. A POST
// with no body needs no Content-Type.
//
// Request bodies are JSON and must say so: "Content-Type: application/json"
// (415 otherwise). A message is due at the later of its deliver_at (or now
// plus its delay) and the time of the put: that is the time a put answers
// with, deliveries report and lateness counts from. deliver_at may be any
// RFC 3339 time up to [queue.MaxDeliverAt], 2262-01-01T00:00:00Z; a time in
// the past means now. Topics and ids are 1 to [MaxNameLen] letters, digits,
// '-', '_' or '.', other than "." and "..".
//
// A put whose chosen id names a waiting message is a retry when the message
// is the same (topic, payload and due time): it is answered 201 with the
// id, and nothing more is stored. A different message is refused with 409
// and code "duplicate", with the id and the waiting message's deliver_at
// ([api.DuplicateBody]); in a batch, nothing of the batch is stored. A put
// is the same again only if its due time is: a retry-safe put names its id
// and an absolute deliver_at, since a delay counts from each put's now. Due
// at once is one due time, however it was asked (no delay nor deliver_at, a
// deliver_at in the past): a retried put of a message due at once is a retry
// once the waiting one's due time has come too, by the engine's clock.
//
// A receive whose client goes away while the engine leases messages for it
// nacks them (due again at once, the attempt counted), so that they do not
// wait out their visibility with no consumer; a client that goes away after
// that check leaves them leased until the visibility ends, as with any
// consumer that does not ack.
//
// A nack may say why the delivery failed ("reason", at most [api.MaxReason]
// bytes of UTF-8), which the message's last failure reports
// ("last_failure" and "reason" of its [api.MessageInfo]); with
// "dead_letter": true it fails the message for good, to its dead-letter
// topic at once whatever its attempts. An extend moves the end of a lease
// to "visibility" from the server's now (up to [Limits.MaxVisibility]), so
// that a consumer can hold a message as long as its work takes; a receipt
// of no current lease is answered 400 with code "unknown_receipt". With
// "receipts" it extends several leases, in one call of the engine when it
// is a [queue.BatchExtender], and answers for each as an ack does
// ([api.ExtendErrorBody], "extended" and "failed").
//
// An ack answers for each receipt. 204 means every receipt was acked (one
// whose message is already done counts as acked, where the engine can tell
// it from a forged one). Otherwise the answer is 400 with code
// "unknown_receipt" ([api.AckErrorBody]): "acked" counts the receipts that
// were acked, and "failed" lists the indexes in the request of the others,
// forged, malformed or stale (leased to another consumer since). The
// indexes take no more room than the receipts, so the answer is never
// larger than the request beyond its bounded message; an ack of receipts
// too short for that to hold, none of which an engine issues, is refused
// whole with 400 bad_request before any is acked.
//
// Every error is answered with a JSON body {"error": "...", "code": "..."}:
// the message says what is wrong, the code is for programs: bad_request
// (400), unknown_receipt (400), unauthorized (401), cross_origin (403),
// not_found (404, the message named is not waiting), no_route (404, no
// route has the path), method_not_allowed (405), body_timeout (408),
// duplicate (409), too_large (413), unsupported_media_type (415),
// wrong_host (421), internal (500) and unavailable (503: the engine is
// unavailable or closed, or the server is shutting down). A client's
// mistake gets a 4xx, never a 500. Messages are bounded: an error about
// many items (an ack of many unknown receipts) shows the first ten and
// counts the rest.
//
// /readyz answers 200 while the server is not draining and the engine's
// Ready reports it ready, 503 saying why otherwise. /v1/stats and the
// status page report the engine's Stats and DueCounts (the forecast) beside
// the server's own totals and history. /metrics exports the engine's counts
// (tock_scheduled_messages, tock_due_messages, tock_leased_messages, and
// its own lateness as the summary tock_due_lateness_seconds) and, for an
// engine that is a [queue.Reporter], each of its metrics as tock_ and its
// name, such as delayq's tock_fsync_duration_seconds. A scrape during
// which the engine fails still serves the server's own metrics.
//
// # Security
//
// With [WithToken], every route but /healthz and /openapi.json (the API's
// OpenAPI document, [api.OpenAPI]) requires the token as a bearer
// token, or as the password of Basic auth so a browser can show the page.
// Whether or not there is a token, the server refuses what a web page could
// make a visitor's browser send it: a cross-origin request (403, see
// [WithAllowedOrigins]), a body that is not JSON (415), and, on a loopback
// address, a Host other than localhost or a loopback IP (421, against DNS
// rebinding; see [WithAllowedHosts]). The status page may run only its own
// script and may not be framed. [Limits.BodyTimeout] bounds the time a
// request body may take.
//
// # Serving
//
// A Server is an [http.Handler] that any [http.Server] can serve, but
// [Server.Serve] is the way to put it on a network: it holds the
// connection policy that a server open to slow, idle or hostile clients
// needs, which tockd uses and a program that embeds the server gets the
// same way. Its connections are capped ([ConnLimits]: at the cap the idlest
// or slowest connection makes room, and a new one is turned away with 503
// only when every open one is serving a request), headers and idle
// connections are timed, a client that does not read its answers cannot
// hold a handler, and the answers net/http writes itself before any
// handler runs (a malformed request, headers too large or too slow) are
// JSON errors like every other. [Server.Shutdown] stops it: long polls end
// at once, requests in flight get until its context ends, and the
// connections still open then are closed. /metrics counts the connections
// (tock_http_connections, and tock_http_connections_shed_total and
// tock_http_connections_refused_total at the cap).
//
// # Caveats
//
// Lateness in [api.Stats] is measured when a message is handed to a
// consumer, so it includes any time the message waited for a consumer to
// ask; QueueLateness is the engine's own. Totals and history live in memory
// and start from zero when the Server is created.
//
// The due time a put answers with is the server's; an engine that resolves
// a due time in the past to the time of its own Put (as the queue contract
// says) may deliver the message with a due time later by the time the put
// took to reach it.
//
// Drain ends long polls and makes /readyz fail; it does not stop the
// listener, which is the job of [http.Server.Shutdown].
package server
