package bench

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"github.com/tockwheel/tock/internal/diskbench"
	"github.com/tockwheel/tock/internal/redistest"
	"github.com/tockwheel/tock/queue"
	"github.com/tockwheel/tock/redisq"
)

// The sizes of the Redis benchmarks, the by default; smaller ones make quick runs.
var (
	redisPending = flag.Int("redis.pending", 1_000_000, "messages pending in BenchmarkRedisMemory and BenchmarkRedisIdle")
	redisBurst   = flag.Int("redis.burst", 1_000_000, "messages due in one second in BenchmarkRedisBurst")
)

// redisServer starts a redis-server for a benchmark; nil when there is none (the benchmark skips).
func redisServer(b *testing.B, args ...string) (*redistest.Server, *redis.Client) {
	srv := redistest.Start(b, args...)
	if srv == nil {
		return nil, nil
	}
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 256})
	b.Cleanup(func() { rdb.Close() })
	return srv, rdb
}

func openRedisq(b *testing.B, rdb redis.UniversalClient, opts ...redisq.Option) *redisq.Queue {
	q, err := redisq.Open(context.Background(), rdb, opts...)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { q.Close() })
	return q
}

// info returns a numeric field of INFO on rdb.
func info(b *testing.B, rdb *redis.Client, section, field string) int64 {
	s, err := rdb.Info(context.Background(), section).Result()
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(s, "\r\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	b.Fatalf("INFO %s has no %s", section, field)
	return 0
}

// putAll puts n messages from 256 goroutines with put(i) and returns the rate.
func putAll(b *testing.B, n int, put func(i int) error) float64 {
	start := time.Now()
	if err := inParallel(n, 256, put); err != nil {
		b.Error(err)
	}
	return float64(n) / time.Since(start).Seconds()
}

// inParallel calls f(i) for every i in [0, n) from the given number of goroutines, and returns
// the errors: a goroutine stops at its first, and the others go on.
func inParallel(n, goroutines int, f func(i int) error) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make([]error, goroutines)
	for g := range errs {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
				if errs[g] = f(i); errs[g] != nil {
					return
				}
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// dueTimes are the due times the put and memory benchmarks give their messages: all at one
// instant an hour ahead (a campaign scheduled for a time: redisq orders entries of equal due time
// by ID, and its generated IDs grow with the put's millisecond, so that they land near the end of
// its index of scheduled messages, as chosen IDs would not), or an hour after each put (a delay,
// whose entries land at the end).
var dueTimes = []struct {
	name string
	at   func() func() time.Time
}{
	{"due=one-instant", func() func() time.Time {
		at := time.Now().Add(time.Hour)
		return func() time.Time { return at }
	}},
	{"due=rolling", func() func() time.Time {
		return func() time.Time { return time.Now().Add(time.Hour) }
	}},
}

// BenchmarkRedisPut schedules 100-byte messages an hour ahead (see dueTimes) from 256 goroutines,
// with asynq's scheduled tasks and with redisq, on one redis-server: without persistence, and
// with appendfsync always (each write fsynced before it is acknowledged: the durable setting of
// one server). Compare msgs/s within one run:
//
//	cd bench && go test -run '^$' -bench RedisPut -benchtime 200000x -count 5
func BenchmarkRedisPut(b *testing.B) {
	payload := make([]byte, 100)
	parallelism := max(1, 256/runtime.GOMAXPROCS(0))
	for _, c := range []struct {
		name string
		args []string
	}{
		{"server=no-fsync", nil},
		{"server=appendfsync-always", []string{"--appendonly", "yes", "--appendfsync", "always"}},
	} {
		for _, due := range dueTimes {
			b.Run(c.name+"/"+due.name+"/asynq", func(b *testing.B) {
				srv, _ := redisServer(b, c.args...)
				if srv == nil {
					return
				}
				client := asynq.NewClient(asynq.RedisClientOpt{Addr: srv.Addr, PoolSize: 256})
				defer client.Close()
				at := due.at()
				defer redisCPU(b, srv.Addr)()
				diskbench.Parallel(b, parallelism, func() error {
					_, err := client.Enqueue(asynq.NewTask("bench", payload), asynq.ProcessAt(at()))
					return err
				})
			})
			b.Run(c.name+"/"+due.name+"/redisq", func(b *testing.B) {
				srv, rdb := redisServer(b, c.args...)
				if srv == nil {
					return
				}
				q := openRedisq(b, rdb)
				at := due.at()
				ctx := context.Background()
				defer redisCPU(b, srv.Addr)()
				diskbench.Parallel(b, parallelism, func() error {
					_, err := q.Put(ctx, queue.Message{Topic: "bench", Payload: payload, DeliverAt: at()})
					return err
				})
			})
		}
	}
}

// BenchmarkRedisPutCluster puts as BenchmarkRedisPut does with redisq on a Redis Cluster of one
// master and of three (each with a replica, and the replica wait on): the cluster's reason to
// be is that three masters take more than one. Besides the throughput it reports the bound the
// busiest master's CPU time sets (see clusterCPU): on a machine with fewer cores than the
// cluster's processes need, the throughput measured is the machine's and the bound is Redis's.
//
//	cd bench && go test -run '^$' -bench RedisPutCluster -benchtime 200000x -count 5
func BenchmarkRedisPutCluster(b *testing.B) {
	payload := make([]byte, 100)
	parallelism := max(1, 256/runtime.GOMAXPROCS(0))
	for _, masters := range []int{1, 3} {
		b.Run(fmt.Sprintf("masters=%d", masters), func(b *testing.B) {
			c := redistest.StartCluster(b, redistest.ClusterConfig{Masters: masters, Replicas: 1})
			if c == nil {
				return
			}
			rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs(), PoolSize: 256, ClusterStateReloadInterval: 2 * time.Second})
			defer rdb.Close()
			q := openRedisq(b, rdb)
			at := time.Now().Add(time.Hour)
			ctx := context.Background()
			defer clusterCPU(b, c)()
			diskbench.Parallel(b, parallelism, func() error {
				_, err := q.Put(ctx, queue.Message{Topic: "bench", Payload: payload, DeliverAt: at})
				return err
			})
		})
	}
}

