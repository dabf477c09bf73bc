// Package client is the Go client of tockd, the tock delay-queue server.
//
// # Basics
//
// [New] returns a [Client] for a server's base URL. Every route of the HTTP
// API has a method: [Client.Put] and [Client.PutBatch] schedule messages,
// [Client.Cancel] removes a pending one, [Client.Receive] long-polls a
// topic for due messages and leases them, [Client.Ack] ends a lease for
// good and [Client.Nack] hands the message back, [Client.Stats],
// [Client.Healthy] and [Client.Ready] report on the server. Every method
// takes a context and returns as soon as it ends.
//
// Errors from the server are [*Error] values that match the sentinels
// [ErrBadRequest], [ErrNotFound], [ErrUnauthorized], [ErrTooLarge],
// [ErrUnavailable] and [ErrServer] with [errors.Is], and carry the server's
// error code ([Error.Code]).
//
// # Caveats
//
// Only idempotent calls are retried (Cancel, Stats, Healthy, Ready), after
// errors that leave them unanswered and after 429, 502, 503 and 504
// answers, honouring Retry-After (see [WithRetries]). Put, PutBatch,
// Receive, Ack and Nack are sent once: if their response is lost the caller
// cannot know whether they took effect, and a message put twice is
// delivered twice. A Cancel retried after a lost response reports false
// although its first attempt cancelled the message.
package client
