package bench

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	bsm "github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	redsyncgoredis "github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
	"github.com/tockwheel/tock"
	"github.com/tockwheel/tock/internal/redistest"
	"github.com/tockwheel/tock/redislock"
)

// The lock benchmarks run tock's redislock beside go-redsync/redsync (one pool, i.e. not Redlock
// across several servers) and bsm/redislock, each with a client of its own on one redis-server
// started for the benchmark. Besides time per operation they report the commands each operation
// sent to Redis (sent-cmds/op, counted by a client hook) and the commands Redis ran for it
// (server-cmds/op, which includes those run inside scripts).
//
// redsync and bsm/redislock wait for a held lock by polling; they are given a 1 ms retry delay,
// their fastest sensible setting. tock waits on the release's pub/sub message.

const lockName = "bench"

func newRedisClient(b *testing.B, s *redistest.Server) *redis.Client {
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr, PoolSize: 64})
	b.Cleanup(func() { rdb.Close() })
	return rdb
}

// sentCommands counts the commands that clients send, pipelined ones included: the round trips and
// the parsing load a library puts on Redis. The server's own count (server-cmds) also includes the
// commands that scripts run inside Redis.
type sentCommands struct{ n atomic.Int64 }

func (c *sentCommands) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *sentCommands) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.n.Add(1)
		return next(ctx, cmd)
	}
}

func (c *sentCommands) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.n.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

// countedClient is newRedisClient whose commands are counted by sent.
func countedClient(b *testing.B, s *redistest.Server, sent *sentCommands) *redis.Client {
	rdb := newRedisClient(b, s)
	rdb.AddHook(sent)
	return rdb
}

// serverStats returns the numeric fields of redis-server's INFO, such as total_commands_processed
// and used_cpu_user. The INFO call itself counts as one command in later calls' figures.
func serverStats(b *testing.B, rdb *redis.Client) map[string]float64 {
	info, err := rdb.Info(context.Background(), "all").Result()
	if err != nil {
		b.Fatal(err)
	}
	out := make(map[string]float64)
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		if f, err := strconv.ParseFloat(v, 64); err == nil {
			out[k] = f
		}
	}
	return out
}

// commandsSince returns the commands redis-server processed since the INFO that returned before,
// less that INFO itself.
func commandsSince(b *testing.B, rdb *redis.Client, before map[string]float64) float64 {
	return serverStats(b, rdb)["total_commands_processed"] - before["total_commands_processed"] - 1
}

// lockImpl is one library's acquire-and-release of lockName.
type lockImpl struct {
	name string
	// setup returns the function that acquires the lock, waiting if need be, holds it for hold and
	// releases it.
	setup func(b *testing.B, rdb *redis.Client) func(ctx context.Context, hold time.Duration) error
}

var lockImpls = []lockImpl{
	{"tock", func(b *testing.B, rdb *redis.Client) func(context.Context, time.Duration) error {
		w := tock.New()
		b.Cleanup(func() { w.Stop() })
		l := redislock.New(rdb, redislock.WithWheel(w))
		return func(ctx context.Context, hold time.Duration) error {
			lk, err := l.Lock(ctx, lockName)
			if err != nil {
				return err
			}
			sleep(hold)
			return lk.Unlock(ctx)
		}
	}},
	{"tock-lease", func(b *testing.B, rdb *redis.Client) func(context.Context, time.Duration) error {
		w := tock.New()
		b.Cleanup(func() { w.Stop() })
		l := redislock.New(rdb, redislock.WithWheel(w))
		return func(ctx context.Context, hold time.Duration) error {
			lk, err := l.Lock(ctx, lockName, redislock.WithLease(30*time.Second))
			if err != nil {
				return err
			}
			sleep(hold)
			return lk.Unlock(ctx)
		}
	}},
	{"redsync", func(b *testing.B, rdb *redis.Client) func(context.Context, time.Duration) error {
		rs := redsync.New(redsyncgoredis.NewPool(rdb))
		return func(ctx context.Context, hold time.Duration) error {
			m := rs.NewMutex(lockName, redsync.WithExpiry(30*time.Second),
				redsync.WithTries(1<<30), redsync.WithRetryDelay(time.Millisecond))
			if err := m.LockContext(ctx); err != nil {
				return err
			}
			sleep(hold)
			_, err := m.UnlockContext(ctx)
			return err
		}
	}},
	{"bsm", func(b *testing.B, rdb *redis.Client) func(context.Context, time.Duration) error {
		c := bsm.New(rdb)
		opt := &bsm.Options{RetryStrategy: bsm.LinearBackoff(time.Millisecond)}
		return func(ctx context.Context, hold time.Duration) error {
			lk, err := c.Obtain(ctx, lockName, 30*time.Second, opt)
			if err != nil {
				return err
			}
			sleep(hold)
			return lk.Release(ctx)
		}
	}},
}