// clusterCPU reads the CPU time of every node of c and of this process, and returns a function
// that reports, for the time since:
//   - busiest-µs/msg: the CPU time per op of the master that spent the most;
//   - redis-bound-msgs/s: 1e6 / busiest-µs/msg, the most ops a second the masters can take, since
//     a redis-server runs commands on one thread and so spends at most one CPU-second a second;
//   - cores-busy: the CPU-seconds a second spent by all nodes (replicas too) and this process
//     together, which shows when the machine, not Redis, bounds the throughput measured.
func clusterCPU(b *testing.B, c *redistest.Cluster) func() {
	masters := c.Masters()
	isMaster := make(map[string]bool)
	for _, m := range masters {
		isMaster[m.Addr] = true
	}
	nodes := c.Nodes()
	reads := make([]func() float64, len(nodes))
	before := make([]float64, len(nodes))
	for i, n := range nodes {
		reads[i] = cpuReader(b, n.Addr)
		before[i] = reads[i]()
	}
	self := processCPU(b)
	start := time.Now()
	return func() {
		elapsed := time.Since(start).Seconds()
		busy := (processCPU(b) - self).Seconds()
		busiest := 0.0
		for i, n := range nodes {
			spent := reads[i]() - before[i]
			busy += spent
			if isMaster[n.Addr] {
				busiest = max(busiest, spent)
			}
		}
		perOp := busiest * 1e6 / float64(b.N)
		b.ReportMetric(perOp, "busiest-µs/msg")
		b.ReportMetric(1e6/perOp, "redis-bound-msgs/s")
		b.ReportMetric(busy/elapsed, "cores-busy")
	}
}

// BenchmarkRedisMemory measures Redis's memory per pending message (used_memory after putting
// -redis.pending messages of 100 bytes an hour ahead (see dueTimes) from 256 goroutines, less
// before, divided by their number), with asynq's scheduled tasks and with redisq:
//
//	cd bench && go test -run '^$' -bench RedisMemory -benchtime 1x -count 3
func BenchmarkRedisMemory(b *testing.B) {
	for _, due := range dueTimes {
		b.Run(due.name, func(b *testing.B) { benchmarkRedisMemory(b, due.at()) })
	}
}

