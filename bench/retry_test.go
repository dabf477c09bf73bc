package bench

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/cenkalti/backoff/v5"

	"github.com/tockwheel/tock"
	"github.com/tockwheel/tock/retry"
)

// BenchmarkPendingRetries keeps 100,000 failed operations waiting for their next attempt, an hour
// away, and reports what that costs: memory (heap and goroutine stacks) per pending retry and the
// goroutines it takes. tock-queue is a retry.Queue on a wheel; backoff-goroutine is the usual
// pattern with github.com/cenkalti/backoff: a goroutine per retry, blocked in backoff.Retry.
//
//	cd bench && go test -run '^$' -bench PendingRetries -benchtime 1x .
func BenchmarkPendingRetries(b *testing.B) {
	const n = 100_000
	errDown := errors.New("down")
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("call-%d", i)
	}

	b.Run("tock-queue", func(b *testing.B) {
		for b.Loop() {
			w := tock.New()
			op := func(context.Context) error { return errDown }
			var q *retry.Queue
			m := measure(func() {
				q = retry.New(retry.WithWheel(w), retry.WithBackoff(retry.Constant(time.Hour)))
				for _, k := range keys {
					if err := q.Add(k, op); err != nil {
						b.Fatal(err)
					}
				}
			})
			m.report(b, n)
			if left := q.Close(); len(left) != n {
				b.Fatalf("Close returned %d keys, want %d", len(left), n)
			}
			w.Stop()
		}
	})

	b.Run("backoff-goroutine", func(b *testing.B) {
		for b.Loop() {
			ctx, cancel := context.WithCancel(context.Background())
			var started, exited sync.WaitGroup
			m := measure(func() {
				started.Add(n)
				exited.Add(n)
				for range keys {
					go func() {
						defer exited.Done()
						first := true
						_, _ = backoff.Retry(ctx, func() (struct{}, error) {
							if first {
								first = false
								started.Done()
							}
							return struct{}{}, errDown
						}, backoff.WithBackOff(backoff.NewConstantBackOff(time.Hour)), backoff.WithMaxElapsedTime(0))
					}()
				}
				started.Wait() // every goroutine has failed once and now waits for its retry
			})
			m.report(b, n)
			cancel()
			exited.Wait()
		}
	})
}

type measurement struct {
	elapsed    time.Duration
	bytes      int64 // heap and stacks
	goroutines int
}

// measure runs setup and returns what it left behind: memory still in use after a GC and
// goroutines still running, and how long it took.
func measure(setup func()) measurement {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	g := runtime.NumGoroutine()
	start := time.Now()
	setup()
	elapsed := time.Since(start)
	runtime.GC()
	runtime.ReadMemStats(&after)
	return measurement{
		elapsed:    elapsed,
		bytes:      int64(after.HeapAlloc+after.StackInuse) - int64(before.HeapAlloc+before.StackInuse),
		goroutines: runtime.NumGoroutine() - g,
	}
}

func (m measurement) report(b *testing.B, n int) {
	b.ReportMetric(float64(m.bytes)/float64(n), "B/retry")
	b.ReportMetric(float64(m.goroutines), "goroutines")
	b.ReportMetric(float64(m.elapsed.Nanoseconds())/float64(n), "ns/retry")
	b.ReportMetric(0, "ns/op")
}
