// Package server serves a delay queue over HTTP: the API of tockd, its
// Prometheus metrics and its status page.
//
// # Basics
//
// New returns a Server, an http.Handler, for a Store (the embedded delayq
// engine, or any other implementation of the interface). The routes are:
//
//	POST   /v1/topics/{topic}/messages  {"id"?, "payload", "delay" | "deliver_at"}  201 {"id", "deliver_at"}
//	POST   /v1/topics/{topic}/batch     {"messages": [...]}                          201 {"ids": [...]}
//	DELETE /v1/messages/{id}                                                         204, or 404
//	POST   /v1/topics/{topic}/receive   {"max", "wait", "visibility"}                200 {"messages": [...]}
//	POST   /v1/ack                      {"receipts": [...]}                          204
//	POST   /v1/nack                     {"receipt", "delay"?}                        204
//	GET    /v1/stats                                                                 200 Stats
//	GET    /metrics  /healthz  /readyz  /  (the status page)
//
// Every error is answered with a JSON body {"error": "..."} that says what is
// wrong. A client's mistake gets a 4xx, never a 500: malformed JSON, unknown
// fields, bad durations or times, both "delay" and "deliver_at", invalid
// topic names, payloads over the limit (413), unknown receipts.
//
// With WithToken, every route but /healthz requires the token as a bearer
// token, or as the password of Basic auth so a browser can show the page.
//
// # Caveats
//
// Lateness is measured when a message is handed to a consumer, so it
// includes any time the message waited for a consumer to ask, not only the
// store's own delay. The forecast drawn on the status page (the wheel) is
// the Store's own count when it is a DueCounter, as the delayq store is (see
// delayq.Queue.DueCounts for what it approximates). For any other Store it
// counts only the messages put through this Server since it started, due
// within the hour when put, and cancels are not subtracted.
//
// Drain ends long polls and makes /readyz fail; it does not stop the
// listener, which is the job of http.Server.Shutdown.
package server
