package bench

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/tockwheel/tock/delayq"
	"github.com/tockwheel/tock/queue"
)

var delayqSchedN = flag.Int("schedules.delayq", 10_000, "schedules @every 1s in BenchmarkDelayqSchedules")

// schedIdle is how long BenchmarkDelayqSchedules waits for a fire after the last came.
const schedIdle = 10 * time.Second

// BenchmarkDelayqSchedules runs -schedules.delayq schedules @every 1s on delayq (durable, its
// defaults) and counts the fires of the nominal times in -schedules.for of them (after a margin
// for the set-up): expected, missed (never delivered: the consumers wait for the late ones; the
// engine's own count of misfires beside it), delivered twice, and the lateness of each delivery from its nominal time (in its ID). Four consumers receive and ack every fire. The anchor, in the same
// run, is the same flow without schedules: as many messages a second, put from one goroutine a
// second ahead (every 10 ms, the batch of the next 10 ms), under IDs of the same form, received
// the same way. Medians of 3:
//
//	cd bench && go test -run '^$' -bench DelayqSchedules -benchtime 1x -count 3
func BenchmarkDelayqSchedules(b *testing.B) {
	n, d := *delayqSchedN, *schedFor
	b.Run("schedules", func(b *testing.B) {
		for b.Loop() {
			q, err := delayq.Open(b.TempDir())
			if err != nil {
				b.Fatal(err)
			}
			start := time.Now()
			if err := setSchedules(q, n, func(i int) queue.Schedule {
				return queue.Schedule{Name: "s" + strconv.Itoa(i), Topic: "t", Spec: "@every 1s"}
			}); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(time.Since(start).Seconds(), "set-s")
			// The nominal times counted: [from, to), whole seconds from the end of the set-up.
			from := time.Now().Truncate(time.Second).Add(schedMargin)
			receiveFires(b, q, n, from, from.Add(d))
			// The engine's own count of the nominal times its misfire policy passed over (the
			// default, MisfireOnce, passes over those it decides more than queue.MisfireGrace late).
			if st, err := q.ScheduleStats(context.Background()); err == nil {
				b.ReportMetric(float64(st.Misfires), "engine-misfires")
			}
			if err := q.Close(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("anchor=messages-put-ahead", func(b *testing.B) {
		for b.Loop() {
			q, err := delayq.Open(b.TempDir())
			if err != nil {
				b.Fatal(err)
			}
			from := time.Now().Truncate(time.Second).Add(schedMargin)
			to := from.Add(d)
			done := make(chan struct{})
			go func() { // each second, n messages due at that second, put a second before
				defer close(done)
				for sec := from; sec.Before(to); sec = sec.Add(time.Second) {
					time.Sleep(time.Until(sec.Add(-time.Second)))
					for i := 0; i < n; i += 1000 {
						var batch []delayq.Message
						for j := i; j < min(i+1000, n); j++ {
							batch = append(batch, delayq.Message{ID: queue.FireID("s"+strconv.Itoa(j), sec, false), Topic: "t", DeliverAt: sec})
						}
						if _, err := q.PutBatch(context.Background(), batch); err != nil {
							b.Error(err)
							return
						}
					}
				}
			}()
			receiveFires(b, q, n, from, to)
			<-done
			if err := q.Close(); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// receiveFires receives and acks from four goroutines, and reports the deliveries of the nominal
// times in [from, to) of n schedules @every 1s. It receives until every one of them has come, or
// none has for schedIdle after to: a fire that comes late counts as late, not missed.
func receiveFires(b *testing.B, q *delayq.Queue, n int, from, to time.Time) {
	ctx := context.Background()
	log := &fireLog{count: make(map[string]int)}
	expected := n * int(to.Sub(from)/time.Second)
	var lastNew atomic.Int64 // when a fire of the window last came for the first time
	lastNew.Store(time.Now().UnixNano())
	done := func() bool {
		log.mu.Lock()
		got := len(log.count)
		log.mu.Unlock()
		now := time.Now()
		return now.After(to) && (got >= expected || now.Sub(time.Unix(0, lastNew.Load())) > schedIdle)
	}
	engine := watchEngineLateness(q, from, to)
	var wg sync.WaitGroup
	for range schedReceives {
		wg.Go(func() {
			for !done() {
				rctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
				ds, _ := q.Receive(rctx, "t", 500, time.Minute)
				cancel()
				now := time.Now()
				receipts := make([]string, len(ds))
				for i, dl := range ds {
					if _, at, ok := queue.ParseFireID(dl.ID); ok && !at.Before(from) && at.Before(to) {
						log.mu.Lock()
						first := log.count[dl.ID] == 0
						log.mu.Unlock()
						if first {
							lastNew.Store(now.UnixNano())
						}
						log.add(dl.ID, now.Sub(at))
					}
					receipts[i] = dl.Receipt
				}
				if len(ds) > 0 {
					if err := q.Ack(ctx, receipts...); err != nil {
						b.Error(err)
					}
				}
			}
		})
	}
	wg.Wait()
	log.report(b, n, from, to.Add(-time.Nanosecond), queue.ParseFireID)
	engine(b)
}

// watchEngineLateness reads delayq's own lateness (from a message's due time to when Receive
// could have it, not counting the wait for a consumer) every 100 ms from now until to, and returns
// a function that reports it over the samples taken from from: its mean over every message that
// came due (engine-mean-late-ms), and the largest p99 and max among the samples of the last 4,096
// messages (engine-p99-late-ms, engine-max-late-ms). A sample's 4,096 are the latest to come due,
// so the largest p99 of samples is at least the p99 of those it covers.
func watchEngineLateness(q *delayq.Queue, from, to time.Time) func(*testing.B) {
	var p99, worst time.Duration
	var first, last queue.Lateness
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for now := range t.C {
			l := q.Snapshot().Lateness
			if now.Before(from) {
				first = l
				continue
			}
			last, p99, worst = l, max(p99, l.P99), max(worst, l.Max)
			if now.After(to.Add(time.Second)) {
				return
			}
		}
	}()
	return func(b *testing.B) {
		<-done
		if n := last.Count - first.Count; n > 0 {
			b.ReportMetric(float64(last.Sum-first.Sum)/float64(n)/1e6, "engine-mean-late-ms")
		}
		b.ReportMetric(float64(p99)/1e6, "engine-p99-late-ms")
		b.ReportMetric(float64(worst)/1e6, "engine-max-late-ms")
	}
}

// setSchedules sets n schedules on q from 256 goroutines, and returns the errors (a goroutine
// stops at its first).
func setSchedules(q queue.Scheduler, n int, s func(i int) queue.Schedule) error {
	return inParallel(n, 256, func(i int) error {
		_, err := q.SetSchedule(context.Background(), s(i))
		return err
	})
}

const delayqSchedChildEnv = "BENCH_DELAYQ_SCHED_DIR"

// TestDelayqScheduleChild is BenchmarkDelayqScheduleMemory's child process: it defines the
// schedules, says so, and waits for its kill.
func TestDelayqScheduleChild(t *testing.T) {
	dir := os.Getenv(delayqSchedChildEnv)
	if dir == "" {
		t.Skip("run by BenchmarkDelayqScheduleMemory")
	}
	n, _ := strconv.Atoi(os.Getenv(delayqSchedChildEnv + "_N"))
	q, err := delayq.Open(dir)
	if err != nil {
		fmt.Println("fatal", err)
		os.Exit(2)
	}
	start := time.Now()
	if os.Getenv(delayqSchedChildEnv+"_ANCHOR") != "" {
		err = putFires(q, n)
	} else {
		err = setSchedules(q, n, dailySchedule)
	}
	if err != nil {
		fmt.Println("fatal", err)
		os.Exit(2)
	}
	fmt.Printf("ready %d\n", time.Since(start).Milliseconds())
	select {}
}

// dailySchedule is the i-th of the schedules of BenchmarkDelayqScheduleMemory and
// BenchmarkRedisScheduleMemory.
func dailySchedule(i int) queue.Schedule {
	return queue.Schedule{Name: "daily-" + strconv.Itoa(i), Topic: "t", Payload: make([]byte, 100), Spec: "0 9 * * *", TimeZone: "Europe/Paris"}
}

// putFires puts, as the anchor of BenchmarkDelayqScheduleMemory, the messages n daily schedules
// would have put ahead, without the schedules: 100-byte payloads under IDs of the same form, due
// at the next 09:00 in Paris, in batches of 1,000 from 4 goroutines.
func putFires(q *delayq.Queue, n int) error {
	paris, err := time.LoadLocation("Europe/Paris")
	if err != nil {
		return err
	}
	now := time.Now().In(paris)
	at := time.Date(now.Year(), now.Month(), now.Day(), 9, 0, 0, 0, paris)
	if !at.After(now) {
		at = at.AddDate(0, 0, 1)
	}
	return inParallel((n+999)/1000, 4, func(k int) error {
		var batch []delayq.Message
		for j := k * 1000; j < min((k+1)*1000, n); j++ {
			batch = append(batch, delayq.Message{ID: queue.FireID("daily-"+strconv.Itoa(j), at, false), Topic: "t", Payload: make([]byte, 100), DeliverAt: at})
		}
		_, err := q.PutBatch(context.Background(), batch)
		return err
	})
}

// cpuTime returns the CPU time this process has used (user and system): on a loaded machine, what
// a step cost, where its wall time says how long it waited for a processor too.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkDelayqScheduleMemory defines -schedules.defined daily schedules (100-byte payloads, each
// with its fire put ahead, a message on the disk wheel) in a child process, kills it with SIGKILL
// once they are all set (durable), and opens the directory here: how long Open takes (the
// checkpoint and the log after it; wall time, and the CPU time it used), the heap it holds per
// schedule, and the directory's bytes per schedule. The anchor, in the same run, is the same with
// the schedules' fires alone, put as messages. The same as BenchmarkRedisScheduleMemory measures for
// redisq:
//
//	cd bench && go test -run '^$' -bench DelayqScheduleMemory -benchtime 1x
func BenchmarkDelayqScheduleMemory(b *testing.B) {
	b.Run("schedules", func(b *testing.B) { delayqDefined(b, false) })
	b.Run("anchor=their-fires-as-messages", func(b *testing.B) { delayqDefined(b, true) })
}

func delayqDefined(b *testing.B, anchor bool) {
	n := *schedDefined
	for b.Loop() {
		dir := b.TempDir()
		cmd := exec.Command(os.Args[0], "-test.run=^TestDelayqScheduleChild$", "-test.count=1")
		cmd.Env = append(os.Environ(), delayqSchedChildEnv+"="+dir, delayqSchedChildEnv+"_N="+strconv.Itoa(n))
		if anchor {
			cmd.Env = append(cmd.Env, delayqSchedChildEnv+"_ANCHOR=1")
		}
		out, err := cmd.StdoutPipe()
		if err != nil {
			b.Fatal(err)
		}
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		sc := bufio.NewScanner(out)
		var ready string
		for sc.Scan() {
			if f := strings.Fields(sc.Text()); len(f) == 2 && f[0] == "ready" {
				ready = f[1]
				break
			}
		}
		cmd.Process.Signal(syscall.SIGKILL)
		cmd.Wait()
		setMs, err := strconv.ParseFloat(ready, 64)
		if err != nil {
			b.Fatalf("the child did not set the schedules")
		}
		b.ReportMetric(setMs/1000, "set-s")
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		t0, cpu0 := time.Now(), cpuTime()
		q, err := delayq.Open(dir)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(time.Since(t0).Microseconds())/1000, "open-ms")
		b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/1000, "open-cpu-ms")
		runtime.GC()
		runtime.ReadMemStats(&after)
		st, err := q.ScheduleStats(context.Background())
		want := int64(n)
		if anchor {
			want = 0
		}
		if err != nil || st.Schedules != want {
			b.Fatalf("%d schedules after the kill (%v); want %d", st.Schedules, err, want)
		}
		// One fire of each schedule waits, not yet due. When 09:00 in Paris passed since the
		// fires were put, they are due (Snapshot.Due) and the engine plans the next day's as it
		// goes on, a few thousand at a time: wait for it, as long as the set took.
		for deadline := time.Now().Add(time.Duration(setMs) * time.Millisecond); ; time.Sleep(100 * time.Millisecond) {
			snap := q.Snapshot()
			if snap.Pending == int64(n) {
				break
			}
			if snap.Due == 0 || time.Now().After(deadline) {
				b.Fatalf("%d messages pending after the kill, %d due; want %d pending", snap.Pending, snap.Due, n)
			}
		}
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/float64(n), "heap-B/schedule")
		var size int64
		filepath.WalkDir(dir, func(_ string, e fs.DirEntry, err error) error {
			if err == nil && !e.IsDir() {
				if fi, err := e.Info(); err == nil {
					size += fi.Size()
				}
			}
			return nil
		})
		b.ReportMetric(float64(size)/float64(n), "disk-B/schedule")
		runtime.KeepAlive(q)
		if err := q.Close(); err != nil {
			b.Fatal(err)
		}
	}
}
