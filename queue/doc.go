// Package queue is the contract between tock's delay-queue engines and the code that uses them:
// what a [Message] is, what an [Engine] promises, and the errors it reports. It holds no engine
// of its own and has no dependencies beyond the standard library.
//
// Two engines implement it: package delayq, embedded in the process and kept on its disk, and
// package redisq, kept in Redis (one server, Sentinel or Cluster). The server (package server and
// cmd/tockd), the Go client and the CLI are written against this package only, so each works
// with either engine. Package queuetest checks an engine against every promise below, as
// testing/fstest does for file systems.
//
// # Basics
//
// A producer puts a [Message] on a topic with a due time. It waits, scheduled, until that time;
// then it is due, and a consumer that receives from the topic leases it for a visibility timeout
// and gets a [Delivery] with a receipt. The consumer acks the receipt when done, and the message
// is gone for good; or it nacks it, and the message is due again after the delay it asks for. A
// lease that runs out without either counts as a failed delivery: the message is due again after
// the engine's backoff. After the engine's maximum number of failed deliveries the message moves
// to the dead-letter topic (the topic's name followed by [DeadLetterSuffix], unless the engine is
// configured otherwise), where it waits to be received like any other. A consumer whose work takes
// longer than the visibility timeout extends its lease ([Engine.Extend]); one that knows a message
// can never succeed fails it for good ([WithDeadLetter]), and a Nack may say why ([WithReason]).
// Package worker runs this loop for a program: handlers, leases kept alive, backoff.
//
//	id, err := e.Put(ctx, queue.Message{Topic: "email", Payload: body, DeliverAt: time.Now().Add(time.Hour)})
//	ds, err := e.Receive(ctx, "email", 32, 30*time.Second) // waits until something is due
//	for _, d := range ds {
//		if send(d.Payload) == nil {
//			err = e.Ack(ctx, d.Receipt)
//		} else {
//			err = e.Nack(ctx, d.Receipt, time.Minute)
//		}
//	}
//
// # Promises
//
// Every engine keeps these; the package queuetest tests each of them.
//
//   - Never early: a message is not delivered before its due time, which is the later of its
//     DeliverAt and the time of its Put. Engines deliver close after it (each says how close).
//   - At least once: a message whose Put returned nil is delivered until a receipt of it is acked,
//     unless it is cancelled first. It may be delivered more than once: after a lease runs out, a
//     Nack, a lost ack, or a failure of the engine.
//   - Acked is done: once Ack returns nil for a receipt, its message is not delivered again.
//   - Cancelled is done: once Cancel returns true, the message is not delivered again.
//   - All or none: PutBatch stores every message of a batch or none of them.
//   - Unique chosen IDs: at most one message with a given chosen ID is waiting (scheduled, due or
//     leased) at a time.
//   - Unforgeable receipts: a receipt carries at least 64 bits that cannot be guessed; a receipt
//     the engine did not issue, byte for byte, is refused with [ErrUnknownReceipt], whether or
//     not the message it seems to name exists.
//
// What "returned nil" makes durable depends on the engine: delayq syncs its log to disk before it
// returns; redisq has Redis's durability, which its package documentation spells out.
//
// # Caveats
//
// Messages due at the same millisecond have no promised order; messages due at different times are
// delivered in the order of their due times as far as each receive sees them. A message delivered
// again counts a new attempt, but a delivery cut short by a failure of the engine may not be
// counted, so Attempt can repeat.
package queue
