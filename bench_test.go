package tock

import (
	"fmt"
	"runtime"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The benchmarks put tock beside the Go runtime's timers (time.AfterFunc) in the same run, because
// only the ratio is meaningful on a shared machine. Run them with
//
//	go test -run '^$' -bench . -benchmem
//
// Pending timers are spread 10 ms apart starting an hour out, so none fires during a benchmark.

var pendingSizes = []int{0, 1_000_000, 5_000_000}

func nop() {}

func sizeName(n int) string {
	switch {
	case n >= 1_000_000:
		return fmt.Sprintf("pending=%dM", n/1_000_000)
	case n >= 1000:
		return fmt.Sprintf("pending=%dk", n/1000)
	}
	return fmt.Sprintf("pending=%d", n)
}

// timerAPI is what a benchmark needs of tock or of the runtime's timers.
type timerAPI struct {
	name     string
	setup    func() // before filling
	schedule func(d time.Duration) (stop func() bool)
	teardown func()
}

func apis() []timerAPI {
	var w *Wheel
	return []timerAPI{
		{
			name:  "tock",
			setup: func() { w = New() },
			schedule: func(d time.Duration) func() bool {
				t, err := w.AfterFunc(d, nop)
				if err != nil {
					panic(err)
				}
				return t.Stop
			},
			teardown: func() { w.Stop(); w = nil },
		},
		{
			name:  "time",
			setup: func() {},
			schedule: func(d time.Duration) func() bool {
				return time.AfterFunc(d, nop).Stop
			},
			teardown: func() {},
		},
	}
}

func BenchmarkAfterFuncStop(b *testing.B) {
	for _, n := range pendingSizes {
		b.Run(sizeName(n), func(b *testing.B) {
			b.Run("tock", func(b *testing.B) {
				w := New()
				defer w.Stop()
				fill(b, n, func(d time.Duration) { w.AfterFunc(d, nop) })
				b.ReportAllocs()
				for b.Loop() {
					t, _ := w.AfterFunc(time.Hour, nop)
					t.Stop()
				}
			})
			b.Run("time", func(b *testing.B) {
				var ts []*time.Timer
				fill(b, n, func(d time.Duration) { ts = append(ts, time.AfterFunc(d, nop)) })
				defer stopAll(ts)
				b.ReportAllocs()
				for b.Loop() {
					t := time.AfterFunc(time.Hour, nop)
					t.Stop()
				}
			})
		})
	}
}

func BenchmarkAfterFuncStopParallel(b *testing.B) {
	for _, n := range pendingSizes[:2] {
		b.Run(sizeName(n), func(b *testing.B) {
			b.Run("tock", func(b *testing.B) {
				w := New()
				defer w.Stop()
				fill(b, n, func(d time.Duration) { w.AfterFunc(d, nop) })
				b.ReportAllocs()
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						t, _ := w.AfterFunc(time.Hour, nop)
						t.Stop()
					}
				})
			})
			b.Run("time", func(b *testing.B) {
				var ts []*time.Timer
				fill(b, n, func(d time.Duration) { ts = append(ts, time.AfterFunc(d, nop)) })
				defer stopAll(ts)
				b.ReportAllocs()
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						t := time.AfterFunc(time.Hour, nop)
						t.Stop()
					}
				})
			})
		})
	}
}

func BenchmarkReset(b *testing.B) {
	const n = 1_000_000
	b.Run("tock", func(b *testing.B) {
		w := New()
		defer w.Stop()
		fill(b, n, func(d time.Duration) { w.AfterFunc(d, nop) })
		t, _ := w.AfterFunc(time.Hour, nop)
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			i++
			t.Reset(time.Hour + time.Duration(i&1023)*time.Millisecond)
		}
	})
	b.Run("time", func(b *testing.B) {
		var ts []*time.Timer
		fill(b, n, func(d time.Duration) { ts = append(ts, time.AfterFunc(d, nop)) })
		defer stopAll(ts)
		t := time.AfterFunc(time.Hour, nop)
		defer t.Stop()
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			i++
			t.Reset(time.Hour + time.Duration(i&1023)*time.Millisecond)
		}
	})
}

