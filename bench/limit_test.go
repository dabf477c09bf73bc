package bench

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tockwheel/tock/client"
	"github.com/tockwheel/tock/delayq"
	"github.com/tockwheel/tock/queue"
	"github.com/tockwheel/tock/redisq"
	"github.com/tockwheel/tock/server"
)

var limitSeconds = flag.Int("limit.seconds", 60, "how long BenchmarkRateLimit receives")

// BenchmarkRateLimit limits a topic to 1,000 deliveries a second with a burst of 100, keeps it
// full, and has 8 consumers receive (up to 100 at a time) and ack for -limit.seconds: on delayq
// embedded; on redisq with the consumers on 3 Queues of one deployment, each with its own Redis
// client (3, 3 and 2 consumers, as 3 processes would have); and on tockd over HTTP with the
// consumers in 3 clients of their own, each its own HTTP connections. It reports the
// deliveries a second over the run (goal: within 1% of 1,000), and the most deliveries in any
// window of one second (by the consumers' clocks, at the return of each Receive), which the limit
// bounds by 1,000 + the burst.
//
//	cd bench && go test -run '^$' -bench RateLimit -benchtime 1x -count 3
func BenchmarkRateLimit(b *testing.B) {
	const rate, burst = 1000, 100
	run := func(b *testing.B, l queue.Limiter, consumers []queue.Engine) {
		ctx := context.Background()
		dur := time.Duration(*limitSeconds) * time.Second
		n := int(rate*dur.Seconds()) + 20_000
		for i := 0; i < n; i += 1000 {
			ms := make([]queue.Message, 1000)
			for j := range ms {
				ms[j] = queue.Message{Topic: "limited", Payload: workerPayload}
			}
			if _, err := l.PutBatch(ctx, ms); err != nil {
				b.Fatal(err)
			}
		}
		if err := l.SetLimit(ctx, "limited", queue.Limit{Rate: rate, Burst: burst}); err != nil {
			b.Fatal(err)
		}
		var mu sync.Mutex
		var at []time.Duration
		start := time.Now()
		rctx, stop := context.WithTimeout(ctx, dur)
		defer stop()
		var wg sync.WaitGroup
		for _, e := range consumers {
			wg.Go(func() {
				for rctx.Err() == nil {
					ds, err := e.Receive(rctx, "limited", 100, time.Minute)
					now := time.Since(start)
					if err != nil {
						return
					}
					mu.Lock()
					for range ds {
						at = append(at, now)
					}
					mu.Unlock()
					rcs := make([]string, len(ds))
					for i, d := range ds {
						rcs[i] = d.Receipt
					}
					if err := e.Ack(ctx, rcs...); err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		sort.Slice(at, func(i, j int) bool { return at[i] < at[j] })
		peak := 0
		for i, j := 0, 0; i < len(at); i++ {
			for at[i]-at[j] >= time.Second {
				j++
			}
			peak = max(peak, i-j+1)
		}
		b.ReportMetric(float64(len(at))/dur.Seconds(), "deliveries/s")
		b.ReportMetric(float64(peak), "max-per-1s")
		l.SetLimit(ctx, "limited", queue.Limit{})
	}
	b.Run("delayq", func(b *testing.B) {
		for b.Loop() {
			q, err := delayq.Open(b.TempDir())
			if err != nil {
				b.Fatal(err)
			}
			cs := make([]queue.Engine, 8)
			for i := range cs {
				cs[i] = q
			}
			run(b, q, cs)
			q.Close()
		}
	})
	b.Run("redisq-3-queues", func(b *testing.B) {
		srv, _ := redisServer(b)
		if srv == nil {
			b.Skip("no redis-server")
		}
		for i := 0; b.Loop(); i++ {
			prefix := fmt.Sprintf("lim%d", i)
			var cs []queue.Engine
			var first *redisq.Queue
			for _, k := range []int{3, 3, 2} {
				rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 64})
				q := openRedisq(b, rdb, redisq.WithPrefix(prefix))
				if first == nil {
					first = q
				}
				for range k {
					cs = append(cs, q)
				}
			}
			run(b, first, cs)
		}
	})
	b.Run("tockd-http-3-clients", func(b *testing.B) {
		for b.Loop() {
			q, err := delayq.Open(b.TempDir())
			if err != nil {
				b.Fatal(err)
			}
			ts := httptest.NewServer(server.New(q, server.WithLogger(slog.New(slog.DiscardHandler))))
			var cs []queue.Engine
			for _, k := range []int{3, 3, 2} {
				c, err := client.New(ts.URL, client.WithHTTPClient(&http.Client{Transport: &http.Transport{}}))
				if err != nil {
					b.Fatal(err)
				}
				e := c.Engine()
				for range k {
					cs = append(cs, e)
				}
			}
			run(b, q, cs)
			ts.Close()
			q.Close()
		}
	})
}
