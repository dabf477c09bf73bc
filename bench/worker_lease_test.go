package bench

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tockwheel/tock/api"
	"github.com/tockwheel/tock/client"
	"github.com/tockwheel/tock/delayq"
	"github.com/tockwheel/tock/queue"
	"github.com/tockwheel/tock/redisq"
	"github.com/tockwheel/tock/server"
	"github.com/tockwheel/tock/worker"
)

// countingEngine counts the Extend calls made through it.
type countingEngine struct {
	queue.Engine
	extends atomic.Int64
}

func (e *countingEngine) Extend(ctx context.Context, receipt string, visibility time.Duration) error {
	e.extends.Add(1)
	return e.Engine.Extend(ctx, receipt, visibility)
}

// workerHTTPClient is the HTTP client of a worker on tockd: one that keeps as many idle
// connections as it has handlers (net/http's default keeps 2 per host, so that 64 concurrent acks
// or extends open and close a connection each).
func workerHTTPClient() *http.Client {
	return &http.Client{Transport: &http.Transport{MaxIdleConns: 1024, MaxIdleConnsPerHost: 1024}}
}

// workerEngines runs f on each engine the worker benchmarks compare: delayq embedded, redisq on one
// redis-server (rdb, sent counting the commands this process sends it), and tockd over HTTP on
// delayq (reqs counting the requests tockd served, by path).
func workerEngines(b *testing.B, f func(b *testing.B, e queue.Engine, rdb *redis.Client, sent *sentCommands, reqs *pathCounts)) {
	b.Run("delayq", func(b *testing.B) {
		q, err := delayq.Open(b.TempDir())
		if err != nil {
			b.Fatal(err)
		}
		defer q.Close()
		f(b, q, nil, nil, nil)
	})
	b.Run("redisq", func(b *testing.B) {
		srv, _ := redisServer(b)
		if srv == nil {
			b.Skip("no redis-server")
		}
		var sent sentCommands
		rdb := countedClient(b, srv, &sent)
		q := openRedisq(b, rdb, redisq.WithPrefix("lease"))
		f(b, q, rdb, &sent, nil)
	})
	b.Run("tockd-http", func(b *testing.B) {
		q, err := delayq.Open(b.TempDir())
		if err != nil {
			b.Fatal(err)
		}
		defer q.Close()
		var reqs pathCounts
		ts := httptest.NewServer(reqs.count(server.New(q, server.WithLogger(slog.New(slog.DiscardHandler)))))
		defer ts.Close()
		c, err := client.New(ts.URL, client.WithHTTPClient(workerHTTPClient()))
		if err != nil {
			b.Fatal(err)
		}
		e := c.Engine()
		defer e.Close()
		f(b, e, nil, nil, &reqs)
	})
}

// pathCounts counts the requests a handler serves, by path.
type pathCounts struct {
	mu sync.Mutex
	n  map[string]int64
}

func (p *pathCounts) count(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		if p.n == nil {
			p.n = make(map[string]int64)
		}
		p.n[r.URL.Path]++
		p.mu.Unlock()
		h.ServeHTTP(w, r)
	})
}

func (p *pathCounts) get(path string) int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.n[path]
}

// BenchmarkWorkerLongHandler runs 64 handlers that each take three times the visibility (1 s):
// their leases are extended, so each message is delivered once. It reports the deliveries beyond
// the first (redeliveries, the goal 0) on each engine.
//
//	cd bench && go test -run '^$' -bench WorkerLongHandler -benchtime 1x -count 3
func BenchmarkWorkerLongHandler(b *testing.B) {
	workerEngines(b, func(b *testing.B, e queue.Engine, _ *redis.Client, _ *sentCommands, _ *pathCounts) {
		const n, vis = 64, time.Second
		for i := 0; b.Loop(); i++ {
			topic := fmt.Sprintf("long%d", i)
			for range n {
				if _, err := e.Put(context.Background(), queue.Message{Topic: topic, Payload: workerPayload}); err != nil {
					b.Fatal(err)
				}
			}
			var mu sync.Mutex
			seen := map[string]int{}
			var handled atomic.Int64
			done := make(chan struct{})
			w := worker.New(e, worker.WithConcurrency(n), worker.WithVisibility(vis), worker.WithLogger(slog.New(slog.DiscardHandler)))
			w.HandleFunc(topic, func(ctx context.Context, d queue.Delivery) error {
				mu.Lock()
				seen[d.ID]++
				mu.Unlock()
				select {
				case <-time.After(3 * vis):
				case <-ctx.Done():
					return context.Cause(ctx)
				}
				if handled.Add(1) == n {
					close(done)
				}
				return nil
			})
			ctx, stop := context.WithCancel(context.Background())
			stopped := make(chan error, 1)
			go func() { stopped <- w.Run(ctx) }()
			select {
			case <-done:
			case <-time.After(time.Minute):
				b.Fatal("the long handlers did not finish in a minute")
			}
			stop()
			<-stopped
			redelivered := 0
			for _, k := range seen {
				redelivered += k - 1
			}
			b.ReportMetric(float64(redelivered), "redeliveries")
			b.ReportMetric(float64(len(seen)), "messages")
		}
	})
}