// BenchmarkLockUncontended acquires and releases a lock nobody else wants.
func BenchmarkLockUncontended(b *testing.B) {
	s := redistest.Start(b)
	admin := newRedisClient(b, s)
	for _, impl := range lockImpls {
		b.Run(impl.name, func(b *testing.B) {
			var sent sentCommands
			op := impl.setup(b, countedClient(b, s, &sent))
			ctx := context.Background()
			before := serverStats(b, admin)
			sent.n.Store(0)
			b.ResetTimer()
			for b.Loop() {
				if err := op(ctx, 0); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(sent.n.Load())/float64(b.N), "sent-cmds/op")
			b.ReportMetric(commandsSince(b, admin, before)/float64(b.N), "server-cmds/op")
		})
	}
}

// BenchmarkLockContended has four goroutines per processor, each with a Locker and client of its
// own as separate processes would have (lockers=each) or sharing one (lockers=one), take turns on
// one lock, holding it for a while (hold=0: not
// at all; hold=2ms: as a short critical section would): an op is one acquisition, the hold and the
// release, including the wait for the others. Pollers pay for a held lock with a command per retry;
// tock's waiters sleep until a release.
func BenchmarkLockContended(b *testing.B) {
	s := redistest.Start(b)
	admin := newRedisClient(b, s)
	for _, hold := range []time.Duration{0, 2 * time.Millisecond} {
		for _, shared := range []bool{false, true} {
			for _, impl := range lockImpls {
				contended(b, s, admin, impl, hold, shared)
			}
		}
	}
}

// contended runs one case of BenchmarkLockContended. With shared, the goroutines share one Locker
// and client, as the goroutines of one process would.
func contended(b *testing.B, s *redistest.Server, admin *redis.Client, impl lockImpl, hold time.Duration, shared bool) {
	lockers := "lockers=each"
	if shared {
		lockers = "lockers=one"
	}
	b.Run(fmt.Sprintf("hold=%v/%s/%s", hold, lockers, impl.name), func(b *testing.B) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		var mu sync.Mutex // guards setup, which the parallel goroutines call at once
		var sent sentCommands
		var sharedOp func(context.Context, time.Duration) error
		if shared {
			sharedOp = impl.setup(b, countedClient(b, s, &sent))
		}
		before := serverStats(b, admin)
		b.SetParallelism(4)
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			op := sharedOp
			if op == nil {
				mu.Lock()
				op = impl.setup(b, countedClient(b, s, &sent))
				mu.Unlock()
			}
			for pb.Next() {
				if err := op(ctx, hold); err != nil {
					b.Error(err)
					return
				}
			}
		})
		b.StopTimer()
		b.ReportMetric(float64(sent.n.Load())/float64(b.N), "sent-cmds/op")
		b.ReportMetric(commandsSince(b, admin, before)/float64(b.N), "server-cmds/op")
	})
}

// sleep holds a lock for d; time.Sleep(0) would still yield.
func sleep(d time.Duration) {
	if d > 0 {
		time.Sleep(d)
	}
}

// heldLocks and heldTimeout size BenchmarkHeld: 10,000 locks whose 3 s leases are renewed every
// second.
const (
	heldLocks   = 10_000
	heldTimeout = 3 * time.Second
	heldPeriod  = heldTimeout / 3
)

