package tock

import (
	"context"
	"testing"
	"time"
)

// These benchmarks compare a wheel context with the standard one, side by side in one run:
//
//	go test -run '^$' -bench 'WithTimeout' -benchmem .

// A timeoutFunc is w.WithTimeout or context.WithTimeout.
type timeoutFunc func(context.Context, time.Duration) (context.Context, context.CancelFunc)

// benchTimeout creates and cancels a context with a timeout under parent, asking for its done
// channel first when askDone is set, as code that passes the context to I/O does.
func benchTimeout(b *testing.B, parent context.Context, withTimeout timeoutFunc, askDone bool) {
	b.ReportAllocs()
	for b.Loop() {
		c, cancel := withTimeout(parent, time.Second)
		if askDone {
			_ = c.Done()
		}
		cancel()
	}
}

// benchWheel returns a wheel that is stopped when the benchmark ends.
func benchWheel(b *testing.B) *Wheel {
	w := New()
	b.Cleanup(func() { w.Stop() })
	return w
}

// cancelableStdParent returns a cancelable standard context, as r.Context() in an HTTP handler is.
func cancelableStdParent(b *testing.B) context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	return ctx
}

func BenchmarkWithTimeout(b *testing.B) {
	benchTimeout(b, context.Background(), benchWheel(b).WithTimeout, false)
}

func BenchmarkContextWithTimeout(b *testing.B) {
	benchTimeout(b, context.Background(), context.WithTimeout, false)
}

// Below a cancelable standard parent the standard context joins its parent's children; a wheel
// context registers with context.AfterFunc only once its done channel or a child needs it, which
// this loop does not.
func BenchmarkWithTimeoutStdParent(b *testing.B) {
	benchTimeout(b, cancelableStdParent(b), benchWheel(b).WithTimeout, false)
}

func BenchmarkContextWithTimeoutStdParent(b *testing.B) {
	benchTimeout(b, cancelableStdParent(b), context.WithTimeout, false)
}

// The same with the done channel asked for: now the wheel context registers with its parent.
func BenchmarkWithTimeoutStdParentDone(b *testing.B) {
	benchTimeout(b, cancelableStdParent(b), benchWheel(b).WithTimeout, true)
}

func BenchmarkContextWithTimeoutStdParentDone(b *testing.B) {
	benchTimeout(b, cancelableStdParent(b), context.WithTimeout, true)
}

// Below a wheel context, a wheel context joins its parent's children, as the standard one does
// below a standard parent.
func BenchmarkWithTimeoutWheelParent(b *testing.B) {
	w := benchWheel(b)
	parent, cancel := w.WithTimeout(context.Background(), time.Hour)
	b.Cleanup(cancel)
	benchTimeout(b, parent, w.WithTimeout, false)
}

func BenchmarkWithTimeoutParallel(b *testing.B) {
	benchTimeoutParallel(b, benchWheel(b).WithTimeout)
}

func BenchmarkContextWithTimeoutParallel(b *testing.B) {
	benchTimeoutParallel(b, context.WithTimeout)
}

func benchTimeoutParallel(b *testing.B, withTimeout timeoutFunc) {
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			_, cancel := withTimeout(context.Background(), time.Second)
			cancel()
		}
	})
}
