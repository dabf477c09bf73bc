package server

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tockwheel/tock"
	"github.com/tockwheel/tock/delayq"
	"github.com/tockwheel/tock/queue"
)

// failingPuts is the delayq engine with Put failing, to reach the server's
// answer to an engine failure.
type failingPuts struct{ queue.Engine }

func (failingPuts) Put(context.Context, queue.Message) (string, error) {
	return "", errors.New("disk on fire")
}

// TestWithLoggerNilIsTheDefault is the regression test of WithLogger(nil)
// panicking on the first 500: nil means slog.Default(), and a nil Option
// is ignored.
func TestWithLoggerNilIsTheDefault(t *testing.T) {
	q, err := delayq.Open(t.TempDir(), delayq.WithNoSync())
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	s := New(failingPuts{q}, nil, WithLogger(nil), nil)
	ts := newHTTPTestServer(t, s)
	r := call(t, ts, "POST", "/v1/topics/t/messages", `{}`)
	if r.status != 500 || !strings.Contains(r.errorMsg(t), "disk on fire") {
		t.Fatalf("put on a failing store: %d %s, want 500 naming the failure", r.status, r.body)
	}
}

func TestBadOptionsPanicAtNew(t *testing.T) {
	q, err := delayq.Open(t.TempDir(), delayq.WithNoSync())
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	store := q
	for _, tc := range []struct {
		name  string
		store queue.Engine
		opt   Option
		want  string
	}{
		{"nil engine", nil, nil, "server: New: nil queue.Engine"},
		{"negative payload", store, WithLimits(Limits{MaxPayload: -1}), "server: WithLimits: Limits.MaxPayload is negative"},
		{"negative body timeout", store, WithLimits(Limits{BodyTimeout: -time.Second}), "Limits.BodyTimeout is negative"},
		{"default visibility over the max", store, WithLimits(Limits{DefaultVisibility: time.Hour, MaxVisibility: time.Minute}),
			"Limits.DefaultVisibility 1h0m0s exceeds MaxVisibility 1m0s"},
		{"default visibility over the default max", store, WithLimits(Limits{DefaultVisibility: 13 * time.Hour}),
			"exceeds MaxVisibility 12h0m0s"},
		{"malformed origin", store, WithAllowedOrigins("app.example"), `server: WithAllowedOrigins("app.example")`},
		{"origin with a path", store, WithAllowedOrigins("https://app.example/x"), `WithAllowedOrigins("https://app.example/x")`},
		{"empty host", store, WithAllowedHosts(""), `server: WithAllowedHosts("")`},
		{"host with a slash", store, WithAllowedHosts("a/b"), `WithAllowedHosts("a/b")`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer func() {
				msg := fmt.Sprint(recover())
				if !strings.Contains(msg, tc.want) {
					t.Fatalf("New panicked with %q, want %q", msg, tc.want)
				}
			}()
			New(tc.store, tc.opt)
		})
	}
	// Zero limits are the defaults; valid ones are taken as they are.
	New(store, WithLimits(Limits{}), WithLimits(Limits{MaxPayload: 10, DefaultVisibility: time.Minute}),
		WithAllowedOrigins("http://localhost:3000"), WithAllowedHosts("*"))
}

// TestLongPollsRunOnTheGivenWheel checks WithWheel: a receive that waits
// keeps its timer on the wheel it was given, so that a program can run
// all of tock on one wheel.
func TestLongPollsRunOnTheGivenWheel(t *testing.T) {
	w := tock.New()
	defer w.Stop()
	ts, s := newTestServer(t, WithWheel(w))
	done := make(chan result)
	go func() { done <- call(t, ts, "POST", "/v1/topics/idle/receive", `{"wait":"20s"}`) }()
	deadline := time.Now().Add(10 * time.Second)
	for w.Pending() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no timer on the wheel while a receive waits")
		}
		time.Sleep(time.Millisecond)
	}
	s.Drain()
	if r := <-done; r.status != 200 {
		t.Fatalf("receive: %d %s", r.status, r.body)
	}
	if n := w.Pending(); n != 0 {
		t.Errorf("%d timers left on the wheel after the receive returned", n)
	}
}
