package delayq

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/tockwheel/tock/queue"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

var (
	templateOnce sync.Once
	templateDir  string
	templateErr  error
)

// fuzzTemplate builds, once, a queue directory with messages in memory and in the disk wheel,
// some with headers, acks, a cancel and a checkpoint, closed uncleanly: its log goes on after the
// checkpoint.
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
			m := Message{Topic: "t", Payload: []byte(fmt.Sprint("payload ", i)), DeliverAt: now.Add(time.Duration(i%3-1) * time.Hour)}
			if i%4 == 0 {
				m.Headers = map[string]string{"traceparent": fmt.Sprintf("00-%032x-%016x-01", i+1, i+1), "n": fmt.Sprint(i)}
			}
			id, err := q.Put(ctx, m)
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
		for _, s := range []queue.Schedule{{Name: "daily", Topic: "s", Payload: []byte("p"), Spec: "30 9 * * *", TimeZone: "Europe/Paris"},
			{Name: "hourly", Topic: "s", Spec: "@hourly", Misfire: queue.MisfireAll}, {Name: "skip", Topic: "s", Spec: "@every 1h", Overlap: queue.OverlapSkip}} {
			q.SetSchedule(ctx, s)
		}
		q.PauseSchedule(ctx, "hourly")
		templateErr = q.checkpoint()
		for i := range 10 {
			q.Put(ctx, Message{ID: fmt.Sprint("user", i), Topic: "u", DeliverAt: now.Add(time.Duration(i) * time.Minute),
				Headers: map[string]string{"k": fmt.Sprint(i)}})
		}
		q.SetSchedule(ctx, queue.Schedule{Name: "daily", Topic: "s", Payload: []byte("p2"), Spec: "30 9 * * *", TimeZone: "Europe/Paris"})
		q.SetSchedule(ctx, queue.Schedule{Name: "new", Topic: "s", Spec: "@daily"})
		q.TriggerSchedule(ctx, "skip")
		q.ResumeSchedule(ctx, "hourly")
		q.DeleteSchedule(ctx, "skip")
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

// FuzzMessagesCursor pages with cursors a client made up (a cursor reaches the queue from a URL):
// Messages answers a page or ErrInvalid, at once, whatever the key a cursor holds; it never
// panics, and never walks the disk wheel's slots from a due time no message can have.
func FuzzMessagesCursor(f *testing.F) {
	q := open(f, f.TempDir(), WithNoSync(), WithLogger(quiet))
	ctx := context.Background()
	now := time.Now()
	for i := range 20 {
		q.Put(ctx, Message{Topic: "t", DeliverAt: now.Add(time.Duration(i) * 90 * time.Minute)})
	}
	q.Put(ctx, Message{Topic: "t"})
	cursor := func(state byte, a int64, b uint64) string {
		var c [cursorBytes]byte
		c[0], c[1] = 1, state
		binary.BigEndian.PutUint64(c[2:], uint64(a))
		binary.BigEndian.PutUint64(c[10:], b)
		return base64.RawURLEncoding.EncodeToString(c[:])
	}
	for _, a := range []int64{math.MinInt64, -1, 0, now.UnixNano(), now.Add(100 * 365 * 24 * time.Hour).UnixNano(), math.MaxInt64} {
		for s := range byte(5) {
			f.Add(cursor(s, a, math.MaxUint64), s)
		}
	}
	f.Add("", byte(1))
	f.Add("not a cursor", byte(2))
	states := []queue.State{queue.Scheduled, queue.Due, queue.Leased, queue.Dead}
	f.Fuzz(func(t *testing.T, c string, s byte) {
		state := states[int(s)%len(states)]
		start := time.Now()
		_, _, err := q.Messages(ctx, "t", state, c, 10)
		if err != nil && !errors.Is(err, ErrInvalid) {
			t.Fatalf("Messages(%q, %s): %v; want a page or ErrInvalid", c, state, err)
		}
		// A page of a one-message queue takes microseconds; a cursor that made Messages walk
		// from an impossible due time would take hours. Ten seconds tells them apart on any
		// machine, however loaded.
		if took := time.Since(start); took > 10*time.Second {
			t.Fatalf("Messages(%q, %s) took %v", c, state, took)
		}
	})
}

// FuzzAckReceipt acks receipts a client made up: each is refused as unknown (ErrUnknownReceipt),
// never taken for a lease it does not name, never a panic; one real receipt, bytes flipped, is a
// made-up one too.
func FuzzAckReceipt(f *testing.F) {
	q := open(f, f.TempDir(), WithNoSync(), WithLogger(quiet))
	ctx := context.Background()
	q.Put(ctx, Message{Topic: "t"})
	ds, err := q.Receive(ctx, "t", 1, time.Hour)
	if err != nil || len(ds) != 1 {
		f.Fatalf("Receive: %v, %v", ds, err)
	}
	real := ds[0].Receipt
	f.Add(real[:len(real)-1] + "A")
	f.Add(real[:10])
	f.Add("")
	f.Add(string(make([]byte, len(real))))
	f.Fuzz(func(t *testing.T, receipt string) {
		if receipt == real {
			return
		}
		err := q.Ack(ctx, receipt)
		if !errors.Is(err, ErrUnknownReceipt) {
			t.Fatalf("Ack(%q): %v; want ErrUnknownReceipt", receipt, err)
		}
	})
}
