package main

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/tockwheel/tock"
	"github.com/tockwheel/tock/internal/redistest"
	"github.com/tockwheel/tock/queue"
)

// TestEngineRunsOnTheGivenWheel checks that the engine tockd opens keeps
// its timers on tockd's wheel, which nothing else in the test uses: while a
// receive waits for a message not yet due, the wheel has timers pending.
func TestEngineRunsOnTheGivenWheel(t *testing.T) {
	for _, tc := range []struct {
		name string
		args func(t *testing.T) []string
		// lead is how far ahead the message is due: delayq keeps a timer for a message due within
		// its preload (2 s), redisq for the head a waiting receive waits for, however far.
		lead time.Duration
	}{
		{"delayq", func(t *testing.T) []string { return []string{"-data", t.TempDir(), "-nosync"} }, 1500 * time.Millisecond},
		{"redisq", func(t *testing.T) []string {
			return []string{"-redis", "redis://" + redistest.Start(t).Addr, "-redis-prefix", newPrefix()}
		}, time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := parseFlags(tc.args(t), io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			wheel := tock.New()
			e, release, err := openEngine(context.Background(), c, slog.New(slog.DiscardHandler), wheel)
			if err != nil {
				t.Fatal(err)
			}
			defer release()
			defer e.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			due := time.Now().Add(tc.lead)
			if _, err := e.Put(ctx, queue.Message{Topic: "w", DeliverAt: due}); err != nil {
				t.Fatal(err)
			}
			rctx, rcancel := context.WithCancel(ctx)
			received := make(chan error, 1)
			go func() {
				_, err := e.Receive(rctx, "w", 1, time.Second)
				received <- err
			}()
			// Until the message is due: the receive waits for it until then, however late it began.
			for wheel.Pending() == 0 && time.Now().Before(due) {
				time.Sleep(time.Millisecond)
			}
			pending := wheel.Pending()
			rcancel()
			<-received
			if pending == 0 {
				t.Fatal("no timer on tockd's wheel while a receive waits: the engine keeps its timers elsewhere")
			}
		})
	}
}
