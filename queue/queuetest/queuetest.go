// Package queuetest checks that a [queue.Engine] keeps the promises of package queue, in the
// manner of testing/fstest and golang.org/x/net/nettest: an engine's tests call [Run] with a
// function that opens a new, empty engine, and Run tests every behaviour of the contract against
// it (delays, never early, leases, nack, backoff, dead letters, cancel, ack idempotency, forged
// receipts, duplicate IDs, batches, headers, ordering by due time, limits, stats, close), and, when the
// engine is a [queue.Admin], a [queue.Limiter] or a [queue.Scheduler], every operation of those
// interfaces.
//
// The suite runs in real time, because an engine may keep time in another process (Redis): its
// delays are a few hundred milliseconds, and its subtests run in parallel, each on an engine of
// its own, so that a run takes a few seconds. It checks exactly what is promised (nothing early,
// every message delivered, nothing delivered twice when that is promised) and nothing the contract
// does not promise: no bound on lateness (each engine measures its own precision), so that a
// loaded machine, which makes everything late, fails no case. A message that does not come is
// waited for as long as the case may run ([CaseTimeout]), a bound on a bug rather than a timing.
//
// [Model] is the same contract as a reference model, for an engine's randomized tests: they make
// random calls, hand each answer to the Model, which says whether the contract allows it, and
// compare what the engine reports (topics, messages, forecasts) with what the Model holds.
package queuetest

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/tockwheel/tock/queue"
)

// The configuration an engine under test must be opened with.
const (
	// MaxAttempts is the number of failed deliveries after which a message moves to its topic's
	// dead-letter topic, named with queue.DeadLetterSuffix.
	MaxAttempts = 3
	// Backoff is how long after its lease ran out a message is due again the first time; later
	// failures may wait longer.
	Backoff = 100 * time.Millisecond
	// MaxPayload is the largest payload the engine accepts; a byte more is ErrTooLarge.
	MaxPayload = 64 << 10
)

// CaseTimeout bounds each case: whatever it waits for (a message, a count) that has not come by
// then is taken to be lost. No case needs more than a few seconds on a quiet machine.
const CaseTimeout = 2 * time.Minute

// An Opener opens a new, empty engine configured with [MaxAttempts], [Backoff] and [MaxPayload],
// on storage that no other engine of the run uses. Run closes the engine; the Opener cleans up
// the storage (with t.Cleanup) and fails t if it cannot open one.
type Opener func(t *testing.T) queue.Engine

// Run runs the conformance suite against the engines open opens, each behaviour as a subtest.
func Run(t *testing.T, open Opener) {
	for _, tc := range cases {
		runCase(t, open, tc.name, tc.run)
	}
	for _, tc := range limitCases {
		runCase(t, open, tc.name, func(ctx context.Context, h *env) { tc.run(ctx, h, as[queue.Limiter](h)) })
	}
	for _, tc := range adminCases {
		runCase(t, open, tc.name, func(ctx context.Context, h *env) { tc.run(ctx, h, as[queue.Admin](h)) })
	}
	for _, tc := range scheduleCases {
		runCase(t, open, tc.name, func(ctx context.Context, h *env) { tc.run(ctx, h, as[queue.Scheduler](h)) })
	}
	for _, tc := range replaceCases {
		runCase(t, open, tc.name, func(ctx context.Context, h *env) {
			_, err := h.e.Put(ctx, queue.Message{ID: "probe", Topic: "probe", Replace: true})
			if errors.Is(err, errors.ErrUnsupported) {
				h.Skipf("%T does not replace: %v", h.e, err)
			}
			tc.run(ctx, h)
		})
	}
}

// runCase runs run as the parallel subtest name, on an engine of its own that it closes after,
// within [CaseTimeout].
func runCase(t *testing.T, open Opener, name string, run func(ctx context.Context, h *env)) {
	t.Run(name, func(t *testing.T) {
		t.Parallel()
		e := open(t)
		t.Cleanup(func() { _ = e.Close() })
		ctx, cancel := context.WithTimeout(context.Background(), CaseTimeout)
		defer cancel()
		run(ctx, &env{T: t, e: e})
	})
}

// as returns the engine under test as an I (an optional interface: queue.Admin, queue.Limiter,
// queue.Scheduler), or skips the test when it is not one.
func as[I any](h *env) I {
	h.Helper()
	x, ok := h.e.(I)
	if !ok {
		h.Skipf("%T is not a %v", h.e, reflect.TypeFor[I]())
	}
	return x
}

var cases = []struct {
	name string
	run  func(ctx context.Context, h *env)
}{
	{"PutReceiveAck", testPutReceiveAck},
	{"NeverEarly", testNeverEarly},
	{"PastDueTimes", testPastDueTimes},
	{"DueTimeRange", testDueTimeRange},
	{"OrderByDueTime", testOrderByDueTime},
	{"TopicsAreSeparate", testTopicsAreSeparate},
	{"ReceiveWaits", testReceiveWaits},
	{"ReceiveMax", testReceiveMax},
	{"ReceiveContextEnds", testReceiveContextEnds},
	{"LeaseExpiry", testLeaseExpiry},
	{"Nack", testNack},
	{"Extend", testExtend},
	{"ExtendShortens", testExtendShortens},
	{"ExtendNackedLease", testExtendNackedLease},
	{"ExtendBatch", testExtendBatch},
	{"NackDeadLetter", testNackDeadLetter},
	{"NackReasonRefused", testNackReasonRefused},
	{"DeadLetter", testDeadLetter},
	{"Cancel", testCancel},
	{"CancelLeased", testCancelLeased},
	{"AckIdempotent", testAckIdempotent},
	{"AckPartial", testAckPartial},
	{"ForgedReceipts", testForgedReceipts},
	{"DuplicateID", testDuplicateID},
	{"RetriedPutDueAtOnce", testRetriedPutDueAtOnce},
	{"IDFreeAfterAck", testIDFreeAfterAck},
	{"Batch", testBatch},
	{"BatchAllOrNone", testBatchAllOrNone},
	{"Headers", testHeaders},
	{"HeadersRetriedPut", testHeadersRetriedPut},
	{"HeadersRefused", testHeadersRefused},
	{"Limits", testLimits},
	{"Stats", testStats},
	{"DueCounts", testDueCounts},
	{"Close", testClose},
}
