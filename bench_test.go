package tock_test

import (
	"testing"
	"time"

	"github.com/tockwheel/tock/internal/timerbench"
)

// The benchmarks put tock beside the Go runtime's timers (time.AfterFunc) in the same run, because
// only the ratio means much on a shared machine:
//
//	go test -run '^$' -bench . -benchmem
//
// bench/ runs the same scenarios beside other Go timer libraries, and `go run ./cmd/tock bench`
// prints them as a table.

func BenchmarkMemory(b *testing.B) {
	b.Run("tock", func(b *testing.B) { timerbench.Memory(b, timerbench.NewTock, 1_000_000) })
	b.Run("time", func(b *testing.B) { timerbench.Memory(b, timerbench.NewRuntime, 1_000_000) })
}

func BenchmarkAfterFuncStop(b *testing.B) {
	for _, n := range []int{0, 1_000_000, 5_000_000} {
		b.Run("pending="+timerbench.Count(n)+"/tock", func(b *testing.B) { timerbench.AfterFuncStop(b, timerbench.NewTock(), n) })
		b.Run("pending="+timerbench.Count(n)+"/time", func(b *testing.B) { timerbench.AfterFuncStop(b, timerbench.NewRuntime(), n) })
	}
}

func BenchmarkAfterFuncStopParallel(b *testing.B) {
	for _, n := range []int{0, 1_000_000} {
		b.Run("pending="+timerbench.Count(n)+"/tock", func(b *testing.B) {
			timerbench.AfterFuncStopParallel(b, timerbench.NewTock(), n)
		})
		b.Run("pending="+timerbench.Count(n)+"/time", func(b *testing.B) {
			timerbench.AfterFuncStopParallel(b, timerbench.NewRuntime(), n)
		})
	}
}

func BenchmarkReset(b *testing.B) {
	b.Run("pending=1M/tock", func(b *testing.B) { timerbench.Reset(b, timerbench.NewTock(), 1_000_000) })
	b.Run("pending=1M/time", func(b *testing.B) { timerbench.Reset(b, timerbench.NewRuntime(), 1_000_000) })
}

// BenchmarkBurst: a million timers due within 100 ms; ms-to-all-done counts from the first
// AfterFunc to the last callback's return.
func BenchmarkBurst(b *testing.B) {
	b.Run("tock", func(b *testing.B) { timerbench.Burst(b, timerbench.NewTock, 1_000_000, 100*time.Millisecond) })
	b.Run("time", func(b *testing.B) { timerbench.Burst(b, timerbench.NewRuntime, 1_000_000, 100*time.Millisecond) })
}

// BenchmarkLateness fires 20,000 timers over 2 s with a million others pending and reports
// lateness percentiles and early firings.
func BenchmarkLateness(b *testing.B) {
	b.Run("tock", func(b *testing.B) {
		timerbench.Lateness(b, timerbench.NewTock(), 1_000_000, 20_000, 2*time.Second)
	})
	b.Run("time", func(b *testing.B) {
		timerbench.Lateness(b, timerbench.NewRuntime(), 1_000_000, 20_000, 2*time.Second)
	})
}
