package delayq

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

var (
	templateOnce sync.Once
	templateDir  string
	templateErr  error
)

// fuzzTemplate builds, once, a queue directory with messages in memory and in the disk wheel,
// acks, a cancel and a checkpoint, closed uncleanly: its log goes on after the checkpoint.
func fuzzTemplate() (string, error) {
	templateOnce.Do(func() {
		templateDir, templateErr = os.MkdirTemp("", "delayq-fuzz-template")
		if templateErr != nil {
			return
		}
		ctx := context.Background()
		q, err := Open(templateDir, WithLogger(quiet), WithSegmentSize(4096), WithCheckpointInterval(time.Hour))
		if err != nil {
			templateErr = err
			return
		}
		now := time.Now()
		var ids []string
		for i := range 60 {
			id, err := q.Put(ctx, Message{Topic: "t", Payload: []byte(fmt.Sprint("payload ", i)), DeliverAt: now.Add(time.Duration(i%3-1) * time.Hour)})
			if err != nil {
				templateErr = err
				return
			}
			ids = append(ids, id)
		}
		q.Cancel(ctx, ids[2])
		ds, _ := q.Receive(ctx, "t", 5, time.Minute)
		for _, d := range ds[:3] {
			q.Ack(ctx, d.Receipt)
		}
		templateErr = q.checkpoint()
		for i := range 10 {
			q.Put(ctx, Message{ID: fmt.Sprint("user", i), Topic: "u", DeliverAt: now.Add(time.Duration(i) * time.Minute)})
		}
		q.log.WaitDurable(q.log.End())
		// Copy the files as they are now: a crash, not a Close.
		crashed := templateDir + ".crashed"
		templateErr = errors.Join(templateErr, copyFiles(templateDir, crashed))
		q.Close()
		templateDir = crashed
	})
	return templateDir, templateErr
}

func copyFiles(src, dst string) error {
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	ents, err := os.ReadDir(src)
	if err != nil {
		return err
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// FuzzRecover damages one file of a crashed queue directory (the checkpoint or a segment: bytes
// overwritten at an offset, or the file cut short) and opens it. Damage costs only what it held:
// Open must succeed, never panic or hang, and the queue must work. Unless it found damage (a torn
// write it cut is not damage), the state must pass its invariant check.
func FuzzRecover(f *testing.F) {
	f.Add(uint8(0), uint32(0), []byte{0xff}, false)
	f.Add(uint8(0), uint32(30), []byte{1, 2, 3, 4, 5, 6, 7, 8}, false)
	f.Add(uint8(0), uint32(100), []byte{}, true)
	f.Add(uint8(1), uint32(17), []byte{0}, false)
	f.Add(uint8(2), uint32(4000), []byte{}, true)
	f.Add(uint8(3), uint32(50), []byte{0, 0, 0, 0, 0, 0, 0, 0, 0}, false)
	f.Fuzz(func(t *testing.T, file uint8, off uint32, patch []byte, cut bool) {
		tmpl, err := fuzzTemplate()
		if err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		if err := copyFiles(tmpl, dir); err != nil {
			t.Fatal(err)
		}
		ents, _ := os.ReadDir(dir)
		var names []string
		for _, e := range ents {
			if e.Name() != "LOCK" {
				names = append(names, e.Name())
			}
		}
		path := filepath.Join(dir, names[int(file)%len(names)])
		data, _ := os.ReadFile(path)
		if len(data) > 0 {
			o := int(off) % len(data)
			if cut {
				data = data[:o]
			} else {
				copy(data[o:], patch)
			}
		}
		os.WriteFile(path, data, 0o644)

		q, err := Open(dir, WithLogger(quiet))
		if err != nil {
			t.Fatalf("Open of damaged %s: %v", filepath.Base(path), err)
		}
		defer q.Close()
		if err := q.checkState(); err != nil && q.Snapshot().CorruptRecords == 0 {
			t.Fatalf("after damage to %s, none found: %v", filepath.Base(path), err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
		defer cancel()
		if _, err := q.Receive(ctx, "t", 100, time.Minute); err != nil && !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Receive: %v", err)
		}
		if _, err := q.Put(context.Background(), Message{Topic: "t"}); err != nil {
			t.Fatalf("Put: %v", err)
		}
	})
}
