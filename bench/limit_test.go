package bench

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
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

var (
	limitSeconds = flag.Int("limit.seconds", 60, "how long BenchmarkRateLimit receives")
	limitAck     = flag.Bool("limit.ack", false, "BenchmarkRateLimit's consumers ack what they receive, "+
		"so that the engine forgets when it granted it: only the consumers' clocks count the windows")
)

// BenchmarkRateLimit limits a topic to 1,000 deliveries a second with a burst of 100, keeps it
// full, and has 8 consumers receive (up to 100 at a time) for -limit.seconds: on delayq
// embedded; on redisq with the consumers on 3 Queues of one deployment, each with its own Redis
// client (3, 3 and 2 consumers, as 3 processes would have); and on tockd over HTTP with the
// consumers in 3 clients of their own, each its own HTTP connections. It reports the
// deliveries a second over the run (goal: within 1% of 1,000) and the most deliveries in any
// window of one second, which the limit bounds by 1,000 + the burst, by two clocks:
//
//   - engine-deliveries/s and engine-max-per-1s: by the engine's clock, when its limiter granted
//     each delivery. On delayq (embedded, and under tockd) a lease is granted when its permit is
//     taken: its deadline less the visibility, read with Admin.Messages after the run (the
//     consumers do not ack, and lease for longer than the run, so that every lease is still there
//     to be read). On redisq the permit script grants them, by Redis's clock: the permits kept in
//     {T}:lp:limited, each scored by its grant plus the same span; lease-max-per-1s counts the
//     leases' own times, taken by the shards' receive scripts after the permit;
//   - deliveries/s and max-per-1s: by the consumers' clocks, at the return of each Receive, which
//     the machine's scheduling moves about.
//
// idle-lost/s is the consumers' share of a shortfall: the permits a bucket of that rate and burst
// would have lost to its cap over the engine's grant times, while no consumer asked for one.
//
// With -limit.ack the consumers ack each receive before the next, and only their clocks count.
//
//	cd bench && go test -run '^$' -bench RateLimit -benchtime 1x -count 3
func BenchmarkRateLimit(b *testing.B) {
	const rate, burst = 1000, 100
	// run measures the limit on l through consumers; rdb and prefix name the Redis and the
	// deployment of redisq (nil for the other engines).
	run := func(b *testing.B, l queue.Limiter, consumers []queue.Engine, rdb *redis.Client, prefix string) {
		ctx := context.Background()
		dur := time.Duration(*limitSeconds) * time.Second
		vis := dur + 5*time.Minute // no lease ends during the run
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
		var scripts0, redisCPU0 float64
		var redisCPU func() float64
		if rdb != nil {
			scripts0 = scriptCalls(b, rdb)
			redisCPU = cpuReader(b, rdb.Options().Addr)
			redisCPU0 = redisCPU()
		}
		cpu0 := processCPU(b)
		start := time.Now()
		rctx, stop := context.WithTimeout(ctx, dur)
		defer stop()
		var wg sync.WaitGroup
		for _, e := range consumers {
			wg.Go(func() {
				for rctx.Err() == nil {
					ds, err := e.Receive(rctx, "limited", 100, vis)
					now := time.Since(start)
					if err != nil {
						return
					}
					mu.Lock()
					for range ds {
						at = append(at, now)
					}
					mu.Unlock()
					if !*limitAck {
						continue
					}
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
		b.ReportMetric(float64(processCPU(b)-cpu0)/1e3/float64(len(at)), "cpu-µs/delivery")
		if rdb != nil {
			b.ReportMetric((scriptCalls(b, rdb)-scripts0)/float64(len(at)), "scripts/delivery")
			b.ReportMetric((redisCPU()-redisCPU0)*1e6/float64(len(at)), "redis-µs/delivery")
		}
		b.ReportMetric(float64(len(at))/dur.Seconds(), "deliveries/s")
		b.ReportMetric(float64(mostInASecond(at)), "max-per-1s")
		if !*limitAck {
			// By the engine's clock: when the limiter granted each delivery. A Receive whose
			// context ends as the run ends may have leased messages that it does not return: the
			// engine counts them, the consumers do not.
			granted := grantTimes(b, l, "limited", vis)
			if rdb != nil {
				// redisq's limiter is the permit script, by Redis's clock; the leases are
				// granted after it, by the receive scripts of the shards, up to a round trip
				// of the consumer's later.
				b.ReportMetric(float64(mostInASecond(granted)), "lease-max-per-1s")
				granted = permitTimes(b, rdb, prefix, "limited")
			}
			b.ReportMetric(float64(len(granted))/dur.Seconds(), "engine-deliveries/s")
			b.ReportMetric(float64(mostInASecond(granted)), "engine-max-per-1s")
			b.ReportMetric(bucketOverflow(granted, rate, burst)/dur.Seconds(), "idle-lost/s")
		}
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
			run(b, q, cs, nil, "")
			q.Close()
		}
	})
	b.Run("redisq-3-queues", func(b *testing.B) {
		srv, rdb := redisServer(b)
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
			run(b, first, cs, rdb, prefix)
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
			run(b, q, cs, nil, "")
			ts.Close()
			q.Close()
		}
	})
}

// bucketOverflow returns how many permits a token bucket of rate and burst, full at the first of
// the grants at and taking one token for each, would have lost to its cap: the refill of the
// times no consumer asked for a permit while the bucket was full. It tells the shortfall of the
// consumers (they were busy elsewhere, or not scheduled) from that of the limiter.
func bucketOverflow(at []time.Duration, rate, burst float64) float64 {
	at = slices.Clone(at)
	slices.Sort(at)
	if len(at) == 0 {
		return 0
	}
	tokens, lost := burst, 0.0
	for i, t := range at {
		if i > 0 {
			tokens += (t - at[i-1]).Seconds() * rate
			if tokens > burst {
				lost += tokens - burst
				tokens = burst
			}
		}
		tokens--
	}
	return lost
}

// mostInASecond returns the most of the times at that fall in any window of one second.
func mostInASecond(at []time.Duration) int {
	at = slices.Clone(at)
	slices.Sort(at)
	most := 0
	for i, j := 0, 0; i < len(at); i++ {
		for at[i]-at[j] >= time.Second {
			j++
		}
		most = max(most, i-j+1)
	}
	return most
}

// grantTimes returns when the engine granted the leases of topic, all taken for vis, as times
// on its clock (from any fixed origin): their deadlines less vis.
func grantTimes(b *testing.B, e queue.Engine, topic string, vis time.Duration) []time.Duration {
	a, ok := e.(queue.Admin)
	if !ok {
		b.Fatalf("%T is not a queue.Admin", e)
	}
	var out []time.Duration
	cursor := ""
	for {
		page, next, err := a.Messages(context.Background(), topic, queue.Leased, cursor, queue.MaxPage)
		if err != nil {
			b.Fatal(err)
		}
		for _, m := range page {
			out = append(out, time.Duration(m.LeaseDeadline.Add(-vis).UnixNano()))
		}
		if next == "" {
			return out
		}
		cursor = next
	}
}

// permitTimes returns when redisq's permit script granted the permits of topic that are still
// held, by Redis's clock: each permit's deadline in {T}:lp:<topic> on the topic's home shard is
// the time of its grant plus the same span (the visibility and a margin).
func permitTimes(b *testing.B, rdb *redis.Client, prefix, topic string) []time.Duration {
	ctx := context.Background()
	keys, err := rdb.Keys(ctx, "{"+prefix+"/*}:lp:"+topic).Result()
	if err != nil || len(keys) != 1 {
		b.Fatalf("the permits of %q under prefix %q: keys %v, %v", topic, prefix, keys, err)
	}
	zs, err := rdb.ZRangeWithScores(ctx, keys[0], 0, -1).Result()
	if err != nil {
		b.Fatal(err)
	}
	out := make([]time.Duration, len(zs))
	for i, z := range zs {
		out[i] = time.Duration(z.Score) * time.Millisecond
	}
	return out
}
