package bench

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/tockwheel/tock/client"
	"github.com/tockwheel/tock/internal/redistest"
	"github.com/tockwheel/tock/queue"
	"github.com/tockwheel/tock/redisq"
)

var (
	schedN        = flag.Int("schedules", 1000, "schedules @every 1s in BenchmarkRedisSchedules")
	schedFor      = flag.Duration("schedules.for", 60*time.Second, "how long BenchmarkRedisSchedules and BenchmarkDelayqSchedules run them")
	schedDefined  = flag.Int("schedules.defined", 1_000_000, "daily schedules defined in BenchmarkRedisScheduleMemory and BenchmarkDelayqScheduleMemory")
	schedMargin   = 3 * time.Second // fires counted: those of [start+margin, end-margin]
	schedReceives = 4               // consumer goroutines
)

// fireLog counts the first deliveries (attempt 1) of each fire, and how late each came.
type fireLog struct {
	mu    sync.Mutex
	count map[string]int
	late  []time.Duration
}

func (f *fireLog) add(id string, late time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.count[id]++
	f.late = append(f.late, late)
}

// report reports the fires of n schedules whose nominal times fell in [from, to] (whole seconds):
// the expected count, those delivered (fires), those missing, those delivered twice, and the
// lateness of every delivery as the consumer saw it (p50-late-ms, p99-late-ms: from the nominal
// time to the return of the Receive that delivered it).
func (f *fireLog) report(b *testing.B, n int, from, to time.Time, nominal func(id string) (string, time.Time, bool)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	secs := int(to.Sub(from)/time.Second) + 1
	seen := make(map[string]bool)
	twice := 0
	for id, c := range f.count {
		name, at, ok := nominal(id)
		if !ok || at.Before(from) || at.After(to) {
			continue
		}
		seen[name+"@"+strconv.FormatInt(at.Unix(), 10)] = true
		twice += c - 1
	}
	b.ReportMetric(float64(n*secs), "expected")
	b.ReportMetric(float64(len(seen)), "fires")
	b.ReportMetric(float64(n*secs-len(seen)), "missed")
	b.ReportMetric(float64(twice), "twice")
	reportLateness(b, f.late)
}

// redisTarget starts a Redis of masters masters (a cluster when more than one, without replicas)
// and returns it as tockd's -redis takes it.
func redisTarget(b *testing.B, masters int) string {
	if masters == 1 {
		srv, _ := redisServer(b)
		return "redis://" + srv.Addr
	}
	c := redistest.StartCluster(b, redistest.ClusterConfig{Masters: masters})
	var addrs []string
	for _, m := range c.Masters() {
		addrs = append(addrs, m.Addr)
	}
	return strings.Join(addrs, ",")
}

