package wal

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"testing/synctest"
)

// appendGroup appends recs as one atomic group and returns their positions.
func appendGroup(t *testing.T, l *Log, recs ...*testRecord) []Pos {
	t.Helper()
	size := 0
	for _, r := range recs {
		size += r.size()
	}
	next := l.Reserve(size)
	var pos []Pos
	for i, r := range recs {
		p, _, err := l.Append(testType, i < len(recs)-1, r.body())
		if err != nil {
			t.Fatal(err)
		}
		if p != next {
			t.Fatalf("record %d of the group at %v, reserved %v", i, p, next)
		}
		next += Pos(r.size())
		pos = append(pos, p)
	}
	return pos
}

// TestGroupIsAtomic cuts the log, as a torn write would, at every byte of a synced group of three
// records that ends the log: reopening keeps all three only when the whole group is there, else
// none, and the records before the group always.
func TestGroupIsAtomic(t *testing.T) {
	base := t.TempDir()
	src := filepath.Join(base, "src")
	l := openLog(t, src, Options{})
	appendN(t, l, 2, 1)
	pos := appendGroup(t, l, put(10), put(11), put(12))
	end := l.End()
	if err := l.WaitDurable(end); err != nil {
		t.Fatal(err)
	}
	l.Close()
	whole, _ := os.ReadFile(segmentPath(src, 1))
	for cut := int(pos[0].Offset()); cut <= int(end.Offset()); cut++ {
		t.Run(fmt.Sprint(cut), func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "q")
			os.MkdirAll(dir, 0o755)
			os.WriteFile(segmentPath(dir, 1), whole[:cut], 0o644)
			l := openLog(t, dir, Options{})
			defer l.Close()
			var ids []string
			if err := l.Scan(MakePos(1, 0), 0, func(_ Pos, f Frame) error {
				r := decodeRec(f)
				ids = append(ids, r.id)
				return nil
			}, nil); err != nil {
				t.Fatal(err)
			}
			want := []string{"m0", "m1"}
			if cut == int(end.Offset()) {
				want = append(want, "m10", "m11", "m12")
			}
			if fmt.Sprint(ids) != fmt.Sprint(want) {
				t.Fatalf("records %v after a cut at %d, want %v", ids, cut, want)
			}
		})
	}
}

// TestGroupStaysInOneSegment checks that Reserve starts a new segment for a group that would not
// fit in the current one, and that a group larger than a segment is not split.
func TestGroupStaysInOneSegment(t *testing.T) {
	l := openLog(t, t.TempDir(), Options{SegmentSize: 4096})
	defer l.Close()
	appendN(t, l, 20, 1) // about 500 bytes
	var recs []*testRecord
	for i := range 150 { // about 6,000 bytes: more than a segment
		recs = append(recs, put(100+i))
	}
	pos := appendGroup(t, l, recs...)
	for _, p := range pos {
		if p.Segment() != pos[0].Segment() {
			t.Fatalf("group split over segments %d and %d", pos[0].Segment(), p.Segment())
		}
	}
	if pos[0].Offset() != SegmentHeader {
		t.Fatalf("group starts at %v, want a new segment", pos[0])
	}
	// The next record goes to a new segment: this one is full.
	p, _, err := appendRec(l, put(1000))
	if err != nil || p.Segment() != pos[0].Segment()+1 {
		t.Fatalf("record after the group at %v, %v", p, err)
	}
}

// TestReadUnwritten reads records that are appended but held back from the files, as delayq reads
// a slot list under its lock without waiting for the writer.
func TestReadUnwritten(t *testing.T) {
	release := make(chan struct{})
	var once sync.Once
	hold := func() { <-release }
	l := openLog(t, t.TempDir(), Options{SegmentSize: 4096, BeforeWrite: hold})
	defer l.Close()
	defer once.Do(func() { close(release) })
	var pos []Pos
	for i := range 200 { // several segments
		p, _, err := appendRec(l, put(i))
		if err != nil {
			t.Fatal(err)
		}
		pos = append(pos, p)
	}
	if w := l.WrittenEnd(); w >= pos[len(pos)-1] {
		t.Fatalf("written to %v while the writer is held", w)
	}
	r := l.NewReader()
	for i := len(pos) - 1; i >= 0; i-- {
		rec, err := readRec(r, pos[i])
		if err != nil || rec.id != fmt.Sprint("m", i) {
			t.Fatalf("ReadAt(%v) before it is written: %+v, %v", pos[i], rec, err)
		}
	}
	if _, err := readRec(r, pos[len(pos)-1]+3); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("ReadAt inside a record not written: %v", err)
	}
	if _, err := readRec(r, l.End()); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("ReadAt past the end: %v", err)
	}
	once.Do(func() { close(release) })
	if err := l.WaitWritten(l.End()); err != nil {
		t.Fatal(err)
	}
	for i, p := range pos {
		if rec, err := readRec(r, p); err != nil || rec.id != fmt.Sprint("m", i) {
			t.Fatalf("ReadAt(%v) once written: %+v, %v", p, rec, err)
		}
	}
}

// TestAppendNeverWaitsForTheWriter is the regression test of Append waiting for room while its
// caller held delayq's lock: the wait could last through a sync. Append now never waits; WaitRoom,
// called before taking locks, holds producers back instead.
func TestAppendNeverWaitsForTheWriter(t *testing.T) {
	dir := t.TempDir()
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		l := openLog(t, dir, Options{NoSync: true, BeforeWrite: func() { <-release }})
		big := &testRecord{payload: make([]byte, 1<<20)}
		for i := range 40 { // 40 MiB, over the 16 MiB bound, with the writer held
			done := make(chan error, 1)
			go func() {
				_, _, err := appendRec(l, big)
				done <- err
			}()
			synctest.Wait()
			select {
			case err := <-done:
				if err != nil {
					t.Fatal(err)
				}
			default:
				t.Fatalf("Append %d waited for the writer", i)
			}
		}
		waited := make(chan error, 1)
		go func() { waited <- l.WaitRoom() }()
		synctest.Wait()
		select {
		case err := <-waited:
			t.Fatalf("WaitRoom returned %v with 40 MiB not written", err)
		default:
		}
		close(release)
		if err := <-waited; err != nil {
			t.Fatal(err)
		}
		l.Close()
	})
}
