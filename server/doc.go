// Package server serves a delay queue over HTTP: the API of tockd, its
// Prometheus metrics and its status page.
//
// # Basics
//
// [New] returns a [Server], an [http.Handler], for a [Store] (the embedded
// delayq engine through [QueueStore], or any other implementation of the
// interface). The routes are:
//
//	POST   /v1/topics/{topic}/messages  {"id"?, "payload", "delay" | "deliver_at"}  201 {"id", "deliver_at"}
//	POST   /v1/topics/{topic}/batch     {"messages": [...]}                          201 {"ids": [...]}
//	DELETE /v1/messages/{id}                                                         204, or 404
//	POST   /v1/topics/{topic}/receive   {"max", "wait", "visibility"}                200 {"messages": [...]}
//	POST   /v1/ack                      {"receipts": [...]}                          204
//	POST   /v1/nack                     {"receipt", "delay"?}                        204
//	GET    /v1/stats                                                                 200 [Stats]
//	GET    /metrics  /healthz  /readyz  /  (the status page)
//
// Request bodies are JSON and must say so: "Content-Type: application/json"
// (415 otherwise). A message is due at the later of its deliver_at (or now
// plus its delay) and the time of the put: that is the time a put answers
// with, deliveries report and lateness counts from. deliver_at may be any
// RFC 3339 time up to 2262-01-01T00:00:00Z; a time in the past means now.
// Topics and ids are 1 to [MaxNameLen] letters, digits, '-', '_' or '.',
// other than "." and "..".
//
// Every error is answered with a JSON body {"error": "...", "code": "..."}:
// the message says what is wrong, the code is for programs: bad_request
// (400), unauthorized (401), cross_origin (403), not_found (404, the
// message named is not pending), no_route (404, no route has the path),
// method_not_allowed (405), body_timeout (408), too_large (413),
// unsupported_media_type (415), wrong_host (421), internal (500) and
// unavailable (503). A client's mistake gets a 4xx, never a 500. Messages
// are bounded: an error about many items (an ack of many unknown receipts)
// shows the first ten and counts the rest.
//
// # Security
//
// With [WithToken], every route but /healthz requires the token as a bearer
// token, or as the password of Basic auth so a browser can show the page.
// Whether or not there is a token, the server refuses what a web page could
// make a visitor's browser send it: a cross-origin request (403, see
// [WithAllowedOrigins]), a body that is not JSON (415), and, on a loopback
// address, a Host other than localhost or a loopback IP (421, against DNS
// rebinding; see [WithAllowedHosts]). The status page may run only its own
// script and may not be framed. [Limits.BodyTimeout] bounds the time a
// request body may take; the timeouts of headers and idle connections, and
// a cap on connections, belong to the [http.Server] in front (tockd sets
// them).
//
// # Caveats
//
// Lateness in [Stats] is measured when a message is handed to a consumer,
// so it includes any time the message waited for a consumer to ask;
// QueueLateness is the store's own. The forecast drawn on the status page
// (the wheel) is the Store's own count when it is a [DueCounter], as the
// delayq store is (see delayq.Queue.DueCounts for what it approximates).
// For any other Store it counts only the messages put through this Server
// since it started, due within the hour when put, and cancels are not
// subtracted. Totals and history live in memory and start from zero when
// the Server is created.
//
// Drain ends long polls and makes /readyz fail; it does not stop the
// listener, which is the job of [http.Server.Shutdown].
package server