// BenchmarkRedisSchedules runs -schedules schedules @every 1s for -schedules.for: on redisq
// served by three tockd processes, on one redis-server and on a cluster of three masters, and
// asynq's Scheduler with the same entries on one redis-server, then two asynq Schedulers (in this
// process, as two processes would run them), whose fires its docs say are duplicated. Consumers
// ack every fire. The fires counted are those whose nominal times fall in the run but its first
// and last three seconds: expected, delivered (fires), missed and delivered twice (twice: more
// than one first delivery of a fire; for asynq, the enqueues its Schedulers began, see below).
// Lateness as the consumer sees it (p50-late-ms, p99-late-ms) runs from a fire's nominal time (in
// its ID for redisq; the cron tick, for asynq, whose tasks do not carry it) to the return of the
// Receive that delivered it (to asynq's handler); for redisq,
// the engine's own lateness (engine-p50-late-ms, engine-p99-late-ms: from the nominal time to the
// script that made the fire due, measured in Redis to the upper bound of its histogram bucket)
// is tockd's queue_lateness over the same window. With several tockds in -tockd.bin, each runs in
// turn on the same Redis (tockd=NAME): -count repeats each in a row, so builds compared are
// interleaved by running the benchmark several times with -count 1.
func BenchmarkRedisSchedules(b *testing.B) {
	n, d := *schedN, *schedFor
	for _, masters := range []int{1, 3} {
		b.Run(fmt.Sprintf("redisq/masters=%d/tockds=3", masters), func(b *testing.B) {
			target := redisTarget(b, masters)
			// Each tockd of -tockd.bin in turn on the same Redis (a deployment each).
			for _, tb := range tockdBinaries(b) {
				b.Run("tockd="+tb.name, func(b *testing.B) {
					bin := tb.path
					for b.Loop() {
						prefix := fmt.Sprint("sched", time.Now().UnixNano())
						var cs []*client.Client
						for range 3 {
							p := startTockd(b, bin, "-redis", target, "-redis-prefix", prefix)
							cs = append(cs, newTockdClient(b, p, nil))
						}
						ctx := context.Background()
						for i := range n {
							req := client.ScheduleRequest{Topic: "t", Spec: "@every 1s"}
							if _, _, err := cs[i%3].SetSchedule(ctx, "s"+strconv.Itoa(i), req); err != nil {
								b.Fatal(err)
							}
						}
						// Each fires from the second after it was set on (whole seconds: the anchor of
						// "@every 1s" is rounded up to the second).
						start := time.Now()
						log := &fireLog{count: make(map[string]int)}
						end := start.Add(d)
						var wg sync.WaitGroup
						for k := range schedReceives {
							c := cs[k%3]
							wg.Go(func() {
								for time.Now().Before(end.Add(2 * time.Second)) {
									ds, err := c.Receive(ctx, "t", client.ReceiveOptions{Max: 500, Wait: 500 * time.Millisecond, Visibility: time.Minute})
									if err != nil {
										b.Error(err)
										return
									}
									now := time.Now()
									receipts := make([]string, 0, len(ds))
									for _, dl := range ds {
										if _, at, ok := queue.ParseFireID(dl.ID); ok && dl.Attempt == 1 {
											log.add(dl.ID, now.Sub(at))
										}
										receipts = append(receipts, dl.Receipt)
									}
									if len(receipts) > 0 {
										if err := c.Ack(ctx, receipts...); err != nil {
											b.Error(err)
											return
										}
									}
								}
							})
						}
						// The engine's lateness covers what fell due from the first Stats call on.
						from := start.Truncate(time.Second).Add(schedMargin)
						time.Sleep(time.Until(from))
						if _, err := cs[0].Stats(ctx); err != nil {
							b.Fatal(err)
						}
						time.Sleep(time.Until(end.Truncate(time.Second).Add(-schedMargin)))
						st, err := cs[0].Stats(ctx)
						if err != nil {
							b.Fatal(err)
						}
						wg.Wait()
						log.report(b, n, from, end.Truncate(time.Second).Add(-schedMargin), queue.ParseFireID)
						b.ReportMetric(st.QueueLateness.P50*1000, "engine-p50-late-ms")
						b.ReportMetric(st.QueueLateness.P99*1000, "engine-p99-late-ms")
						for i := range n {
							_, _ = cs[0].DeleteSchedule(ctx, "s"+strconv.Itoa(i))
						}
					}
				})
			}
		})
	}
	for _, schedulers := range []int{1, 2} {
		b.Run(fmt.Sprintf("asynq-%dscheduler", schedulers), func(b *testing.B) {
			srv, _ := redisServer(b)
			if srv == nil {
				return
			}
			for b.Loop() {
				opt := asynq.RedisClientOpt{Addr: srv.Addr, PoolSize: 256}
				// asynq's tasks do not carry their nominal time: a Scheduler's cron ticks on whole
				// seconds (robfig/cron's @every), and calls PreEnqueueFunc at once, so the second it
				// is called in is the tick's. The fires counted (fires, missed, twice) are the
				// enqueues the Schedulers began, by entry and tick, whether or not the Server
				// processed them by the end (unprocessed counts those it had not); lateness is
				// from the tick to the handler, matched through PostEnqueueFunc's task ID (an
				// entry's enqueues end in the order of its ticks). The callbacks take no lock: on a
				// loaded machine, thousands of cron goroutines queued on one made the Schedulers'
				// Shutdown, which waits for them, take minutes.
				type event struct {
					entry, id string
					at        time.Time
				}
				capacity := n * schedulers * (int(d/time.Second) + 30)
				pres, posts := make([]atomic.Pointer[event], capacity), make([]atomic.Pointer[event], capacity)
				var npre, npost, enqueueErrors atomic.Int64
				var mu sync.Mutex
				processed := make(map[string]time.Time) // task ID -> when its handler ran
				server := asynq.NewServer(opt, asynq.Config{Concurrency: 256, LogLevel: asynq.ErrorLevel})
				mux := asynq.NewServeMux()
				mux.HandleFunc("t", func(ctx context.Context, t *asynq.Task) error {
					now := time.Now()
					id, _ := asynq.GetTaskID(ctx)
					mu.Lock()
					processed[id] = now
					mu.Unlock()
					return nil
				})
				if err := server.Start(mux); err != nil {
					b.Fatal(err)
				}
				start := time.Now()
				var ss []*asynq.Scheduler
				for range schedulers {
					s := asynq.NewScheduler(opt, &asynq.SchedulerOpts{LogLevel: asynq.ErrorLevel,
						PreEnqueueFunc: func(t *asynq.Task, _ []asynq.Option) {
							e := &event{entry: string(t.Payload()), at: time.Now().Truncate(time.Second)}
							if i := npre.Add(1) - 1; i < int64(capacity) {
								pres[i].Store(e)
							}
						},
						PostEnqueueFunc: func(info *asynq.TaskInfo, err error) {
							if err != nil {
								enqueueErrors.Add(1)
								return
							}
							e := &event{entry: string(info.Payload), id: info.ID, at: time.Now()}
							if i := npost.Add(1) - 1; i < int64(capacity) {
								posts[i].Store(e)
							}
						}})
					for i := range n {
						if _, err := s.Register("@every 1s", asynq.NewTask("t", []byte("s"+strconv.Itoa(i)))); err != nil {
							b.Fatal(err)
						}
					}
					if err := s.Start(); err != nil {
						b.Fatal(err)
					}
					ss = append(ss, s)
				}
				end := start.Add(d)
				time.Sleep(time.Until(end))
				// Shutdown waits for the enqueues under way; a Scheduler behind its ticks is
				// given 10 s, then counted as it is (its ticks begun are all counted).
				stopped := make(chan struct{})
				go func() {
					for _, s := range ss {
						s.Shutdown()
					}
					close(stopped)
				}()
				select {
				case <-stopped:
				case <-time.After(10 * time.Second):
				}
				time.Sleep(2 * time.Second)
				server.Shutdown()
				from, to := start.Truncate(time.Second).Add(schedMargin), end.Truncate(time.Second).Add(-schedMargin)
				log := &fireLog{count: make(map[string]int)}
				ticks := make(map[string][]time.Time) // entry -> the ticks of the enqueues begun
				for i := range min(npre.Load(), int64(capacity)) {
					if e := pres[i].Load(); e != nil {
						log.count[e.entry+"@"+strconv.FormatInt(e.at.Unix(), 10)]++
						ticks[e.entry] = append(ticks[e.entry], e.at)
					}
				}
				ends := make(map[string][]*event) // entry -> its enqueues ended
				for i := range min(npost.Load(), int64(capacity)) {
					if e := posts[i].Load(); e != nil {
						ends[e.entry] = append(ends[e.entry], e)
					}
				}
				mu.Lock()
				unprocessed := 0
				for entry, es := range ends {
					slices.SortFunc(es, func(x, y *event) int { return x.at.Compare(y.at) })
					ts := ticks[entry]
					slices.SortFunc(ts, func(x, y time.Time) int { return x.Compare(y) })
					for k, e := range es[:min(len(es), len(ts))] {
						at := ts[k]
						if p, ok := processed[e.id]; ok {
							log.late = append(log.late, p.Sub(at))
						} else if !at.Before(from) && !at.After(to) {
							unprocessed++
						}
					}
				}
				mu.Unlock()
				b.ReportMetric(float64(enqueueErrors.Load()), "enqueue-errors")
				b.ReportMetric(float64(unprocessed), "unprocessed")
				log.report(b, n, from, to, func(id string) (string, time.Time, bool) {
					i := len(id) - 1
					for i >= 0 && id[i] != '@' {
						i--
					}
					sec, err := strconv.ParseInt(id[i+1:], 10, 64)
					return id[:i], time.Unix(sec, 0), err == nil
				})
			}
		})
	}
}

