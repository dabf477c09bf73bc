// Package timerbench holds the timer benchmarks that tock runs beside other timer facilities: in
// the tock package's own benchmarks, in the side-by-side bench module, and in the tock CLI's bench
// command, so that all three measure the same thing.
//
// Each scenario is a function of a *testing.B and a Scheduler, and reports the Go benchmark
// figures (ns/op, allocs/op) plus extra metrics through b.ReportMetric. Outside a test binary, run
// one with testing.Benchmark.
package timerbench

import (
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// A Scheduler is a timer facility under test: tock's wheel, the Go runtime's timers, or another
// library. T is its timer handle.
type Scheduler[T any] interface {
	AfterFunc(d time.Duration, f func()) T
	Stop(t T) bool
	Reset(t T, d time.Duration) bool
	// Close releases the facility; timers still pending may be dropped.
	Close()
}

// Pending timers in the scenarios sit this far out and further, 10 ms apart, so none fires while
// a scenario runs.
const (
	PendingBase    = time.Hour
	PendingSpacing = 10 * time.Millisecond
)

func nop() {}

// Count names a number of timers briefly, as benchmark and scenario names do: 0, 100k, 1M, 5M.
func Count(n int) string {
	switch {
	case n >= 1_000_000:
		return fmt.Sprintf("%gM", float64(n)/1e6)
	case n >= 1_000:
		return fmt.Sprintf("%gk", float64(n)/1e3)
	}
	return fmt.Sprint(n)
}

// Fill schedules n timers that stay pending for the scenario and returns their handles.
func Fill[T any](s Scheduler[T], n int) []T {
	ts := make([]T, n)
	for i := range ts {
		ts[i] = s.AfterFunc(PendingBase+time.Duration(i)*PendingSpacing, nop)
	}
	runtime.GC()
	return ts
}

// release stops the timers a scenario filled in and closes the facility, so that no scenario
// leaves timers behind for the next one (the runtime's timers outlive any Close).
func release[T any](s Scheduler[T], ts []T) {
	for _, t := range ts {
		s.Stop(t)
	}
	s.Close()
}

// AfterFuncStop measures scheduling a timer an hour out and stopping it, with pending others.
func AfterFuncStop[T any](b *testing.B, s Scheduler[T], pending int) {
	ts := Fill(s, pending)
	defer release(s, ts)
	b.ReportAllocs()
	for b.Loop() {
		s.Stop(s.AfterFunc(PendingBase, nop))
	}
}

// AfterFuncStopParallel is AfterFuncStop from GOMAXPROCS goroutines at once.
func AfterFuncStopParallel[T any](b *testing.B, s Scheduler[T], pending int) {
	ts := Fill(s, pending)
	defer release(s, ts)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			s.Stop(s.AfterFunc(PendingBase, nop))
		}
	})
}

// Reset measures moving one pending timer's deadline, with pending others.
func Reset[T any](b *testing.B, s Scheduler[T], pending int) {
	ts := Fill(s, pending)
	defer release(s, ts)
	t := s.AfterFunc(PendingBase, nop)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		s.Reset(t, PendingBase+time.Duration(i&1023)*time.Millisecond)
	}
}

// Burst schedules n timers due evenly within window of the first schedule call (so the deadlines
// do not stretch with the time scheduling takes) and reports, per run, how long after that first
// call the last callback had returned (ms-to-all-done). All timers share one callback
// that counts, so the figure is the facility's cost and not that of allocating a million closures;
// Lateness measures timers one by one. newScheduler is called per run, since a burst leaves
// nothing pending.
func Burst[T any](b *testing.B, newScheduler func() Scheduler[T], n int, window time.Duration) {
	var total time.Duration
	for b.Loop() {
		s := newScheduler()
		runtime.GC()
		var fired atomic.Int64
		done := make(chan struct{})
		count := func() {
			if fired.Add(1) == int64(n) {
				close(done)
			}
		}
		start := time.Now()
		for i := range n {
			s.AfterFunc(time.Until(start.Add(time.Duration(i)*window/time.Duration(n))), count)
		}
		<-done
		total += time.Since(start)
		s.Close()
	}
	b.ReportMetric(float64(total.Microseconds())/1000/float64(b.N), "ms-to-all-done")
}

// Memory reports the heap bytes each pending timer costs, its handle included (B/pending). It
// measures once, in the first iteration, because the Go runtime frees stopped timers lazily: a
// second reading would find the first's timers still held and freed meanwhile.
func Memory[T any](b *testing.B, newScheduler func() Scheduler[T], n int) {
	measured := false
	for b.Loop() {
		if measured {
			continue
		}
		measured = true
		before := liveHeap()
		s := newScheduler()
		ts := Fill(s, n)
		b.ReportMetric(float64(liveHeap()-before)/float64(n), "B/pending")
		release(s, ts)
	}
}

// Lateness fires n timers spread over span (at odd microsecond offsets, so deadlines fall between
// ticks) while pending others stay scheduled, and reports lateness percentiles and the number of
// callbacks that ran before their deadline (early), which must be 0.
func Lateness[T any](b *testing.B, s Scheduler[T], pending, n int, span time.Duration) {
	ts := Fill(s, pending)
	defer release(s, ts)
	var late []time.Duration
	var early atomic.Int64
	for b.Loop() {
		var wg sync.WaitGroup
		wg.Add(n)
		lateness := make([]time.Duration, n)
		for i := range n {
			d := time.Duration(i)*span/time.Duration(n) + time.Duration(i%997)*time.Microsecond
			deadline := time.Now().Add(d)
			s.AfterFunc(d, func() {
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
	reportLateness(b, late, early.Load())
}

func reportLateness(b *testing.B, late []time.Duration, early int64) {
	if len(late) == 0 {
		return
	}
	slices.Sort(late)
	at := func(p float64) float64 {
		return float64(late[int(p*float64(len(late)-1))].Microseconds()) / 1000
	}
	b.ReportMetric(at(0.50), "p50-late-ms")
	b.ReportMetric(at(0.99), "p99-late-ms")
	b.ReportMetric(at(1), "max-late-ms")
	b.ReportMetric(float64(early), "early")
}

func liveHeap() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