// BenchmarkHeld holds 10,000 locks and measures what keeping their leases alive costs per renewal
// period: Redis commands (redis-cmds/period, and per 100 locks), CPU time of this process and of
// redis-server, and goroutines. One op is one renewal period of wall time, so ns/op is not a result.
// It runs on one server and on a Redis Cluster of three masters (without replicas), where the
// commands and the CPU are those of the three masters together.
//
// "tock" is redislock's watchdog: one timer on the wheel and batched renewal scripts, one call per
// 256 locks of one master. "goroutine-per-lock" is what the small auto-renewing libraries do: a
// goroutine and a ticker per lock, each refreshing its lock (bsm/redislock's Refresh) every period.
func BenchmarkHeld(b *testing.B) {
	for _, d := range []heldDeployment{oneServer(b), threeMasters(b)} {
		b.Run(d.name+"/tock", func(b *testing.B) {
			before := runtime.NumGoroutine()
			w := tock.New()
			b.Cleanup(func() { w.Stop() })
			var sent sentCommands
			l := redislock.New(d.client(b, &sent), redislock.WithWheel(w), redislock.WithWatchdogTimeout(heldTimeout))
			ctx := context.Background()
			locks := make([]*redislock.Lock, heldLocks)
			for i := range locks {
				lk, err := l.TryLock(ctx, fmt.Sprint("held-", i))
				if err != nil {
					b.Fatal(err)
				}
				locks[i] = lk
			}
			measureHeld(b, d.admins, &sent, before)
			for _, lk := range locks {
				select {
				case <-lk.Lost():
					b.Fatal("lock lost while held")
				default:
				}
				if err := lk.Unlock(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(d.name+"/goroutine-per-lock", func(b *testing.B) {
			before := runtime.NumGoroutine()
			var sent sentCommands
			c := bsm.New(d.client(b, &sent))
			ctx, cancel := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			var failed sync.Once
			for i := range heldLocks {
				lk, err := c.Obtain(ctx, fmt.Sprint("held-", i), heldTimeout, nil)
				if err != nil {
					b.Fatal(err)
				}
				wg.Go(func() {
					t := time.NewTicker(heldPeriod)
					defer t.Stop()
					for {
						select {
						case <-t.C:
							if err := lk.Refresh(ctx, heldTimeout, nil); err != nil && ctx.Err() == nil {
								failed.Do(func() { b.Error("refresh:", err) })
							}
						case <-ctx.Done():
							_ = lk.Release(context.Background())
							return
						}
					}
				})
			}
			measureHeld(b, d.admins, &sent, before)
			cancel()
			wg.Wait()
		})
	}
}

// A heldDeployment is a Redis deployment for BenchmarkHeld.
type heldDeployment struct {
	name   string
	admins []*redis.Client // one per master, for their statistics
	// client returns a client of its own whose commands sent count in sent.
	client func(b *testing.B, sent *sentCommands) redis.UniversalClient
}

func oneServer(b *testing.B) heldDeployment {
	s := redistest.Start(b)
	return heldDeployment{
		name:   "server",
		admins: []*redis.Client{newRedisClient(b, s)},
		client: func(b *testing.B, sent *sentCommands) redis.UniversalClient { return countedClient(b, s, sent) },
	}
}

func threeMasters(b *testing.B) heldDeployment {
	c := redistest.StartCluster(b, redistest.ClusterConfig{Masters: 3})
	var admins []*redis.Client
	for _, m := range c.Masters() {
		admins = append(admins, newRedisClient(b, m.Server))
	}
	return heldDeployment{
		name:   "cluster-3-masters",
		admins: admins,
		client: func(b *testing.B, sent *sentCommands) redis.UniversalClient {
			rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs(), ContextTimeoutEnabled: true, PoolSize: 64})
			b.Cleanup(func() { rdb.Close() })
			// Count on the clients of the nodes, which every command reaches once: redislock
			// sends its renewals to them directly.
			rdb.OnNewNode(func(n *redis.Client) { n.AddHook(sent) })
			return rdb
		},
	}
}

// measureHeld lets b.N renewal periods pass and reports their cost, the Redis side summed over the
// masters of admins.
func measureHeld(b *testing.B, admins []*redis.Client, sent *sentCommands, goroutinesBefore int) {
	goroutines := runtime.NumGoroutine() - goroutinesBefore
	stats := func() (cmds, cpu float64) {
		for _, a := range admins {
			st := serverStats(b, a)
			cmds += st["total_commands_processed"]
			cpu += st["used_cpu_user"] + st["used_cpu_sys"]
		}
		return cmds, cpu
	}
	cmdsBefore, redisCPUBefore := stats()
	sentBefore := sent.n.Load()
	cpu := processCPU(b)
	start := time.Now()
	b.ResetTimer()
	for range b.N {
		time.Sleep(heldPeriod)
	}
	b.StopTimer()
	periods := float64(time.Since(start)) / float64(heldPeriod)
	cpu = processCPU(b) - cpu
	cmdsAfter, redisCPUAfter := stats()
	sentCmds := float64(sent.n.Load() - sentBefore)
	serverCmds := cmdsAfter - cmdsBefore - float64(len(admins)) // less the INFO of each master
	redisCPU := redisCPUAfter - redisCPUBefore
	b.ReportMetric(sentCmds/periods, "sent-cmds/period")
	b.ReportMetric(sentCmds/periods*100/heldLocks, "sent-cmds/100locks/period")
	b.ReportMetric(serverCmds/periods, "server-cmds/period")
	b.ReportMetric(float64(cpu)/float64(time.Millisecond)/periods, "cpu-ms/period")
	b.ReportMetric(redisCPU*1000/periods, "redis-cpu-ms/period")
	b.ReportMetric(float64(goroutines), "goroutines")
}

// processCPU returns the user and system CPU time this process has used.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