// BenchmarkRedisScheduleMemory defines -schedules.defined daily schedules on redisq (one
// redis-server) and reports Redis's memory per schedule (redis-B/schedule: used_memory of INFO
// memory, before and after; each schedule with its next fire put ahead, a message of 100 bytes),
// then how long a tockd takes to serve that deployment after another was killed (SIGKILL) while
// serving it: from its start to its first ready answer (open-ms), beside the same for a deployment
// without schedules, in the same run (open-empty-ms).
func BenchmarkRedisScheduleMemory(b *testing.B) {
	n := *schedDefined
	srv, rdb := redisServer(b)
	if srv == nil {
		return
	}
	bin := tockdBinaries(b)[0].path
	for b.Loop() {
		ctx := context.Background()
		prefix := fmt.Sprint("mem", time.Now().UnixNano())
		q := openRedisq(b, rdb, redisq.WithPrefix(prefix))
		before := info(b, rdb, "memory", "used_memory")
		if err := setSchedules(q, n, dailySchedule); err != nil {
			b.Fatal(err)
		}
		after := info(b, rdb, "memory", "used_memory")
		b.ReportMetric(float64(after-before)/float64(n), "redis-B/schedule")
		q.Close()
		empty := prefix + "-empty"
		openRedisq(b, rdb, redisq.WithPrefix(empty)).Close()
		b.ReportMetric(openAfterKill(b, bin, srv.Addr, prefix), "open-ms")
		b.ReportMetric(openAfterKill(b, bin, srv.Addr, empty), "open-empty-ms")
		rdb.FlushAll(ctx)
	}
}

// openAfterKill starts a tockd on the deployment prefix of the redis-server at addr, waits until
// it is ready, kills it (SIGKILL), and returns how many milliseconds another tockd then takes from
// its start to its first ready answer (/readyz, asked every 5 ms).
func openAfterKill(b *testing.B, bin, addr, prefix string) float64 {
	ready := func() (*tockdProcess, time.Duration) {
		t0 := time.Now()
		p := startTockd(b, bin, "-redis", "redis://"+addr, "-redis-prefix", prefix)
		c := newTockdClient(b, p, []client.Option{client.WithRetries(0, 0)})
		for c.Ready(context.Background()) != nil {
			time.Sleep(5 * time.Millisecond)
		}
		return p, time.Since(t0)
	}
	first, _ := ready()
	first.kill(b)
	_, took := ready()
	return float64(took.Microseconds()) / 1000
}
