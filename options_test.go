package tock

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// mustPanicWith fails t unless f panics with a message that contains want.
func mustPanicWith(t *testing.T, want string, f func()) {
	t.Helper()
	defer func() {
		t.Helper()
		r := recover()
		if r == nil {
			t.Fatalf("no panic; want one containing %q", want)
		}
		if msg := fmt.Sprint(r); !strings.Contains(msg, want) || !strings.HasPrefix(msg, "tock: ") {
			t.Fatalf("panic %q; want it to start with \"tock: \" and contain %q", msg, want)
		}
	}()
	f()
}

// A bad option is a bug in the calling program: New panics at once and names the option, even when
// a later option would have made the value irrelevant.
func TestNewPanicsNamingBadOption(t *testing.T) {
	tests := []struct {
		name string
		opts []Option
		want string
	}{
		{"tick below 1µs", []Option{WithTick(time.Nanosecond)}, "WithTick(1ns)"},
		{"zero tick", []Option{WithTick(0)}, "WithTick(0s)"},
		{"negative tick", []Option{WithTick(-time.Second)}, "WithTick(-1s)"},
		{"no shards", []Option{WithShards(0)}, "WithShards(0)"},
		{"negative shards", []Option{WithShards(-1)}, "WithShards(-1)"},
		{"empty pool", []Option{WithPoolExecutor(0)}, "WithPoolExecutor(0)"},
		{"empty pool replaced by inline", []Option{WithPoolExecutor(0), WithInlineExecutor()}, "WithPoolExecutor(0)"},
		{"bad value then a good one", []Option{WithShards(0), WithShards(2)}, "WithShards(0)"},
		{"first of two bad values", []Option{WithTick(time.Millisecond), WithShards(-2), WithTick(0)}, "WithShards(-2)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mustPanicWith(t, tt.want, func() { New(tt.opts...) })
		})
	}
}

// The smallest accepted values are accepted.
func TestNewAcceptsBoundaryOptions(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := New(WithTick(MinTick), WithShards(1), WithPoolExecutor(1), WithMaxPending(0), WithMaxPending(-1))
		defer w.Stop()
		mustFireWithin(t, w, time.Millisecond, MinTick)
	})
}

// mustFireWithin schedules a timer d ahead on w and fails t unless it fires no earlier than d and
// at most tick after.
func mustFireWithin(t *testing.T, w *Wheel, d, tick time.Duration) {
	t.Helper()
	start := time.Now()
	fired := make(chan time.Duration, 1)
	if _, err := w.AfterFunc(d, func() { fired <- time.Since(start) }); err != nil {
		t.Fatal(err)
	}
	if got := <-fired; got < d || got > d+tick {
		t.Fatalf("fired after %v, want %v to %v", got, d, d+tick)
	}
}

// A nil Option is ignored, so that options can be chosen conditionally.
func TestNewIgnoresNilOption(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var maybe Option // a feature turned off in the configuration
		w := New(nil, WithTick(10*time.Millisecond), maybe)
		defer w.Stop()
		mustFireWithin(t, w, 25*time.Millisecond, 10*time.Millisecond)
	})
}

// WithPanicHandler(nil) means the default handler, which logs with log/slog, even after a handler
// was set by an earlier option.
func TestPanicHandlerNilMeansDefault(t *testing.T) {
	var logged bytes.Buffer
	defaultLogger := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&logged, nil)))
	t.Cleanup(func() { slog.SetDefault(defaultLogger) })
	synctest.Test(t, func(t *testing.T) {
		called := false
		w := New(WithInlineExecutor(), WithPanicHandler(func(any) { called = true }), WithPanicHandler(nil))
		defer w.Stop()
		w.AfterFunc(time.Millisecond, func() { panic("boom") })
		time.Sleep(2 * time.Millisecond)
		synctest.Wait()
		if called {
			t.Fatal("the handler replaced by WithPanicHandler(nil) was called")
		}
	})
	if out := logged.String(); !strings.Contains(out, "tock: timer callback panicked") || !strings.Contains(out, "boom") {
		t.Fatalf("default handler logged %q; want the panic logged with log/slog", out)
	}
}