func benchmarkRedisMemory(b *testing.B, at func() time.Time) {
	payload := make([]byte, 100)
	n := *redisPending
	// setup makes a producer with a client of its own, closed before the memory is read again,
	// so that the 256 connections' buffers are not counted.
	measure := func(b *testing.B, setup func(addr string) (put func() error, done func())) {
		srv, rdb := redisServer(b)
		if srv == nil {
			return
		}
		for b.Loop() {
			if err := rdb.FlushAll(context.Background()).Err(); err != nil {
				b.Fatal(err)
			}
			put, done := setup(srv.Addr)
			before := info(b, rdb, "memory", "used_memory")
			rate := putAll(b, n, func(int) error { return put() })
			done()
			after := info(b, rdb, "memory", "used_memory")
			b.ReportMetric(float64(after-before)/float64(n), "bytes/msg")
			b.ReportMetric(rate, "msgs/s")
		}
	}
	b.Run("asynq", func(b *testing.B) {
		measure(b, func(addr string) (func() error, func()) {
			client := asynq.NewClient(asynq.RedisClientOpt{Addr: addr, PoolSize: 256})
			return func() error {
				_, err := client.Enqueue(asynq.NewTask("bench", payload), asynq.ProcessAt(at()))
				return err
			}, func() { client.Close() }
		})
	})
	b.Run("redisq", func(b *testing.B) {
		measure(b, func(addr string) (func() error, func()) {
			c := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 256})
			q, err := redisq.Open(context.Background(), c, redisq.WithPrefix(fmt.Sprint("mem", time.Now().UnixNano())))
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			return func() error {
					_, err := q.Put(ctx, queue.Message{Topic: "bench", Payload: payload, DeliverAt: at()})
					return err
				}, func() {
					q.Close()
					c.Close()
				}
		})
	})
}

// BenchmarkRedisLateness schedules 2,000 messages due over one second, two seconds ahead, and
// receives them, reporting how late each arrived after its due time and how many came early: with
// redisq, and with asynq (its scheduler checks for due tasks every second here, five by default,
// and keeps due times in whole seconds), each on its own redis-server.
//
//	cd bench && go test -run '^$' -bench RedisLateness -benchtime 1x -count 5
func BenchmarkRedisLateness(b *testing.B) {
	const n = 2000
	b.Run("redisq", func(b *testing.B) {
		srv, rdb := redisServer(b)
		if srv == nil {
			return
		}
		for b.Loop() {
			q := openRedisq(b, rdb, redisq.WithPrefix(fmt.Sprint("late", time.Now().UnixNano())))
			ctx := context.Background()
			due := make(map[string]time.Time, n)
			base := time.Now().Add(2 * time.Second)
			for i := range n {
				at := base.Add(time.Duration(i) * time.Second / n)
				id, err := q.Put(ctx, queue.Message{Topic: "t", DeliverAt: at})
				if err != nil {
					b.Fatal(err)
				}
				due[id] = at
			}
			var mu sync.Mutex
			var late []time.Duration
			var wg sync.WaitGroup
			for range 4 {
				wg.Go(func() {
					for {
						mu.Lock()
						done := len(late) >= n
						mu.Unlock()
						if done {
							return
						}
						rctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
						ds, _ := q.Receive(rctx, "t", 100, time.Minute)
						cancel()
						now := time.Now()
						receipts := make([]string, len(ds))
						mu.Lock()
						for i, d := range ds {
							late = append(late, now.Sub(due[d.ID]))
							receipts[i] = d.Receipt
						}
						mu.Unlock()
						if len(ds) > 0 {
							_ = q.Ack(ctx, receipts...)
						}
					}
				})
			}
			wg.Wait()
			reportLateness(b, late)
		}
	})
	b.Run("asynq", func(b *testing.B) {
		srv, _ := redisServer(b)
		if srv == nil {
			return
		}
		for b.Loop() {
			late := asynqDeliveries(b, srv.Addr, n, func(i int) time.Time {
				return time.Now().Truncate(time.Second).Add(3 * time.Second).Add(time.Duration(i) * time.Second / n)
			})
			reportLateness(b, late)
		}
	})
}

