package delayq_test

import (
	"log/slog"
	"testing"

	"github.com/tockwheel/tock/delayq"
	"github.com/tockwheel/tock/queue"
	"github.com/tockwheel/tock/queue/queuetest"
)

// TestConformance runs the conformance suite of package queue against the queue, every case,
// Admin ones included.
func TestConformance(t *testing.T) {
	queuetest.Run(t, func(t *testing.T) queue.Engine {
		q, err := delayq.Open(t.TempDir(), delayq.WithNoSync(),
			delayq.WithMaxAttempts(queuetest.MaxAttempts),
			delayq.WithBackoff(queuetest.Backoff, 4*queuetest.Backoff),
			delayq.WithMaxPayload(queuetest.MaxPayload),
			delayq.WithLogger(slog.New(slog.DiscardHandler)))
		if err != nil {
			t.Fatal(err)
		}
		return q
	})
}
