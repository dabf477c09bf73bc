package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tockwheel/tock/delayq"
	"github.com/tockwheel/tock/internal/redistest"
	"github.com/tockwheel/tock/queue"
	"github.com/tockwheel/tock/redisq"
)

// TestCheck runs tock check on a clean queue directory (exit 0; its messages and schedules
// counted, each schedule's fire put ahead a message), on one with a damaged record
// (exit 1, naming the file and offset), and with bad arguments (exit 2).
func TestCheck(t *testing.T) {
	dir := t.TempDir()
	q, err := delayq.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		if _, err := q.Put(context.Background(), delayq.Message{Topic: "t", Payload: []byte("payload"), DeliverAt: time.Now().Add(time.Duration(i+1) * time.Hour)}); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"digest", "report"} {
		if _, err := q.SetSchedule(context.Background(), queue.Schedule{Name: name, Topic: "t", Spec: "@daily"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (int, string) {
		var out, errb bytes.Buffer
		code := commands()["check"](context.Background(), args, &out, &errb)
		return code, out.String() + errb.String()
	}
	if code, out := run(dir); code != exitOK || !strings.Contains(out, ": ok;") || !strings.Contains(out, "12 messages pending, 2 schedules") {
		t.Fatalf("check of a clean queue: %d\n%s", code, out)
	}
	seg := filepath.Join(dir, "0000000001.seg")
	data, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	data[16+40] ^= 0xff // inside the first record
	if err := os.WriteFile(seg, data, 0o644); err != nil {
		t.Fatal(err)
	}
	code, out := run(dir)
	if code != exitFailed || !strings.Contains(out, "damaged: "+seg+" at offset 16") || !strings.Contains(out, "1 damaged place") {
		t.Fatalf("check of a damaged queue: %d\n%s", code, out)
	}
	// Once an Open has reported it, the damage is accounted for: check says so and passes, unless
	// asked to be strict.
	if q, err = delayq.Open(dir, delayq.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))); err != nil {
		t.Fatal(err)
	}
	if n := q.Snapshot().CorruptRecords; n != 1 {
		t.Fatalf("Open of the damaged queue: CorruptRecords %d, want 1", n)
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	if code, out := run(dir); code != exitOK || !strings.Contains(out, "damaged, accounted for earlier: "+seg+" at offset 16") ||
		!strings.Contains(out, ": ok, 1 damaged place accounted for earlier;") {
		t.Fatalf("check of damage accounted for: %d\n%s", code, out)
	}
	if code, out := run("-strict", dir); code != exitFailed {
		t.Fatalf("check -strict of damage accounted for: %d\n%s", code, out)
	}
	if code, _ := run(); code != exitUsage {
		t.Fatalf("check without a directory: exit %d", code)
	}
}

// TestCheckRedis runs tock check -redis on a deployment of redisq: exit 0 when sound, 1 naming
// the broken invariant once a message is taken out of its place, 1 for a prefix with no
// deployment, 2 for a malformed URL.
func TestCheckRedis(t *testing.T) {
	s := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr})
	defer rdb.Close()
	ctx := context.Background()
	q, err := redisq.Open(ctx, rdb, redisq.WithPrefix("checked"), redisq.WithShards(2))
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	id, err := q.Put(ctx, queue.Message{Topic: "t", Payload: []byte("x"), DeliverAt: time.Now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (int, string) {
		var out, errb bytes.Buffer
		code := commands()["check"](ctx, args, &out, &errb)
		return code, out.String() + errb.String()
	}
	url := "redis://" + s.Addr
	if code, out := run("-redis", url, "-redis-prefix", "checked"); code != exitOK || !strings.Contains(out, ": ok; 2 shards, 1 message") {
		t.Fatalf("check of a sound deployment: %d\n%s", code, out)
	}
	// The record goes; its entry in the wheel stays.
	keys, _ := rdb.Keys(ctx, "{checked/*}:rec").Result()
	for _, k := range keys {
		rdb.HDel(ctx, k, id)
	}
	if code, out := run("-redis", url, "-redis-prefix", "checked"); code != exitFailed || !strings.Contains(out, "broken: shard") || !strings.Contains(out, id) {
		t.Fatalf("check of a broken deployment: %d\n%s", code, out)
	}
	if code, out := run("-redis", url, "-redis-prefix", "nothing-here"); code != exitFailed || !strings.Contains(out, "-redis-prefix") {
		t.Fatalf("check of a missing deployment: %d\n%s", code, out)
	}
	if code, _ := run("-redis", "http://x"); code != exitUsage {
		t.Fatalf("check -redis http://x: exit %d", code)
	}
}
