package bench

import (
	"context"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/tockwheel/tock/delayq"
	"github.com/tockwheel/tock/internal/diskbench"
	"github.com/tockwheel/tock/internal/redistest"
)

// BenchmarkScheduledPut schedules 100-byte messages an hour ahead from 256 goroutines: with
// delayq (durable: each Put returns after its record is fdatasynced), with asynq's scheduled tasks
// on a real redis-server (once with Redis's default of no fsync, once with appendfsync always, the
// durable equivalent), and, as the anchor, a raw append of 180-byte records to a file with one
// fdatasync per 256 records, the disk's limit for this workload. Compare msgs/s within one run:
//
//	cd bench && go test -run '^$' -bench ScheduledPut -benchtime 3s
func BenchmarkScheduledPut(b *testing.B) {
	payload := make([]byte, 100)
	parallelism := max(1, 256/runtime.GOMAXPROCS(0))

	b.Run("anchor=raw-append-fdatasync-per-256", func(b *testing.B) {
		diskbench.RawAppend(b, make([]byte, 180), 256)
	})

	b.Run("delayq", func(b *testing.B) {
		q, err := delayq.Open(b.TempDir())
		if err != nil {
			b.Fatal(err)
		}
		defer q.Close()
		at := time.Now().Add(time.Hour)
		diskbench.Parallel(b, parallelism, func() error {
			_, err := q.Put(context.Background(), delayq.Message{Topic: "bench", Payload: payload, DeliverAt: at})
			return err
		})
	})

	for _, c := range []struct {
		name string
		args []string
	}{
		{"asynq-redis-no-fsync", nil},
		{"asynq-redis-appendfsync-always", []string{"--appendonly", "yes", "--appendfsync", "always"}},
	} {
		b.Run(c.name, func(b *testing.B) {
			srv := redistest.Start(b, c.args...)
			if srv == nil {
				return
			}
			client := asynq.NewClient(asynq.RedisClientOpt{Addr: srv.Addr, PoolSize: 256})
			defer client.Close()
			diskbench.Parallel(b, parallelism, func() error {
				_, err := client.Enqueue(asynq.NewTask("bench", payload), asynq.ProcessIn(time.Hour))
				return err
			})
		})
	}
}

// BenchmarkDeliveryLateness schedules n messages 2 to 3 seconds ahead, spread evenly, and
// receives them, reporting how late each arrived after its due time, and how many came early: with
// delayq, and with asynq (its scheduler checks for due tasks every second here, five by default,
// and keeps due times in whole seconds).
//
//	cd bench && go test -run '^$' -bench DeliveryLateness -benchtime 1x
func BenchmarkDeliveryLateness(b *testing.B) {
	const n = 2000
	b.Run("delayq", func(b *testing.B) {
		for b.Loop() {
			q, err := delayq.Open(b.TempDir())
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			due := make(map[string]time.Time, n)
			base := time.Now().Add(2 * time.Second)
			for i := range n {
				at := base.Add(time.Duration(i) * time.Second / n)
				id, err := q.Put(ctx, delayq.Message{Topic: "t", DeliverAt: at})
				if err != nil {
					b.Fatal(err)
				}
				due[id] = at
			}
			var late []time.Duration
			for len(late) < n {
				ds, err := q.Receive(ctx, "t", 100, time.Minute)
				if err != nil {
					b.Fatal(err)
				}
				now := time.Now()
				for _, d := range ds {
					late = append(late, now.Sub(due[d.ID]))
					q.Ack(ctx, d.Receipt)
				}
			}
			q.Close()
			reportLateness(b, late)
		}
	})
	b.Run("asynq", func(b *testing.B) {
		srv := redistest.Start(b)
		if srv == nil {
			return
		}
		for b.Loop() {
			opt := asynq.RedisClientOpt{Addr: srv.Addr}
			client := asynq.NewClient(opt)
			var mu sync.Mutex
			due := make(map[string]time.Time, n)
			var late []time.Duration
			done := make(chan struct{})
			server := asynq.NewServer(opt, asynq.Config{Concurrency: 16, DelayedTaskCheckInterval: time.Second, LogLevel: asynq.ErrorLevel})
			mux := asynq.NewServeMux()
			mux.HandleFunc("t", func(_ context.Context, t *asynq.Task) error {
				now := time.Now()
				mu.Lock()
				defer mu.Unlock()
				late = append(late, now.Sub(due[string(t.Payload())]))
				if len(late) == n {
					close(done)
				}
				return nil
			})
			base := time.Now().Add(2 * time.Second)
			for i := range n {
				at := base.Add(time.Duration(i) * time.Second / n)
				key := at.Format(time.RFC3339Nano)
				mu.Lock()
				due[key] = at
				mu.Unlock()
				if _, err := client.Enqueue(asynq.NewTask("t", []byte(key)), asynq.ProcessAt(at)); err != nil {
					b.Fatal(err)
				}
			}
			if err := server.Start(mux); err != nil {
				b.Fatal(err)
			}
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				b.Fatalf("asynq delivered %d of %d in 30s", len(late), n)
			}
			server.Shutdown()
			client.Close()
			mu.Lock()
			reportLateness(b, late)
			mu.Unlock()
		}
	})
}

func reportLateness(b *testing.B, late []time.Duration) {
	slices.Sort(late)
	early := 0
	for _, l := range late {
		if l < 0 {
			early++
		}
	}
	n := len(late)
	b.ReportMetric(float64(early), "early")
	b.ReportMetric(float64(late[0].Microseconds())/1000, "min-late-ms")
	b.ReportMetric(float64(late[n/2].Microseconds())/1000, "p50-late-ms")
	b.ReportMetric(float64(late[n*99/100].Microseconds())/1000, "p99-late-ms")
	b.ReportMetric(float64(late[n-1].Microseconds())/1000, "max-late-ms")
}