// BenchmarkBurst schedules a million timers due within 100 ms and reports how long after the first
// AfterFunc the last callback finished, and the lateness of the callbacks past their deadlines.
func BenchmarkBurst(b *testing.B) {
	const n = 1_000_000
	const window = 100 * time.Millisecond
	for _, api := range []string{"tock", "time"} {
		b.Run(api, func(b *testing.B) {
			var total time.Duration
			var late []time.Duration
			for b.Loop() {
				var w *Wheel
				if api == "tock" {
					w = New()
				}
				var wg sync.WaitGroup
				wg.Add(n)
				lateness := make([]time.Duration, n)
				start := time.Now()
				for i := range n {
					d := time.Duration(i) * window / n
					deadline := start.Add(d)
					f := func() { lateness[i] = time.Since(deadline); wg.Done() }
					if w != nil {
						w.AfterFunc(d, f)
					} else {
						time.AfterFunc(d, f)
					}
				}
				wg.Wait()
				total += time.Since(start)
				late = append(late, lateness...)
				if w != nil {
					w.Stop()
				}
			}
			b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "ms-to-all-done")
			reportPercentiles(b, late)
		})
	}
}

// BenchmarkMemory reports the heap bytes per pending timer, handle included.
func BenchmarkMemory(b *testing.B) {
	const n = 1_000_000
	b.Run("tock", func(b *testing.B) {
		for b.Loop() {
			w := New(WithShards(1))
			before := heapInUse()
			ts := make([]Timer, n)
			for i := range ts {
				ts[i], _ = w.AfterFunc(time.Hour+time.Duration(i)*10*time.Millisecond, nop)
			}
			b.ReportMetric(float64(heapInUse()-before)/n, "B/pending")
			runtime.KeepAlive(ts)
			w.Stop()
		}
	})
	b.Run("time", func(b *testing.B) {
		for b.Loop() {
			before := heapInUse()
			ts := make([]*time.Timer, n)
			for i := range ts {
				ts[i] = time.AfterFunc(time.Hour+time.Duration(i)*10*time.Millisecond, nop)
			}
			b.ReportMetric(float64(heapInUse()-before)/n, "B/pending")
			stopAll(ts)
		}
	})
}

// BenchmarkLateness fires timers spread over 2 s while a million others stay pending, and reports
// lateness percentiles and the count of early firings (which must be 0).
func BenchmarkLateness(b *testing.B) {
	const pending = 1_000_000
	const n = 20_000
	const span = 2 * time.Second
	b.Run("tock", func(b *testing.B) {
		w := New()
		defer w.Stop()
		fill(b, pending, func(d time.Duration) { w.AfterFunc(d, nop) })
		measureLateness(b, n, span, func(d time.Duration, f func()) { w.AfterFunc(d, f) })
	})
	b.Run("time", func(b *testing.B) {
		var ts []*time.Timer
		fill(b, pending, func(d time.Duration) { ts = append(ts, time.AfterFunc(d, nop)) })
		defer stopAll(ts)
		measureLateness(b, n, span, func(d time.Duration, f func()) { time.AfterFunc(d, f) })
	})
}

func measureLateness(b *testing.B, n int, span time.Duration, after func(time.Duration, func())) {
	var late []time.Duration
	var early atomic.Int64
	for b.Loop() {
		var wg sync.WaitGroup
		wg.Add(n)
		lateness := make([]time.Duration, n)
		for i := range n {
			d := time.Duration(i)*span/time.Duration(n) + time.Duration(i%997)*time.Microsecond
			deadline := time.Now().Add(d)
			after(d, func() {
				l := time.Since(deadline)
				if l < 0 {
					early.Add(1)
				}
				lateness[i] = l
				wg.Done()
			})
		}
		wg.Wait()
		late = append(late, lateness...)
	}
	reportPercentiles(b, late)
	b.ReportMetric(float64(early.Load()), "early")
}

func fill(b *testing.B, n int, schedule func(time.Duration)) {
	b.Helper()
	for i := range n {
		schedule(time.Hour + time.Duration(i)*10*time.Millisecond)
	}
	runtime.GC()
}

func stopAll(ts []*time.Timer) {
	for _, t := range ts {
		t.Stop()
	}
}

func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

func reportPercentiles(b *testing.B, d []time.Duration) {
	if len(d) == 0 {
		return
	}
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	at := func(p float64) float64 { return float64(d[int(p*float64(len(d)-1))].Microseconds()) / 1000 }
	b.ReportMetric(at(0.50), "p50-late-ms")
	b.ReportMetric(at(0.99), "p99-late-ms")
	b.ReportMetric(at(1), "max-late-ms")
}
