package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tockwheel/tock/delayq"
)

// TestCheck runs tock check on a clean queue directory (exit 0), on one with a damaged record
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
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (int, string) {
		var out, errb bytes.Buffer
		code := commands()["check"](context.Background(), args, &out, &errb)
		return code, out.String() + errb.String()
	}
	if code, out := run(dir); code != exitOK || !strings.Contains(out, ": ok;") || !strings.Contains(out, "10 messages pending") {
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
	if code, _ := run(); code != exitUsage {
		t.Fatalf("check without a directory: exit %d", code)
	}
}
