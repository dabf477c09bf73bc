package bench

import (
	"context"
	"flag"
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/tockwheel/tock/queue"
	"github.com/tockwheel/tock/redisq"
)

var (
	schedN        = flag.Int("schedules", 1000, "schedules @every 1s in BenchmarkRedisSchedules")
	schedFor      = flag.Duration("schedules.for", 60*time.Second, "how long BenchmarkRedisSchedules runs them")
	schedDefined  = flag.Int("schedules.defined", 1_000_000, "daily schedules defined in BenchmarkRedisScheduleMemory")
	schedMargin   = 3 * time.Second // fires counted: those of [start+margin, end-margin]
	schedReceives = 4               // consumer goroutines
)

// fireLog counts the deliveries of each fire and how late each came.
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
// the expected count, those missing, those delivered twice, and the lateness of all deliveries.
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
	b.ReportMetric(float64(n*secs-len(seen)), "missed")
	b.ReportMetric(float64(twice), "twice")
	reportLateness(b, f.late)
}

// BenchmarkRedisSchedules runs -schedules schedules @every 1s for -schedules.for on one Redis
// server: redisq with three Queues on the deployment (three processes' worth of drivers, in this
// process), and asynq's Scheduler with the same entries, then two asynq Schedulers (as two
// processes would run), whose fires its docs say are duplicated. Consumers ack every fire; a
// fire's lateness is from its nominal time (in its ID for redisq; the second the asynq task was
// processed in, for asynq, whose tasks do not carry it) to its delivery.
func BenchmarkRedisSchedules(b *testing.B) {
	n, d := *schedN, *schedFor
	b.Run("redisq", func(b *testing.B) {
		srv, rdb := redisServer(b)
		if srv == nil {
			return
		}
		for b.Loop() {
			prefix := redisq.WithPrefix(fmt.Sprint("sched", time.Now().UnixNano()))
			var qs []*redisq.Queue
			for range 3 {
				qs = append(qs, openRedisq(b, rdb, prefix))
			}
			ctx := context.Background()
			start := time.Now()
			for i := range n {
				s := queue.Schedule{Name: "s" + strconv.Itoa(i), Topic: "t", Spec: "@every 1s"}
				if _, err := qs[i%3].SetSchedule(ctx, s); err != nil {
					b.Fatal(err)
				}
			}
			log := &fireLog{count: make(map[string]int)}
			end := start.Add(d)
			var wg sync.WaitGroup
			for k := range schedReceives {
				q := qs[k%3]
				wg.Go(func() {
					for time.Now().Before(end.Add(2 * time.Second)) {
						rctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
						ds, _ := q.Receive(rctx, "t", 500, time.Minute)
						cancel()
						now := time.Now()
						receipts := make([]string, len(ds))
						for i, dl := range ds {
							_, at, _ := queue.ParseFireID(dl.ID)
							log.add(dl.ID, now.Sub(at))
							receipts[i] = dl.Receipt
						}
						if len(ds) > 0 {
							_ = q.Ack(ctx, receipts...)
						}
					}
				})
			}
			wg.Wait()
			from := start.Truncate(time.Second).Add(schedMargin)
			log.report(b, n, from, end.Truncate(time.Second).Add(-schedMargin), queue.ParseFireID)
			if st, err := qs[0].Stats(ctx); err == nil {
				// Measured in Redis, where the scripts make each message due (to bucket bounds).
				b.ReportMetric(float64(st.Lateness.P99.Microseconds())/1000, "engine-p99-late-ms")
			}
			for i := range n {
				_, _ = qs[0].DeleteSchedule(ctx, "s"+strconv.Itoa(i))
			}
		}
	})
	for _, schedulers := range []int{1, 2} {
		b.Run(fmt.Sprintf("asynq-%dscheduler", schedulers), func(b *testing.B) {
			srv, _ := redisServer(b)
			if srv == nil {
				return
			}
			for b.Loop() {
				opt := asynq.RedisClientOpt{Addr: srv.Addr, PoolSize: 256}
				// asynq's tasks do not carry their nominal time: the scheduler enqueues each at its
				// cron tick, a whole second (robfig/cron's @every), so the second in which the
				// scheduler enqueued a task is its nominal time. Both ends are keyed by task ID.
				var mu sync.Mutex
				enqueued := make(map[string]time.Time)
				type run struct {
					entry string
					at    time.Time
				}
				processed := make(map[string]run)
				server := asynq.NewServer(opt, asynq.Config{Concurrency: 256, LogLevel: asynq.ErrorLevel})
				mux := asynq.NewServeMux()
				mux.HandleFunc("t", func(ctx context.Context, t *asynq.Task) error {
					now := time.Now()
					id, _ := asynq.GetTaskID(ctx)
					mu.Lock()
					processed[id] = run{string(t.Payload()), now}
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
						PostEnqueueFunc: func(info *asynq.TaskInfo, err error) {
							if err == nil {
								at := time.Now().Truncate(time.Second)
								mu.Lock()
								enqueued[info.ID] = at
								mu.Unlock()
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
				for _, s := range ss {
					s.Shutdown()
				}
				time.Sleep(2 * time.Second)
				server.Shutdown()
				log := &fireLog{count: make(map[string]int)}
				for id, r := range processed {
					if at, ok := enqueued[id]; ok {
						log.add(r.entry+"@"+strconv.FormatInt(at.Unix(), 10), r.at.Sub(at))
					}
				}
				from := start.Truncate(time.Second).Add(schedMargin)
				log.report(b, n, from, end.Truncate(time.Second).Add(-schedMargin), func(id string) (string, time.Time, bool) {
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

// BenchmarkRedisScheduleMemory defines -schedules.defined daily schedules on redisq and reports
// Redis's memory per schedule (each with its fire put ahead, a message), and how long a new
// process takes to open the deployment then (it reads no schedule: the act times are in Redis).
func BenchmarkRedisScheduleMemory(b *testing.B) {
	n := *schedDefined
	srv, rdb := redisServer(b)
	if srv == nil {
		return
	}
	for b.Loop() {
		ctx := context.Background()
		prefix := redisq.WithPrefix(fmt.Sprint("mem", time.Now().UnixNano()))
		q := openRedisq(b, rdb, prefix)
		runtime.GC()
		before := info(b, rdb, "memory", "used_memory")
		var wg sync.WaitGroup
		next := make(chan int, 1024)
		go func() {
			for i := range n {
				next <- i
			}
			close(next)
		}()
		for range 256 {
			wg.Go(func() {
				for i := range next {
					s := queue.Schedule{Name: "daily-" + strconv.Itoa(i), Topic: "t", Payload: make([]byte, 100), Spec: "0 9 * * *", TimeZone: "Europe/Paris"}
					if _, err := q.SetSchedule(ctx, s); err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		after := info(b, rdb, "memory", "used_memory")
		b.ReportMetric(float64(after-before)/float64(n), "redis-B/schedule")
		t0 := time.Now()
		other, err := redisq.Open(ctx, rdb, prefix)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(time.Since(t0).Microseconds())/1000, "open-ms")
		other.Close()
		rdb.FlushAll(ctx)
	}
}
