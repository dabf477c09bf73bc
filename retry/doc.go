// Package retry retries failed operations on a tock timing wheel: in the background under a key
// ([Queue]), or in the caller's goroutine ([Do]).
//
// # Basics
//
// A Queue is failback, as RPC frameworks do it for calls that may be re-sent later and for
// registrations with a registry: the caller's attempt failed, so it hands the operation to the
// queue and goes on.
//
//	q := retry.New(retry.WithWheel(w), retry.WithBackoff(retry.Exponential(time.Second, time.Minute)))
//	defer q.Close()
//	if err := register(ctx); err != nil {
//		q.Add("register", register) // retried until it succeeds
//	}
//
// A key is in the queue at most once: a second [Queue.Add] of a pending key adds nothing (it
// returns [ErrAlreadyPending]). [Queue.Cancel] removes a key. An operation that returns an error
// wrapped with [Permanent] is not retried. Hooks report each failure, each key given up, and each
// key refused because the queue was full ([WithOnFailure], [WithOnGiveUp], [WithOnOverflow]).
//
// A waiting key costs a timer on the wheel and a small entry, never a goroutine or a runtime timer,
// so a queue holds a hundred thousand waiting keys in a few tens of megabytes. Due attempts run on
// at most [WithWorkers] goroutines, started when attempts are due and gone when none is.
//
// [Do] is the blocking form for one call: it runs the operation until it succeeds, waiting between
// attempts, and gives up with an error when attempts, time or the context run out.
//
// Both take the same options. The backoff is [Constant] or [Exponential] (with full jitter, the
// default) or any [Backoff]; [WithMaxAttempts] and [WithMaxElapsed] bound the retries.
//
// # Caveats
//
// Nothing is durable: the queue lives in memory, and [Queue.Close] returns the keys it drops so
// that the caller may keep them elsewhere.
//
// An attempt runs no earlier than its delay and normally within a tick of the wheel after it, but
// later if all workers are busy: [WithWorkers] bounds concurrency, not lateness.
//
// A Queue cancels the context of a running attempt on Cancel and Close, but cannot stop an
// operation that ignores its context; Close waits for it.
//
// A Queue given no wheel ([WithWheel]) makes one of its own, which Close stops; Do given none waits
// on the Go runtime's timers. Tests in a [testing/synctest] bubble that share a wheel must make it
// in the bubble.
package retry
