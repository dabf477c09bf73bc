package tock

import (
	"context"
	"testing"
	"time"
)

// These benchmarks compare a wheel context with the standard one, side by side in one run:
//
//	go test -run '^$' -bench 'WithTimeout$' -benchmem .

func BenchmarkWithTimeout(b *testing.B) {
	w := New()
	defer w.Stop()
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		_, cancel := w.WithTimeout(ctx, time.Second)
		cancel()
	}
}

func BenchmarkContextWithTimeout(b *testing.B) {
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		_, cancel := context.WithTimeout(ctx, time.Second)
		cancel()
	}
}

// Below a cancelable standard parent (as r.Context() in an HTTP handler is), the standard context
// joins its parent's children; a wheel context registers with context.AfterFunc only once its done
// channel or a child needs it, which this loop does not.
func BenchmarkWithTimeoutStdParent(b *testing.B) {
	w := New()
	defer w.Stop()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b.ReportAllocs()
	for b.Loop() {
		_, cancel := w.WithTimeout(ctx, time.Second)
		cancel()
	}
}

// The same, with the done channel asked for, as a context passed to I/O usually is: now the wheel
// context registers with its parent.
func BenchmarkWithTimeoutStdParentDone(b *testing.B) {
	w := New()
	defer w.Stop()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b.ReportAllocs()
	for b.Loop() {
		c, cancel := w.WithTimeout(ctx, time.Second)
		_ = c.Done()
		cancel()
	}
}

func BenchmarkContextWithTimeoutStdParentDone(b *testing.B) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b.ReportAllocs()
	for b.Loop() {
		c, cancel := context.WithTimeout(ctx, time.Second)
		_ = c.Done()
		cancel()
	}
}

// Below a wheel context, a wheel context joins its parent's children, as the standard one does
// below a standard parent.
func BenchmarkWithTimeoutWheelParent(b *testing.B) {
	w := New()
	defer w.Stop()
	ctx, cancel := w.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	b.ReportAllocs()
	for b.Loop() {
		_, cancel := w.WithTimeout(ctx, time.Second)
		cancel()
	}
}

func BenchmarkContextWithTimeoutStdParent(b *testing.B) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b.ReportAllocs()
	for b.Loop() {
		_, cancel := context.WithTimeout(ctx, time.Second)
		cancel()
	}
}

func BenchmarkWithTimeoutParallel(b *testing.B) {
	w := New()
	defer w.Stop()
	ctx := context.Background()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			_, cancel := w.WithTimeout(ctx, time.Second)
			cancel()
		}
	})
}

func BenchmarkContextWithTimeoutParallel(b *testing.B) {
	ctx := context.Background()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			_, cancel := context.WithTimeout(ctx, time.Second)
			cancel()
		}
	})
}
