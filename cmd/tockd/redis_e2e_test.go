package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tockwheel/tock/client"
	"github.com/tockwheel/tock/internal/redistest"
)

// These tests run the real tockd on real redis-servers (internal/redistest).

// prefixes makes each test's deployment its own, so that tests may share servers.
var prefixes atomic.Int64

func newPrefix() string { return fmt.Sprintf("e2e%d", prefixes.Add(1)) }

// startRedisTockd starts tockd on the Redis deployment target under prefix.
func startRedisTockd(t *testing.T, target, prefix string, args ...string) *daemon {
	t.Helper()
	return startTockd(t, "", nil, append([]string{"-redis", target, "-redis-prefix", prefix}, args...)...)
}

// TestEndToEndRedis drives every route of a tockd serving one redis-server,
// as TestEndToEnd does for the embedded engine.
func TestEndToEndRedis(t *testing.T) {
	tockdBinary(t)
	s := redistest.Start(t)
	d := startRedisTockd(t, "redis://"+s.Addr, newPrefix())
	driveEveryRoute(t, d, "tock_redis_script_duration_seconds_count")
}

// TestRedisStartErrors checks that tockd exits 1 with one line saying why
// when it cannot serve the deployment -redis names.
func TestRedisStartErrors(t *testing.T) {
	tockdBinary(t)
	s := redistest.Start(t)
	prefix := newPrefix()
	d := startRedisTockd(t, "redis://"+s.Addr, prefix, "-redis-shards", "4")
	if err := d.client(t).Ready(ctxFor(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	closed := freeAddr(t)
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"unreachable", []string{"-redis", "redis://" + closed}, []string{"cannot reach Redis at redis://" + closed, "connection refused"}},
		{"shard mismatch", []string{"-redis", "redis://" + s.Addr, "-redis-prefix", prefix, "-redis-shards", "8"},
			[]string{"has 4 shards", "leave out -redis-shards"}},
		{"not a cluster", []string{"-redis", s.Addr}, []string{"cluster support disabled", "redis://host:port"}},
		{"no Sentinel", []string{"-redis", "redis-sentinel://" + closed + "?master_name=main"},
			[]string{"cannot reach Redis at redis-sentinel://" + closed, "no answer within 10s"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			out, code := runTockd(t, 20*time.Second, tc.args...)
			lines := strings.Split(strings.TrimSpace(out), "\n")
			if code != 1 || len(lines) != 1 {
				t.Fatalf("exit %d with %d lines; want 1 with one line:\n%s", code, len(lines), out)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("%q lacks %q", out, w)
				}
			}
		})
	}
	// Without -redis-shards, a later process takes the deployment's.
	t.Run("shards taken from the deployment", func(t *testing.T) {
		d2 := startRedisTockd(t, "redis://"+s.Addr, prefix)
		if err := d2.client(t).Ready(ctxFor(t, 10*time.Second)); err != nil {
			t.Fatal(err)
		}
	})
}

// TestReadyzFollowsRedis checks that /readyz answers 503 while Redis is
// down, and 200 again once it is back.
func TestReadyzFollowsRedis(t *testing.T) {
	tockdBinary(t)
	s := redistest.Start(t)
	d := startRedisTockd(t, "redis://"+s.Addr, newPrefix())
	c := d.client(t, client.WithRetries(0, 0))
	ctx := ctxFor(t, time.Minute)
	if err := c.Ready(ctx); err != nil {
		t.Fatal(err)
	}
	s.Stop()
	var e *client.Error
	if err := c.Ready(ctx); !errors.As(err, &e) || e.StatusCode != 503 {
		t.Fatalf("readyz with Redis down: %v; want a 503", err)
	}
	if err := c.Healthy(ctx); err != nil {
		t.Errorf("healthz with Redis down: %v; want 200, the process is alive", err)
	}
	s.Restart()
	deadline := time.Now().Add(10 * time.Second)
	for c.Ready(ctx) != nil {
		if time.Now().After(deadline) {
			t.Fatalf("readyz still failing 10s after Redis came back: %v", c.Ready(ctx))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// runTockd runs tockd with args until it exits, and returns what it wrote
// and its exit code.
func runTockd(t *testing.T, timeout time.Duration, args ...string) (string, int) {
	t.Helper()
	d := &daemon{done: make(chan struct{})}
	cmd := exec.Command(tockdBinary(t), append([]string{"-addr", "127.0.0.1:0"}, args...)...)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	d.cmd = cmd
	go func() {
		d.err = cmd.Wait()
		close(d.done)
	}()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-d.done })
	code := d.exitCode(t, timeout)
	return out.String(), code
}

// freeAddr returns a loopback address on which nothing listens.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// TestSentinelE2E serves a master found through a real Sentinel, with
// -redis redis-sentinel://.
func TestSentinelE2E(t *testing.T) {
	tockdBinary(t)
	master := redistest.Start(t)
	sentinel := startSentinel(t, "main", master.Addr)
	d := startRedisTockd(t, "redis-sentinel://"+sentinel+"?master_name=main", newPrefix())
	if !strings.Contains(d.logs(), "kind=sentinel") {
		t.Errorf("tockd did not open a Sentinel client:\n%s", d.logs())
	}
	c := d.client(t)
	ctx := ctxFor(t, 30*time.Second)
	res, err := c.Put(ctx, "s", client.Message{Payload: json.RawMessage(`"via sentinel"`)})
	if err != nil {
		t.Fatal(err)
	}
	ds, err := c.Receive(ctx, "s", client.ReceiveOptions{Wait: 5 * time.Second})
	if err != nil || len(ds) != 1 || ds[0].ID != res.ID {
		t.Fatalf("receive: %+v, %v; want %s", ds, err, res.ID)
	}
	if err := c.Ack(ctx, ds[0].Receipt); err != nil {
		t.Fatal(err)
	}
	// The queue is kept on the master.
	rdb := redis.NewClient(&redis.Options{Addr: master.Addr})
	defer rdb.Close()
	keys, err := rdb.Keys(ctx, "*").Result()
	if err != nil || !slices.ContainsFunc(keys, func(k string) bool { return strings.HasSuffix(k, ":config") }) {
		t.Errorf("keys on the master: %q, %v; want the queue's", keys, err)
	}
}

// startSentinel starts a redis-server in Sentinel mode that monitors the
// master at addr under name, and returns its address. It is killed when the
// test ends.
func startSentinel(t *testing.T, name, addr string) string {
	t.Helper()
	host, port, _ := net.SplitHostPort(addr)
	self := freeAddr(t)
	_, selfPort, _ := net.SplitHostPort(self)
	dir := t.TempDir()
	conf := filepath.Join(dir, "sentinel.conf")
	// Sentinel rewrites its configuration file, so it must be its own.
	text := fmt.Sprintf("port %s\nbind 127.0.0.1\ndir %s\nsentinel monitor %s %s %s 1\nsentinel down-after-milliseconds %s 1000\n",
		selfPort, dir, name, host, port, name)
	if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(redistest.Binary, conf, "--sentinel")
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-done })
	deadline := time.Now().Add(10 * time.Second)
	for {
		conn, err := net.DialTimeout("tcp", self, time.Second)
		if err == nil {
			conn.Close()
			return self
		}
		select {
		case <-done:
			t.Fatalf("redis-server --sentinel exited:\n%s", out.String())
		default:
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			<-done
			t.Fatalf("Sentinel not listening on %s after 10s:\n%s", self, out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}