// asynqDeliveries enqueues n tasks due at due(i), runs an asynq server until all are processed,
// and returns how late each was.
func asynqDeliveries(b *testing.B, addr string, n int, due func(i int) time.Time) []time.Duration {
	opt := asynq.RedisClientOpt{Addr: addr, PoolSize: 256}
	client := asynq.NewClient(opt)
	defer client.Close()
	var mu sync.Mutex
	dues := make([]time.Time, n)
	late := make([]time.Duration, 0, n)
	done := make(chan struct{})
	server := asynq.NewServer(opt, asynq.Config{Concurrency: 64, DelayedTaskCheckInterval: time.Second, LogLevel: asynq.ErrorLevel})
	mux := asynq.NewServeMux()
	mux.HandleFunc("t", func(_ context.Context, t *asynq.Task) error {
		now := time.Now()
		i, _ := strconv.Atoi(string(t.Payload()))
		mu.Lock()
		defer mu.Unlock()
		late = append(late, now.Sub(dues[i]))
		if len(late) == n {
			close(done)
		}
		return nil
	})
	for i := range n {
		dues[i] = due(i)
	}
	putAll(b, n, func(i int) error {
		_, err := client.Enqueue(asynq.NewTask("t", []byte(strconv.Itoa(i))), asynq.ProcessAt(dues[i]))
		return err
	})
	if err := server.Start(mux); err != nil {
		b.Fatal(err)
	}
	defer server.Shutdown()
	select {
	case <-done:
	case <-time.After(30 * time.Minute):
		b.Fatalf("asynq delivered %d of %d in 30 minutes", len(late), n)
	}
	mu.Lock()
	defer mu.Unlock()
	return late
}

// BenchmarkRedisBurst puts -redis.burst messages due in the same second and measures the time
// from that second to the delivery of the last: redisq (16 consumers receiving 1,000 at a time)
// and asynq (64 workers). The due second is chosen so that every Put has returned before it.
//
//	cd bench && go test -run '^$' -bench RedisBurst -benchtime 1x
func BenchmarkRedisBurst(b *testing.B) {
	n := *redisBurst
	b.Run("redisq", func(b *testing.B) {
		srv, rdb := redisServer(b)
		if srv == nil {
			return
		}
		for b.Loop() {
			q := openRedisq(b, rdb, redisq.WithPrefix(fmt.Sprint("burst", time.Now().UnixNano())))
			ctx := context.Background()
			at := time.Now().Truncate(time.Second).Add(time.Duration(n/20_000+5) * time.Second)
			putAll(b, n, func(int) error {
				_, err := q.Put(ctx, queue.Message{Topic: "t", DeliverAt: at})
				return err
			})
			if time.Now().After(at) {
				b.Fatalf("the puts ended %v after the messages' due time", time.Since(at))
			}
			var got atomic.Int64
			var early atomic.Int64
			var last atomic.Int64
			var wg sync.WaitGroup
			for range 16 {
				wg.Go(func() {
					for got.Load() < int64(n) {
						rctx, cancel := context.WithTimeout(ctx, time.Second)
						ds, _ := q.Receive(rctx, "t", 1000, time.Minute)
						cancel()
						now := time.Now()
						if now.Before(at) && len(ds) > 0 {
							early.Add(int64(len(ds)))
						}
						receipts := make([]string, len(ds))
						for i, d := range ds {
							receipts[i] = d.Receipt
						}
						if len(ds) > 0 {
							_ = q.Ack(ctx, receipts...)
							got.Add(int64(len(ds)))
							last.Store(now.UnixNano())
						}
					}
				})
			}
			wg.Wait()
			b.ReportMetric(time.Unix(0, last.Load()).Sub(at).Seconds(), "s-to-deliver-all")
			b.ReportMetric(float64(early.Load()), "early")
		}
	})
	b.Run("asynq", func(b *testing.B) {
		srv, _ := redisServer(b)
		if srv == nil {
			return
		}
		for b.Loop() {
			at := time.Now().Truncate(time.Second).Add(time.Duration(n/5_000+5) * time.Second)
			late := asynqDeliveries(b, srv.Addr, n, func(int) time.Time { return at })
			var worst time.Duration
			for _, l := range late {
				worst = max(worst, l)
			}
			b.ReportMetric(worst.Seconds(), "s-to-deliver-all")
		}
	})
}