// BenchmarkWorkerExtend holds 10,000 messages in flight, each with a handler that runs for 40 s
// under a visibility of 15 s, so that every lease is extended every 5 s (2,000 extends a second
// in all, in bursts: the leases were taken together): it reports the extends a second the engine
// served, the leases lost (goal 0), on redisq the scripts Redis ran per extend (counted by Redis,
// INFO commandstats before and after: the writer groups the extends of one shard in one script),
// the commands Redis ran per extend (redis-calls: every command it counts, those the scripts call
// included, and the INFO of the measure) and Redis's CPU per extend (the machine's load included), and
// on tockd the requests per extend (the client coalesces concurrent Extends into requests of
// several receipts).
//
//	cd bench && go test -run '^$' -bench WorkerExtend -benchtime 1x -count 3
func BenchmarkWorkerExtend(b *testing.B) {
	workerEngines(b, func(b *testing.B, e queue.Engine, rdb *redis.Client, sent *sentCommands, reqs *pathCounts) {
		const n, vis, hold = 10_000, 15 * time.Second, 40 * time.Second
		for i := 0; b.Loop(); i++ {
			topic := fmt.Sprintf("ext%d", i)
			for j := 0; j < n; j += 1000 {
				ms := make([]queue.Message, 1000)
				for k := range ms {
					ms[k] = queue.Message{Topic: topic, Payload: workerPayload}
				}
				if _, err := e.PutBatch(context.Background(), ms); err != nil {
					b.Fatal(err)
				}
			}
			ce := &countingEngine{Engine: e}
			var running, handled, lost atomic.Int64
			all := make(chan struct{})
			done := make(chan struct{})
			w := worker.New(ce, worker.WithConcurrency(n), worker.WithMaxReceive(1000), worker.WithVisibility(vis),
				worker.WithLogger(slog.New(slog.DiscardHandler)))
			w.HandleFunc(topic, func(ctx context.Context, d queue.Delivery) error {
				if running.Add(1) == n {
					close(all)
				}
				select {
				case <-time.After(hold):
				case <-ctx.Done():
					lost.Add(1)
					return context.Cause(ctx)
				}
				if handled.Add(1) == n {
					close(done)
				}
				return nil
			})
			ctx, stop := context.WithCancel(context.Background())
			stopped := make(chan error, 1)
			go func() { stopped <- w.Run(ctx) }()
			select {
			case <-all:
			case <-time.After(time.Minute):
				b.Fatalf("%d of %d handlers running after a minute", running.Load(), n)
			}
			// Measure over the middle of the hold, while all n are in flight.
			time.Sleep(vis / 3)
			ext0, t0 := ce.extends.Load(), time.Now()
			var calls0, cpu0 float64
			var reqs0 int64
			var redisCalls0 float64
			if reqs != nil {
				reqs0 = reqs.get(api.PathExtend)
			}
			var cpu func() float64
			if rdb != nil {
				calls0 = scriptCalls(b, rdb)
				redisCalls0 = redisCalls(b, rdb)
				cpu = cpuReader(b, rdb.Options().Addr)
				cpu0 = cpu()
			}
			time.Sleep(vis)
			ext, took := ce.extends.Load()-ext0, time.Since(t0)
			b.ReportMetric(float64(ext)/took.Seconds(), "extends/s")
			if reqs != nil {
				b.ReportMetric(float64(reqs.get(api.PathExtend)-reqs0)/float64(ext), "requests/extend")
			}
			if rdb != nil {
				b.ReportMetric((scriptCalls(b, rdb)-calls0)/float64(ext), "scripts/extend")
				b.ReportMetric((redisCalls(b, rdb)-redisCalls0)/float64(ext), "redis-calls/extend")
				b.ReportMetric((cpu()-cpu0)*1e6/float64(ext), "redis-µs/extend")
			}
			select {
			case <-done:
			case <-time.After(time.Minute):
			}
			stop()
			<-stopped
			b.ReportMetric(float64(lost.Load()), "leases-lost")
		}
	})
}

// scriptCalls returns the scripts Redis has run (EVALSHA, EVAL and FCALL calls) since it started.
func scriptCalls(b *testing.B, rdb *redis.Client) float64 {
	return commandCalls(b, rdb, "cmdstat_evalsha:", "cmdstat_eval:", "cmdstat_fcall:")
}

// redisCalls returns the commands Redis has run since it started, those that scripts call
// included.
func redisCalls(b *testing.B, rdb *redis.Client) float64 {
	return commandCalls(b, rdb, "cmdstat_")
}

// commandCalls returns the calls Redis counts (INFO commandstats) of the commands whose lines
// begin with one of prefixes.
func commandCalls(b *testing.B, rdb *redis.Client, prefixes ...string) float64 {
	s, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	n := 0.0
	for _, line := range strings.Split(s, "\r\n") {
		for _, c := range prefixes {
			if _, v, ok := strings.Cut(line, ":"); ok && strings.HasPrefix(line, c) {
				for _, f := range strings.Split(v, ",") {
					if x, ok := strings.CutPrefix(f, "calls="); ok {
						k, _ := strconv.ParseFloat(x, 64)
						n += k
					}
				}
				break
			}
		}
	}
	return n
}
