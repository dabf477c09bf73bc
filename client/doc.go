// Package client is the Go client of tockd, the tock delay-queue server.
//
// # Basics
//
// [New] returns a [Client] for a server's base URL. Every route of the HTTP
// API has a method: [Client.Put] and [Client.PutBatch] schedule messages,
// [Client.Cancel] removes a waiting one, [Client.Receive] long-polls a
// topic for due messages and leases them, [Client.Ack] ends leases for
// good, [Client.Nack] hands a message back (or fails it for good, with a
// reason), [Client.Extend] holds a lease longer ([Client.ExtendBatch]
// several at once), [Client.Stats], [Client.Forecast], [Client.Healthy] and
// [Client.Ready] report on the server. Every method takes a context and returns as soon as it ends. The
// bodies sent and read are the types of package api, which the server uses
// too; [Delivery], [Stats], [PutResult] and [Forecast] are aliases of them.
//
// Concurrent Puts of one topic, and concurrent Acks, share requests while
// the Client is busy: the calls made while a few requests of theirs are in
// flight go together in one batch request when one ends, each call still
// getting its own answer, and a call made while the Client is not busy is
// sent at once on its own (see [WithCoalescing]). Under load this divides
// the cost of HTTP, on both sides, by the number of calls that share a
// request.
//
// An operator's calls inspect and act on the queue, for a server whose
// engine is a queue.Admin (both of tock's are; any other answers 501):
// [Client.Topics] lists the topics with their counts and rates,
// [Client.Messages] reads a page of a topic's messages in one state without
// consuming them ([Client.AllMessages] iterates over every page),
// [Client.Message] fetches one with its whole payload, [Client.DeliverNow]
// makes a scheduled message due, [Client.Requeue] and [Client.RequeueAll]
// send dead letters back, [Client.Purge] removes a topic's messages in a
// state, and [Client.Pause] and [Client.Resume] stop and restart a topic's
// deliveries. [Topic] and [MessageInfo] are aliases of package api's types.
//
// Errors from the server are [*Error] values that match the sentinels
// [ErrBadRequest], [ErrNotFound], [ErrUnauthorized], [ErrTooLarge],
// [ErrUnavailable] and [ErrServer] with [errors.Is], and those of package
// queue that the answer stands for ([queue.ErrInvalid],
// [queue.ErrUnknownReceipt], [queue.ErrDuplicate], ...), and carry the
// server's error code ([Error.Code]). Two answers say more:
//
//   - A put whose chosen ID names another waiting message fails with an
//     *Error whose Err is a [*queue.DuplicateError], with the waiting
//     message's due time. The same message put again (a retry, with the
//     same absolute DeliverAt) succeeds with the same ID.
//   - An ack that acked some receipts and not others returns a
//     [*queue.AckError] listing those not acked, in order: retry exactly
//     those, or drop them. The others were acked (see the example of
//     [Client.Ack]).
//
// # Caveats
//
// Only idempotent calls are retried (Ack, Extend, Cancel, Stats, Forecast, Healthy,
// Ready, Topics, Messages, Message, DeliverNow, Pause, Resume), after errors that leave them unanswered and after 429, 502, 503
// and 504 answers, honouring Retry-After (see [WithRetries]). Put,
// PutBatch, Receive, Nack, Requeue, RequeueAll and Purge are sent once: if their response is lost
// the caller cannot know whether they took effect. A Put retried by the
// caller with an ID and the same DeliverAt stores no second copy; without
// an ID, a message put twice is delivered twice. A Cancel retried after a
// lost response reports false although its first attempt cancelled the
// message. An error that leaves a coalesced request's outcome unknown (the
// connection failed, a 5xx) is the error of every Put or Ack it carried.
// The error of a Put or PutBatch whose messages may have been stored
// matches [ErrMaybeStored]; one that does not stored nothing.
package client