// BenchmarkRedisIdle measures the commands per second that an idle deployment costs Redis: three
// processes' worth of consumers (three redisq Queues with four waiting Receive calls each, or
// three asynq servers of ten workers) and -redis.pending messages pending an hour ahead, over 30
// seconds after they settled (INFO's total_commands_processed, which counts the commands scripts
// run too).
//
//	cd bench && go test -run '^$' -bench RedisIdle -benchtime 1x
func BenchmarkRedisIdle(b *testing.B) {
	n := *redisPending
	payload := make([]byte, 100)
	const window = 30 * time.Second
	measure := func(b *testing.B, rdb *redis.Client) {
		time.Sleep(5 * time.Second)
		before := info(b, rdb, "stats", "total_commands_processed")
		time.Sleep(window)
		after := info(b, rdb, "stats", "total_commands_processed")
		b.ReportMetric(float64(after-before-1)/window.Seconds(), "cmds/s")
	}
	b.Run("redisq", func(b *testing.B) {
		srv, rdb := redisServer(b)
		if srv == nil {
			return
		}
		for b.Loop() {
			prefix := fmt.Sprint("idle", time.Now().UnixNano())
			ctx, cancel := context.WithCancel(context.Background())
			var qs []*redisq.Queue
			for range 3 {
				c := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 256})
				b.Cleanup(func() { c.Close() })
				qs = append(qs, openRedisq(b, c, redisq.WithPrefix(prefix)))
			}
			at := time.Now().Add(time.Hour)
			putAll(b, n, func(i int) error {
				_, err := qs[i%3].Put(ctx, queue.Message{Topic: "t", Payload: payload, DeliverAt: at})
				return err
			})
			var wg sync.WaitGroup
			for _, q := range qs {
				for range 4 {
					wg.Go(func() { _, _ = q.Receive(ctx, "t", 10, time.Minute) })
				}
			}
			measure(b, rdb)
			cancel()
			wg.Wait()
		}
	})
	b.Run("asynq", func(b *testing.B) {
		srv, rdb := redisServer(b)
		if srv == nil {
			return
		}
		for b.Loop() {
			opt := asynq.RedisClientOpt{Addr: srv.Addr, PoolSize: 256}
			client := asynq.NewClient(opt)
			at := time.Now().Add(time.Hour)
			putAll(b, n, func(int) error {
				_, err := client.Enqueue(asynq.NewTask("t", payload), asynq.ProcessAt(at))
				return err
			})
			client.Close()
			var servers []*asynq.Server
			for range 3 {
				s := asynq.NewServer(opt, asynq.Config{Concurrency: 10, LogLevel: asynq.ErrorLevel})
				mux := asynq.NewServeMux()
				mux.HandleFunc("t", func(context.Context, *asynq.Task) error { return nil })
				if err := s.Start(mux); err != nil {
					b.Fatal(err)
				}
				servers = append(servers, s)
			}
			measure(b, rdb)
			for _, s := range servers {
				s.Shutdown()
			}
		}
	})
}

