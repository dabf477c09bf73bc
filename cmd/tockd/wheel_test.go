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
// receive waits for a message due soon, the wheel has timers pending.
func TestEngineRunsOnTheGivenWheel(t *testing.T) {
	for _, tc := range []struct {
		name string
		args func(t *testing.T) []string
	}{
		{"delayq", func(t *testing.T) []string { return []string{"-data", t.TempDir(), "-nosync"} }},
		{"redisq", func(t *testing.T) []string {
			return []string{"-redis", "redis://" + redistest.Start(t).Addr, "-redis-prefix", newPrefix()}
		}},
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
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if _, err := e.Put(ctx, queue.Message{Topic: "w", DeliverAt: time.Now().Add(2 * time.Second)}); err != nil {
				t.Fatal(err)
			}
			rctx, rcancel := context.WithCancel(ctx)
			received := make(chan error, 1)
			go func() {
				_, err := e.Receive(rctx, "w", 1, time.Second)
				received <- err
			}()
			deadline := time.Now().Add(time.Second)
			for wheel.Pending() == 0 && time.Now().Before(deadline) {
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
