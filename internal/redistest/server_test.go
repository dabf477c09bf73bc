package redistest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func client(t *testing.T, s *Server) *redis.Client {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

func TestStartServes(t *testing.T) {
	s := Start(t)
	rdb := client(t, s)
	ctx := context.Background()
	if err := rdb.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if got, err := rdb.Get(ctx, "k").Result(); err != nil || got != "v" {
		t.Fatalf("GET k = %q, %v; want v", got, err)
	}
	if !s.Running() {
		t.Fatal("Running() = false for a started server")
	}
}

func TestServersAreSeparate(t *testing.T) {
	a, b := Start(t), Start(t)
	if a.Addr == b.Addr {
		t.Fatalf("two servers share %s", a.Addr)
	}
	ctx := context.Background()
	if err := client(t, a).Set(ctx, "k", "a", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := client(t, b).Get(ctx, "k").Err(); !errors.Is(err, redis.Nil) {
		t.Fatalf("GET k on the second server: err = %v, want redis.Nil", err)
	}
}

func TestStopAndRestart(t *testing.T) {
	s := Start(t)
	rdb := client(t, s)
	ctx := context.Background()
	addr := s.Addr
	if err := rdb.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	s.Stop()
	s.Stop() // a second Stop is a no-op
	if s.Running() {
		t.Fatal("Running() = true after Stop")
	}
	if err := rdb.Ping(ctx).Err(); err == nil {
		t.Fatal("PING succeeded against a stopped server")
	}
	s.Restart()
	if s.Addr != addr {
		t.Fatalf("Addr changed across Restart: %s -> %s", addr, s.Addr)
	}
	if err := rdb.Get(ctx, "k").Err(); !errors.Is(err, redis.Nil) {
		t.Fatalf("GET k after restart: err = %v, want redis.Nil (no persistence)", err)
	}
}

func TestRestartWhileRunning(t *testing.T) {
	s := Start(t)
	rdb := client(t, s)
	ctx := context.Background()
	if err := rdb.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	s.Restart()
	// The pooled connection died with the old process; the client reconnects on a later call.
	_ = rdb.Ping(ctx).Err()
	if err := rdb.Get(ctx, "k").Err(); !errors.Is(err, redis.Nil) {
		t.Fatalf("GET k after restart: err = %v, want redis.Nil", err)
	}
}

func TestExtraArgsSurviveRestart(t *testing.T) {
	s := Start(t, "--maxmemory", "12582912")
	rdb := client(t, s)
	ctx := context.Background()
	check := func(when string) {
		t.Helper()
		got, err := rdb.ConfigGet(ctx, "maxmemory").Result()
		if err != nil {
			t.Fatal(err)
		}
		if got["maxmemory"] != "12582912" {
			t.Fatalf("%s: maxmemory = %q, want 12582912", when, got["maxmemory"])
		}
	}
	check("after start")
	s.Restart()
	_ = rdb.Ping(ctx).Err()
	check("after restart")
}

func TestBadArgsFail(t *testing.T) {
	if _, err := lookPath(); err != nil {
		t.Skip(err)
	}
	rec := &recorder{TB: t}
	func() {
		defer func() {
			if r := recover(); r != nil && r != errFatal {
				panic(r)
			}
		}()
		Start(rec, "--no-such-option", "1")
	}()
	if rec.fatal == "" {
		t.Fatal("Start with an invalid option did not fail the test")
	}
}

// recorder is a testing.TB that records Skip and Fatal instead of acting on them.
type recorder struct {
	testing.TB
	skipped, fatal string
}

var errFatal = errors.New("fatal")

func (r *recorder) Helper() {}
func (r *recorder) Skipf(format string, args ...any) {
	r.skipped = fmt.Sprintf(format, args...)
}
func (r *recorder) Fatalf(format string, args ...any) {
	r.fatal = fmt.Sprintf(format, args...)
	panic(errFatal) // Fatalf must not return, or Start would go on
}

func TestMissingBinary(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	for _, ci := range []string{"", "true"} {
		t.Run("CI="+ci, func(t *testing.T) {
			t.Setenv("CI", ci)
			rec := &recorder{TB: t}
			var s *Server
			func() {
				defer func() {
					if r := recover(); r != nil && r != errFatal {
						panic(r)
					}
				}()
				s = Start(rec)
			}()
			if s != nil {
				t.Fatal("Start returned a server without redis-server on PATH")
			}
			if ci == "" && (rec.skipped == "" || rec.fatal != "") {
				t.Fatalf("outside CI: skipped=%q fatal=%q; want a skip", rec.skipped, rec.fatal)
			}
			if ci != "" && (rec.fatal == "" || rec.skipped != "") {
				t.Fatalf("in CI: skipped=%q fatal=%q; want a failure", rec.skipped, rec.fatal)
			}
		})
	}
}

// TestPauseAndResume freezes a server: it answers nothing while paused, and everything sent to it
// meanwhile once resumed. Nothing here bounds how fast a running server answers (a loaded machine
// may take seconds): the clients that talk to the running server wait as long as the test may run,
// and only the one that asks the paused server gives up early, an error being its expected answer.
func TestPauseAndResume(t *testing.T) {
	s := Start(t)
	ctx := t.Context()
	patient := func() *redis.Client {
		rdb := redis.NewClient(&redis.Options{Addr: s.Addr, ReadTimeout: -1, WriteTimeout: -1, MaxRetries: -1})
		t.Cleanup(func() { rdb.Close() })
		return rdb
	}
	// late is connected before the pause, so that its command below reaches the paused server.
	late := patient()
	if err := late.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	s.Pause()
	s.Pause() // a second Pause is a no-op
	if !s.Paused() || !s.Running() {
		t.Fatalf("Paused() = %v, Running() = %v after Pause; want true, true", s.Paused(), s.Running())
	}
	// The kernel accepts the connection; the handshake's answer never comes.
	asker := redis.NewClient(&redis.Options{Addr: s.Addr, ReadTimeout: 200 * time.Millisecond, MaxRetries: -1})
	t.Cleanup(func() { asker.Close() })
	if err := asker.Ping(ctx).Err(); err == nil {
		t.Fatal("PING answered by a paused server")
	}
	// A command sent while paused is buffered by the kernel and runs on Resume.
	done := make(chan error, 1)
	go func() { done <- late.Set(ctx, "k", "v", 0).Err() }()
	select {
	case err := <-done:
		t.Fatalf("SET returned %v from a paused server", err)
	case <-time.After(100 * time.Millisecond):
	}
	s.Resume()
	if err := <-done; err != nil {
		t.Fatalf("SET sent while paused: %v", err)
	}
	if got := late.Get(ctx, "k").Val(); got != "v" {
		t.Fatalf("GET k = %q, want v", got)
	}
	// Stop ends a paused server too.
	s.Pause()
	s.Stop()
	if s.Running() || s.Paused() {
		t.Fatalf("Running() = %v, Paused() = %v after Stop", s.Running(), s.Paused())
	}
}
