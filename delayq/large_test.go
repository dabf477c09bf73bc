package delayq

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tockwheel/tock/delayq/internal/wal"
	"github.com/tockwheel/tock/internal/testlong"
)

// largePayloadSizes returns payload sizes at and around every buffer boundary a record can meet
// on its way back from disk: a page, the reader's window, and the scanner's buffer, which is also the
// test's segment size; and the largest payload there is. A boundary is met by the whole frame, so each is taken
// with and without the bytes a Put record adds around its payload (a generated ID, topic "t").
func largePayloadSizes() []int {
	const overhead = wal.HeaderSize + 1 + 37 + 2 + generatedIDLen + 2 + 1
	var sizes []int
	for _, b := range []int{4 << 10, wal.ReadWindow - 4<<10, wal.ReadWindow, largeSegment} {
		for _, at := range []int{b, b - overhead} {
			sizes = append(sizes, at-1, at, at+1)
		}
	}
	sizes = append(sizes, 0, MaxPayloadLimit)
	slices.Sort(sizes)
	return slices.Compact(sizes)
}

const largeSegment = 1 << 20

// TestLargePayloadsEveryPath is the regression test of records larger than the reader's window:
// reading one back panicked, in Open (messages the checkpoint holds), in the loader and in Cancel.
// For every size of largePayloadSizes, messages go through every path that reads records: replay
// after a crash, the loader (into memory, and rolled beyond the horizon), Cancel walking a slot
// list, a compaction round reading segments and lists, and Receive after a clean reopen (read from
// the positions the checkpoint holds). Each payload must come back byte for byte. The largest
// payload there is (MaxPayloadLimit, 16 MiB, about 12 s) goes through them in long mode only.
func TestLargePayloadsEveryPath(t *testing.T) {
	sizes := largePayloadSizes()
	if !testlong.Enabled() {
		sizes = slices.DeleteFunc(sizes, func(n int) bool { return n > 2*largeSegment })
	}
	for _, size := range sizes {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			t.Parallel()
			base := t.TempDir()
			synctest.Test(t, func(t *testing.T) { largePayloadPaths(t, base, size) })
		})
	}
}

func largePayloadPaths(t *testing.T, base string, size int) {
	ctx := context.Background()
	opts := []Option{WithMaxPayload(MaxPayloadLimit), WithSlot(100 * time.Millisecond), WithHorizon(2 * time.Second),
		WithSegmentSize(largeSegment), WithCheckpointInterval(time.Hour), WithCompaction(0, 0), WithNoSync(), WithLogger(quiet)}
	dir := filepath.Join(base, "q")
	q := open(t, dir, opts...)
	now := time.Now()
	payloads := map[string][]byte{}
	put := func(i int, at time.Duration) string {
		t.Helper()
		p := bytes.Repeat([]byte{byte(i + 1)}, size)
		if size > 0 {
			p[size-1] = 0xee // the last byte, where a window cut short shows
		}
		id, err := q.Put(ctx, Message{Topic: "t", Payload: p, DeliverAt: now.Add(at)})
		if err != nil {
			t.Fatalf("Put of %d bytes: %v", size, err)
		}
		payloads[id] = p
		return id
	}
	if size == MaxPayloadLimit {
		if _, err := q.Put(ctx, Message{Topic: "t", Payload: make([]byte, size+1)}); !errors.Is(err, ErrTooLarge) {
			t.Fatalf("Put of %d bytes: %v, want ErrTooLarge", size+1, err)
		}
	}
	put(0, 10*time.Millisecond) // into memory at once: the checkpoint holds it
	if err := q.checkpoint(); err != nil {
		t.Fatal(err)
	}
	put(1, time.Second) // the disk wheel; loaded into memory
	doomed := put(2, 1500*time.Millisecond)
	put(3, 1501*time.Millisecond) // Cancel of doomed reads this one first
	put(4, 5*time.Second)         // beyond the horizon: rolled when its list is loaded
	put(5, 1800*time.Millisecond)
	if ok, err := q.Cancel(ctx, doomed); !ok || err != nil {
		t.Fatalf("Cancel = %v, %v", ok, err)
	}
	delete(payloads, doomed)
	if _, err := q.compact(newCompactor(), 2); err != nil {
		t.Fatalf("compaction: %v", err)
	}
	check(t, q)

	// A crash: recovery replays everything after the checkpoint.
	crashed := filepath.Join(base, "crashed")
	crashCopy(t, nil, q, dir, crashed)
	q = open(t, crashed, opts...)
	check(t, q)
	receive := func(n int) {
		t.Helper()
		for range n {
			d := receiveOne(t, q, "t", 10*time.Second, time.Hour)
			want, ok := payloads[d.ID]
			if !ok {
				t.Fatalf("unexpected delivery %s", d.ID)
			}
			if !bytes.Equal(d.Payload, want) {
				t.Fatalf("payload of %d bytes came back as %d bytes", len(want), len(d.Payload))
			}
			delete(payloads, d.ID)
			if err := q.Ack(ctx, d.Receipt); err != nil {
				t.Fatal(err)
			}
		}
	}
	receive(2) // the one in memory since the checkpoint, and the first loaded
	// The rest after a clean reopen, the loaded ones read from the positions the checkpoint holds.
	time.Sleep(1900 * time.Millisecond)
	synctest.Wait()
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	q = open(t, crashed, opts...)
	check(t, q)
	receive(len(payloads))
	check(t, q)
}
