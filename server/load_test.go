package server_test

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tockwheel/tock/client"
	"github.com/tockwheel/tock/delayq"
	"github.com/tockwheel/tock/internal/redistest"
	"github.com/tockwheel/tock/queue"
	"github.com/tockwheel/tock/redisq"
	"github.com/tockwheel/tock/server"
)

// The load benchmarks put durable (fsynced) messages through the whole
// stack on loopback, client included, and report puts/s and the p99 latency
// of one call. The anchor in the same run is the same work done by calling
// the queue directly, without HTTP:
//
//	go test ./server -run '^$' -bench Loopback -benchtime 3s
//
// Each benchmark is bounded by b.N, which -benchtime sets.

const loadClients = 32

var loadPayload = json.RawMessage(`{"user":12345,"event":"reminder","note":"0123456789abcdef0123456789abcdef0123456789"}`)

// serveEngine serves e on a loopback TCP port and returns a client of it.
// e is closed when the benchmark ends.
func serveEngine(b *testing.B, e queue.Engine) *client.Client {
	b.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	hs := &http.Server{Handler: server.New(e)}
	go hs.Serve(ln)
	b.Cleanup(func() {
		hs.Close()
		e.Close()
	})
	tr := &http.Transport{MaxIdleConnsPerHost: loadClients * 2}
	c, err := client.New("http://"+ln.Addr().String(), client.WithHTTPClient(&http.Client{Transport: tr}))
	if err != nil {
		b.Fatal(err)
	}
	return c
}

// runLoad runs op from workers goroutines until b.N messages are put, each
// call putting per messages, and reports puts/s and the p99 call latency.
func runLoad(b *testing.B, workers, per int, op func() error) {
	var next atomic.Int64
	lat := make([][]time.Duration, workers)
	var wg sync.WaitGroup
	var failed atomic.Pointer[error]
	b.ResetTimer()
	start := time.Now()
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(int64(per)) <= int64(b.N)+int64(per)-1 {
				t0 := time.Now()
				if err := op(); err != nil {
					failed.Store(&err)
					return
				}
				lat[w] = append(lat[w], time.Since(t0))
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if err := failed.Load(); err != nil {
		b.Fatal(*err)
	}
	all := slices.Concat(lat...)
	slices.Sort(all)
	puts := len(all) * per
	b.ReportMetric(float64(puts)/elapsed.Seconds(), "puts/s")
	if len(all) > 0 {
		b.ReportMetric(float64(all[len(all)*99/100].Microseconds())/1000, "p99-ms")
	}
	b.ReportMetric(0, "ns/op") // puts/s says it; ns/op would mix per-call and per-message
}

func BenchmarkLoopback(b *testing.B) {
	benchmarkLoopback(b, func(b *testing.B) queue.Engine {
		q, err := delayq.Open(b.TempDir())
		if err != nil {
			b.Fatal(err)
		}
		return q
	})
}

// BenchmarkLoopbackRedis is BenchmarkLoopback on the redisq engine, on a
// redis-server that fsyncs every write before it answers (appendfsync
// always, the durable setting of one server), its anchor the same queue
// called directly:
//
//	go test ./server -run '^$' -bench LoopbackRedis -benchtime 3s
func BenchmarkLoopbackRedis(b *testing.B) {
	benchmarkLoopback(b, func(b *testing.B) queue.Engine {
		srv := redistest.Start(b, "--appendonly", "yes", "--appendfsync", "always")
		rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 256})
		b.Cleanup(func() { rdb.Close() })
		q, err := redisq.Open(context.Background(), rdb)
		if err != nil {
			b.Fatal(err)
		}
		return q
	})
}

// benchmarkLoopback runs the load on engines that open opens, a fresh one
// for each case: called directly, and through a server and the client.
func benchmarkLoopback(b *testing.B, open func(*testing.B) queue.Engine) {
	ctx := context.Background()
	msg := func() queue.Message {
		return queue.Message{Topic: "load", Payload: loadPayload, DeliverAt: time.Now().Add(time.Hour)}
	}
	b.Run("put/direct-32", func(b *testing.B) {
		q := open(b)
		b.Cleanup(func() { q.Close() })
		runLoad(b, loadClients, 1, func() error {
			_, err := q.Put(ctx, msg())
			return err
		})
	})
	b.Run("put/http-32", func(b *testing.B) {
		c := serveEngine(b, open(b))
		runLoad(b, loadClients, 1, func() error {
			_, err := c.Put(ctx, "load", client.Message{Payload: loadPayload, Delay: time.Hour})
			return err
		})
	})
	const batch = 1000
	b.Run("batch1000/direct-4", func(b *testing.B) {
		q := open(b)
		b.Cleanup(func() { q.Close() })
		runLoad(b, 4, batch, func() error {
			ms := make([]queue.Message, batch)
			for i := range ms {
				ms[i] = msg()
			}
			_, err := q.PutBatch(ctx, ms)
			return err
		})
	})
	b.Run("batch1000/http-4", func(b *testing.B) {
		c := serveEngine(b, open(b))
		ms := make([]client.Message, batch)
		for i := range ms {
			ms[i] = client.Message{Payload: loadPayload, Delay: time.Hour}
		}
		runLoad(b, 4, batch, func() error {
			_, err := c.PutBatch(ctx, "load", ms)
			return err
		})
	})
}
