package bench

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/tockwheel/tock/internal/timerbench"
	"github.com/zeromicro/go-zero/core/collection"
)

// goZero is go-zero's collection.TimingWheel as a timerbench.Scheduler. It keys timers by a
// counter, and its wheel runs the callback stored as the timer's value. Its tick is 1 ms, as tock's
// is, with 3,600 slots; timers further out than one lap wait for their round in their slot.
type goZero struct {
	tw   *collection.TimingWheel
	keys *atomic.Uint64
}

func newGoZero() timerbench.Scheduler[uint64] {
	tw, err := collection.NewTimingWheel(time.Millisecond, 3600, func(_, f any) { f.(func())() })
	if err != nil {
		panic(err)
	}
	return goZero{tw: tw, keys: new(atomic.Uint64)}
}

// AfterFunc raises a d of zero or less, which go-zero refuses where the others fire at once, to
// 1 ns.
func (g goZero) AfterFunc(d time.Duration, f func()) uint64 {
	k := g.keys.Add(1)
	if err := g.tw.SetTimer(k, f, max(d, 1)); err != nil {
		panic(err)
	}
	return k
}

// Stop reports true: go-zero's RemoveTimer does not tell whether the timer was pending.
func (g goZero) Stop(k uint64) bool { return g.tw.RemoveTimer(k) == nil }

func (g goZero) Reset(k uint64, d time.Duration) bool { return g.tw.MoveTimer(k, max(d, 1)) == nil }
func (g goZero) Close()                               { g.tw.Stop() }

// BenchmarkMemory reports heap bytes per pending timer, handle included. It comes first because the
// runtime frees stopped timers lazily, which would skew a reading taken after other benchmarks.
func BenchmarkMemory(b *testing.B) {
	b.Run("tock", func(b *testing.B) { timerbench.Memory(b, timerbench.NewTock, 1_000_000) })
	b.Run("time", func(b *testing.B) { timerbench.Memory(b, timerbench.NewRuntime, 1_000_000) })
	b.Run("go-zero", func(b *testing.B) { timerbench.Memory(b, newGoZero, 1_000_000) })
}

func BenchmarkAfterFuncStop(b *testing.B) {
	for _, n := range []int{0, 1_000_000, 5_000_000} {
		b.Run("pending="+timerbench.Count(n)+"/tock", func(b *testing.B) { timerbench.AfterFuncStop(b, timerbench.NewTock(), n) })
		b.Run("pending="+timerbench.Count(n)+"/time", func(b *testing.B) { timerbench.AfterFuncStop(b, timerbench.NewRuntime(), n) })
		b.Run("pending="+timerbench.Count(n)+"/go-zero", func(b *testing.B) { timerbench.AfterFuncStop(b, newGoZero(), n) })
	}
}

func BenchmarkAfterFuncStopParallel(b *testing.B) {
	for _, n := range []int{0, 1_000_000} {
		b.Run("pending="+timerbench.Count(n)+"/tock", func(b *testing.B) { timerbench.AfterFuncStopParallel(b, timerbench.NewTock(), n) })
		b.Run("pending="+timerbench.Count(n)+"/time", func(b *testing.B) {
			timerbench.AfterFuncStopParallel(b, timerbench.NewRuntime(), n)
		})
		b.Run("pending="+timerbench.Count(n)+"/go-zero", func(b *testing.B) { timerbench.AfterFuncStopParallel(b, newGoZero(), n) })
	}
}

func BenchmarkReset(b *testing.B) {
	b.Run("pending=1M/tock", func(b *testing.B) { timerbench.Reset(b, timerbench.NewTock(), 1_000_000) })
	b.Run("pending=1M/time", func(b *testing.B) { timerbench.Reset(b, timerbench.NewRuntime(), 1_000_000) })
	b.Run("pending=1M/go-zero", func(b *testing.B) { timerbench.Reset(b, newGoZero(), 1_000_000) })
}

// BenchmarkBurst: a million timers due within 100 ms; ms-to-all-done counts from the first
// AfterFunc to the last callback's return.
func BenchmarkBurst(b *testing.B) {
	const n, window = 1_000_000, 100 * time.Millisecond
	b.Run("tock", func(b *testing.B) { timerbench.Burst(b, timerbench.NewTock, n, window) })
	b.Run("time", func(b *testing.B) { timerbench.Burst(b, timerbench.NewRuntime, n, window) })
	b.Run("go-zero", func(b *testing.B) { timerbench.Burst(b, newGoZero, n, window) })
}

// BenchmarkLateness fires 20,000 timers over 2 s with a million others pending and reports
// lateness percentiles and early firings.
func BenchmarkLateness(b *testing.B) {
	const pending, n, span = 1_000_000, 20_000, 2 * time.Second
	b.Run("tock", func(b *testing.B) { timerbench.Lateness(b, timerbench.NewTock(), pending, n, span) })
	b.Run("time", func(b *testing.B) { timerbench.Lateness(b, timerbench.NewRuntime(), pending, n, span) })
	b.Run("go-zero", func(b *testing.B) { timerbench.Lateness(b, newGoZero(), pending, n, span) })
}
