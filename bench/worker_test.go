package bench

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/tockwheel/tock/client"
	"github.com/tockwheel/tock/delayq"
	"github.com/tockwheel/tock/queue"
	"github.com/tockwheel/tock/redisq"
	"github.com/tockwheel/tock/server"
	"github.com/tockwheel/tock/worker"
)

// The worker runtime beside asynq's Server and River's workers.

var workerMessages = flag.Int("worker.messages", 50_000, "messages each engine's workers handle in BenchmarkWorkerThroughput")

// workerPayload is the 100-byte payload of every message of the worker benchmarks.
var workerPayload = []byte(fmt.Sprintf("%0100d", 7))

// handleAll puts n messages of 100 bytes on e, all due now, in batches, then runs a Worker of
// concurrency 64 with a no-op handler until every message is acked, and returns the rate of
// handled messages per second, from the start of Run to the last ack.
func handleAll(b *testing.B, e queue.Engine, n int) float64 {
	ctx := context.Background()
	for i := 0; i < n; i += 1000 {
		ms := make([]queue.Message, min(1000, n-i))
		for j := range ms {
			ms[j] = queue.Message{Topic: "w", Payload: workerPayload}
		}
		if _, err := e.PutBatch(ctx, ms); err != nil {
			b.Fatal(err)
		}
	}
	w := worker.New(e, worker.WithConcurrency(64), worker.WithLogger(slog.New(slog.DiscardHandler)))
	var handled atomic.Int64
	done := make(chan struct{})
	w.HandleFunc("w", func(ctx context.Context, d queue.Delivery) error {
		if handled.Add(1) == int64(n) {
			close(done)
		}
		return nil
	})
	rctx, stop := context.WithCancel(ctx)
	stopped := make(chan error, 1)
	start := time.Now()
	go func() { stopped <- w.Run(rctx) }()
	select {
	case <-done:
	case <-time.After(10 * time.Minute):
		b.Fatalf("handled %d of %d in 10 minutes", handled.Load(), n)
	}
	stop() // the last acks are sent before Run returns
	if err := <-stopped; err != nil {
		b.Fatal(err)
	}
	took := time.Since(start)
	if st, err := e.Stats(ctx); err != nil || st.Due+st.Leased+st.Scheduled != 0 {
		b.Fatalf("after the run: %+v, %v; want nothing left", st, err)
	}
	return float64(n) / took.Seconds()
}

// asynqHandleAll enqueues n tasks of 100 bytes due now, then runs an asynq Server of
// concurrency 64 with a no-op handler until every task is processed, and returns the rate.
func asynqHandleAll(b *testing.B, addr string, n int) float64 {
	opt := asynq.RedisClientOpt{Addr: addr, PoolSize: 256}
	c := asynq.NewClient(opt)
	defer c.Close()
	putAll(b, n, func(i int) error {
		_, err := c.Enqueue(asynq.NewTask("w", workerPayload), asynq.MaxRetry(3))
		return err
	})
	var handled atomic.Int64
	done := make(chan struct{})
	srv := asynq.NewServer(opt, asynq.Config{Concurrency: 64, LogLevel: asynq.ErrorLevel})
	mux := asynq.NewServeMux()
	mux.HandleFunc("w", func(context.Context, *asynq.Task) error {
		if handled.Add(1) == int64(n) {
			close(done)
		}
		return nil
	})
	start := time.Now()
	if err := srv.Start(mux); err != nil {
		b.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(10 * time.Minute):
		b.Fatalf("asynq handled %d of %d in 10 minutes", handled.Load(), n)
	}
	took := time.Since(start)
	srv.Shutdown()
	return float64(n) / took.Seconds()
}

// BenchmarkWorkerThroughput measures how many messages a second a consumer runtime handles with a
// no-op handler, 100-byte payloads and concurrency 64, each from a backlog of -worker.messages put
// before it starts: package worker on delayq embedded (durable: acks are fsynced), on redisq and
// on tockd over HTTP (on delayq, on loopback), beside asynq's Server on the same redis-server and
// River's workers on PostgreSQL (when initdb and pg_ctl are installed). Each reports msgs/s.
//
//	cd bench && go test -run '^$' -bench WorkerThroughput -benchtime 1x -count 3
func BenchmarkWorkerThroughput(b *testing.B) {
	n := *workerMessages
	b.Run("worker-delayq", func(b *testing.B) {
		for b.Loop() {
			q, err := delayq.Open(b.TempDir())
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(handleAll(b, q, n), "msgs/s")
			q.Close()
		}
	})
	b.Run("worker-redisq", func(b *testing.B) {
		srv, rdb := redisServer(b)
		if srv == nil {
			b.Skip("no redis-server")
		}
		for i := 0; b.Loop(); i++ {
			q := openRedisq(b, rdb, redisq.WithPrefix(fmt.Sprintf("w%d", i)))
			b.ReportMetric(handleAll(b, q, n), "msgs/s")
			q.Close()
		}
	})
	b.Run("worker-tockd-http", func(b *testing.B) {
		for b.Loop() {
			q, err := delayq.Open(b.TempDir())
			if err != nil {
				b.Fatal(err)
			}
			ts := httptest.NewServer(server.New(q, server.WithLogger(slog.New(slog.DiscardHandler))))
			c, err := client.New(ts.URL, client.WithHTTPClient(workerHTTPClient()))
			if err != nil {
				b.Fatal(err)
			}
			e := c.Engine()
			b.ReportMetric(handleAll(b, e, n), "msgs/s")
			e.Close()
			ts.Close()
			q.Close()
		}
	})
	b.Run("asynq", func(b *testing.B) {
		srv, rdb := redisServer(b)
		if srv == nil {
			b.Skip("no redis-server")
		}
		for b.Loop() {
			rdb.FlushAll(context.Background())
			b.ReportMetric(asynqHandleAll(b, srv.Addr, n), "msgs/s")
		}
	})
	b.Run("river", func(b *testing.B) {
		dsn := postgres(b)
		for b.Loop() {
			b.ReportMetric(riverHandleAll(b, dsn, n), "msgs/s")
		}
	})
}