// BenchmarkRedisPage pages through -redis.pending scheduled messages of 100 bytes (due at random
// over an hour, an hour ahead), 100 at a time, one page per op: with redisq's Messages (16 shards
// on one redis-server), and with asynq's Inspector.ListScheduledTasks, each on its own server. It
// reports per page the commands Redis ran (INFO's total_commands_processed, which counts the
// commands scripts run too) and Redis's CPU time (used_cpu_user and used_cpu_sys), and the most
// Redis memory grew while paging (used_memory sampled every 100 pages, less before). With
// -benchtime 10000x and the default 1,000,000 messages, it pages through all of them:
//
//	cd bench && go test -run '^$' -bench RedisPage -benchtime 10000x -count 3
func BenchmarkRedisPage(b *testing.B) {
	n := *redisPending
	const limit = 100
	payload := make([]byte, 100)
	due := func() time.Time {
		return time.Now().Add(time.Hour + time.Duration(rand.Int64N(int64(time.Hour))))
	}
	measure := func(b *testing.B, rdb *redis.Client, page func(first bool) (more bool)) {
		ctx := context.Background()
		cpu := func() float64 {
			s, err := rdb.Info(ctx, "cpu").Result()
			if err != nil {
				b.Fatal(err)
			}
			return infoFloat(s, "used_cpu_user") + infoFloat(s, "used_cpu_sys")
		}
		mem0 := info(b, rdb, "memory", "used_memory")
		grew := int64(0)
		cmd0, cpu0 := info(b, rdb, "stats", "total_commands_processed"), cpu()
		b.ResetTimer()
		first := true
		for i := range b.N {
			first = !page(first)
			if i%100 == 0 {
				b.StopTimer()
				grew = max(grew, info(b, rdb, "memory", "used_memory")-mem0)
				b.StartTimer()
			}
		}
		b.StopTimer()
		cmds := info(b, rdb, "stats", "total_commands_processed") - cmd0 - 2 - int64(b.N/100+1)*2
		b.ReportMetric(float64(cmds)/float64(b.N), "cmds/page")
		b.ReportMetric((cpu()-cpu0)*1e6/float64(b.N), "redis-µs/page")
		b.ReportMetric(float64(grew), "mem-grew-B")
	}
	b.Run("redisq", func(b *testing.B) {
		srv, rdb := redisServer(b)
		if srv == nil {
			return
		}
		q := openRedisq(b, rdb)
		ctx := context.Background()
		for i := 0; i < n; i += 500 {
			ms := make([]queue.Message, min(500, n-i))
			for k := range ms {
				ms[k] = queue.Message{Topic: "bench", Payload: payload, DeliverAt: due()}
			}
			if _, err := q.PutBatch(ctx, ms); err != nil {
				b.Fatal(err)
			}
		}
		cursor := ""
		measure(b, rdb, func(first bool) bool {
			if first {
				cursor = ""
			}
			page, next, err := q.Messages(ctx, "bench", queue.Scheduled, cursor, limit)
			if err != nil || len(page) == 0 {
				b.Fatalf("page after %q: %d messages, %v", cursor, len(page), err)
			}
			cursor = next
			return next != ""
		})
	})
	b.Run("asynq", func(b *testing.B) {
		srv, rdb := redisServer(b)
		if srv == nil {
			return
		}
		opt := asynq.RedisClientOpt{Addr: srv.Addr, PoolSize: 256}
		client := asynq.NewClient(opt)
		putAll(b, n, func(int) error {
			_, err := client.Enqueue(asynq.NewTask("bench", payload), asynq.ProcessAt(due()))
			return err
		})
		client.Close()
		insp := asynq.NewInspector(opt)
		defer insp.Close()
		pages := (n + limit - 1) / limit
		k := 0
		measure(b, rdb, func(first bool) bool {
			if first {
				k = 0
			}
			k++
			tasks, err := insp.ListScheduledTasks("default", asynq.PageSize(limit), asynq.Page(k))
			if err != nil || len(tasks) == 0 {
				b.Fatalf("page %d: %d tasks, %v", k, len(tasks), err)
			}
			return k < pages
		})
	})
}

// redisCPU reads the CPU time of the redis-server at addr, and returns a function that reports the
// time it spent since, per op, as redis-µs/msg.
func redisCPU(b *testing.B, addr string) func() {
	read := cpuReader(b, addr)
	before := read()
	return func() {
		b.ReportMetric((read()-before)*1e6/float64(b.N), "redis-µs/msg")
	}
}

// cpuReader returns a function that reads the CPU time, in seconds, the redis-server at addr has
// spent since it started. Its connection is closed when the benchmark ends.
func cpuReader(b *testing.B, addr string) func() float64 {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	b.Cleanup(func() { rdb.Close() })
	return func() float64 {
		s, err := rdb.Info(context.Background(), "cpu").Result()
		if err != nil {
			b.Fatal(err)
		}
		return infoFloat(s, "used_cpu_user") + infoFloat(s, "used_cpu_sys")
	}
}

// infoFloat returns a numeric field of an INFO reply, or 0.
func infoFloat(s, field string) float64 {
	for _, line := range strings.Split(s, "\r\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			f, _ := strconv.ParseFloat(v, 64)
			return f
		}
	}
	return 0
}
