package redisq

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tockwheel/tock/queue"
)

// scriptUsec returns the calls and microseconds Redis spent in FCALL (the scripts), from INFO
// commandstats.
func scriptUsec(b *testing.B, rdb *redis.Client) (calls, usec int64) {
	s, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(s, "\r\n") {
		if !strings.HasPrefix(line, "cmdstat_fcall:") {
			continue
		}
		for _, f := range strings.Split(strings.TrimPrefix(line, "cmdstat_fcall:"), ",") {
			k, v, _ := strings.Cut(f, "=")
			switch k {
			case "calls":
				calls, _ = strconv.ParseInt(v, 10, 64)
			case "usec":
				usec, _ = strconv.ParseInt(v, 10, 64)
			}
		}
	}
	return calls, usec
}

// redisCPU returns the CPU time of Redis's main thread (user and system), in microseconds.
func redisCPU(b *testing.B, rdb *redis.Client) float64 {
	s, err := rdb.Info(context.Background(), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	var sum float64
	for _, line := range strings.Split(s, "\r\n") {
		k, v, _ := strings.Cut(line, ":")
		if k == "used_cpu_user_main_thread" || k == "used_cpu_sys_main_thread" {
			f, _ := strconv.ParseFloat(v, 64)
			sum += f * 1e6
		}
	}
	return sum
}

// BenchmarkReceiveBurst puts 1,000 messages due at the same instant, one Put each, as the fires
// of 1,000 schedules of one second are (IDs of the same form, no payload), and has 4 Receives of
// up to 500 waiting when they come due; it reports Redis's time in scripts per message leased
// (redis-us/msg, from INFO commandstats; redis-cpu-us/msg, the CPU time of Redis's main thread
// over the same span), the scripts run (scripts/op), and when the first and the last Receive
// returned after the due instant (first-ms, last-ms).
//
//	go test ./redisq -run '^$' -bench ReceiveBurst -benchtime 5x
func BenchmarkReceiveBurst(b *testing.B) {
	srv := startServer(b)
	rdb := singleClient(b, srv.Addr)
	q := openQueue(b, rdb)
	ctx := context.Background()
	const n, receivers = 1000, 4
	var first, last, usecs, scripts, cpu float64
	for b.Loop() {
		due := time.Now().Add(1500 * time.Millisecond).Truncate(time.Millisecond)
		nominal := due.UTC().Format(time.RFC3339Nano)
		msgs := make([]queue.Message, n)
		for i := range msgs {
			msgs[i] = queue.Message{ID: fmt.Sprintf("s%d@%s", i, nominal), Topic: "t", DeliverAt: due}
		}
		// One Put each, as the schedules' fires are put (each in its name's shard).
		var pw sync.WaitGroup
		for w := range 16 {
			pw.Go(func() {
				for i := w; i < n; i += 16 {
					if _, err := q.Put(ctx, msgs[i]); err != nil {
						b.Error(err)
					}
				}
			})
		}
		pw.Wait()
		time.Sleep(time.Until(due) - 300*time.Millisecond)
		c0, u0 := scriptUsec(b, rdb)
		cpu0 := redisCPU(b, rdb)
		var mu sync.Mutex
		var got int
		var ends []time.Duration
		var receipts []string
		var wg sync.WaitGroup
		for range receivers {
			wg.Go(func() {
				for {
					mu.Lock()
					done := got >= n
					mu.Unlock()
					if done {
						return
					}
					rctx, cancel := context.WithTimeout(ctx, 3*time.Second)
					ds, err := q.Receive(rctx, "t", 500, time.Minute)
					cancel()
					at := time.Since(due)
					if err != nil {
						return
					}
					mu.Lock()
					got += len(ds)
					ends = append(ends, at)
					for _, d := range ds {
						receipts = append(receipts, d.Receipt)
					}
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		c1, u1 := scriptUsec(b, rdb)
		cpu += redisCPU(b, rdb) - cpu0
		if got != n {
			b.Fatalf("received %d of %d", got, n)
		}
		lo, hi := ends[0], ends[0]
		for _, e := range ends {
			lo, hi = min(lo, e), max(hi, e)
		}
		first += float64(lo.Microseconds()) / 1000
		last += float64(hi.Microseconds()) / 1000
		usecs += float64(u1 - u0)
		scripts += float64(c1 - c0)
		if err := q.Ack(ctx, receipts...); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(first/float64(b.N), "first-ms")
	b.ReportMetric(last/float64(b.N), "last-ms")
	b.ReportMetric(usecs/float64(b.N)/n, "redis-us/msg")
	b.ReportMetric(scripts/float64(b.N), "scripts/op")
	b.ReportMetric(cpu/float64(b.N)/n, "redis-cpu-us/msg")
}

// BenchmarkReceiveScript runs the receive script on one shard, one after another: empty (nothing
// ready) and leasing 31 messages, and reports Redis's time per script (redis-us/script).
func BenchmarkReceiveScript(b *testing.B) {
	srv := startServer(b)
	rdb := singleClient(b, srv.Addr)
	q := openQueue(b, rdb)
	ctx := context.Background()
	ts := q.topic("t")
	for _, n := range []int{0, 31} {
		b.Run(fmt.Sprint("lease=", n), func(b *testing.B) {
			var usec, calls int64
			var cpu float64
			for b.Loop() {
				b.StopTimer()
				shard := 0
				if n > 0 {
					msgs := make([]queue.Message, n)
					for i := range msgs {
						msgs[i] = queue.Message{ID: fmt.Sprintf("s%d@%d", i, time.Now().UnixNano()), Topic: "t"}
					}
					if _, err := q.PutBatch(ctx, msgs); err != nil {
						b.Fatal(err)
					}
					shard = q.lay.home(msgs[0].ID)
				}
				c0, u0 := scriptUsec(b, rdb)
				cpu0 := redisCPU(b, rdb)
				b.StartTimer()
				ds, err := q.receiveShard(ctx, ts, shard, max(n, 1), 60000, nil)
				b.StopTimer()
				if err != nil || len(ds) != n {
					b.Fatalf("leased %d of %d: %v", len(ds), n, err)
				}
				cpu += redisCPU(b, rdb) - cpu0
				c1, u1 := scriptUsec(b, rdb)
				usec += u1 - u0
				calls += c1 - c0
				b.StartTimer()
			}
			b.ReportMetric(float64(usec)/float64(calls), "redis-us/script")
			b.ReportMetric(cpu/float64(b.N), "redis-cpu-us/op")
		})
	}
}

// BenchmarkShardInstant measures Redis's time in one receive script (INFO commandstats), on a
// shard holding 62 messages due at one instant, as one of 16 shards holds a second's fires of
// 1,000 schedules: the script that leases half of them (lease-us, as each of two consumers'
// Receives asks a shard for its share), the one that leases the other half (lease2-us), and the
// one that finds the shard emptied (empty-us); then the ack of the 62 receipts, as one script
// (ack-us).
//
//	go test ./redisq -run '^$' -bench ShardInstant -benchtime 200x
func BenchmarkShardInstant(b *testing.B) {
	srv := startServer(b)
	rdb := singleClient(b, srv.Addr)
	q := openQueue(b, rdb)
	ctx := context.Background()
	const n = 62
	var ids []string
	for i := 0; len(ids) < n; i++ {
		if id := fmt.Sprintf("s%d@2026-11-28T04:52:37Z", i); q.lay.home(id) == 0 {
			ids = append(ids, id)
		}
	}
	ts := q.topic("t")
	usec := func() float64 {
		_, u := scriptUsec(b, rdb)
		return float64(u)
	}
	var lease, lease2, empty, ack float64
	for b.Loop() {
		due := time.Now().Truncate(time.Millisecond)
		for _, id := range ids {
			if _, err := q.Put(ctx, queue.Message{ID: id, Topic: "t", DeliverAt: due}); err != nil {
				b.Fatal(err)
			}
		}
		u0 := usec()
		d1, err := q.receiveShard(ctx, ts, 0, n/2, 60000, nil)
		if err != nil || len(d1) != n/2 {
			b.Fatalf("leased %d of %d: %v", len(d1), n/2, err)
		}
		u1 := usec()
		d2, err := q.receiveShard(ctx, ts, 0, n/2, 60000, nil)
		if err != nil || len(d2) != n/2 {
			b.Fatalf("leased %d of %d: %v", len(d2), n/2, err)
		}
		u2 := usec()
		d3, err := q.receiveShard(ctx, ts, 0, n/2, 60000, nil)
		if err != nil || len(d3) != 0 {
			b.Fatalf("leased %d of 0: %v", len(d3), err)
		}
		u3 := usec()
		var receipts []string
		for _, d := range append(d1, d2...) {
			receipts = append(receipts, d.Receipt)
		}
		if err := q.Ack(ctx, receipts...); err != nil {
			b.Fatal(err)
		}
		u4 := usec()
		lease += u1 - u0
		lease2 += u2 - u1
		empty += u3 - u2
		ack += u4 - u3
	}
	b.ReportMetric(lease/float64(b.N), "lease-us")
	b.ReportMetric(lease2/float64(b.N), "lease2-us")
	b.ReportMetric(empty/float64(b.N), "empty-us")
	b.ReportMetric(ack/float64(b.N), "ack-us")
}
