package wal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func openLog(t testing.TB, dir string, opts Options) *Log {
	t.Helper()
	opts.Logger = quiet
	l, err := Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func put(i int) *Record {
	return &Record{Kind: KindPut, ID: fmt.Sprint("m", i), Topic: "t", Payload: []byte(strings.Repeat("x", i%50))}
}

// appendN appends n records from goroutines goroutines and returns their positions by ID.
func appendN(t testing.TB, l *Log, n, goroutines int) map[string]Pos {
	var mu sync.Mutex
	got := map[string]Pos{}
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := g; i < n; i += goroutines {
				r := put(i)
				pos, end, err := l.Append(r)
				if err != nil {
					t.Error(err)
					return
				}
				if err := l.WaitDurable(end); err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				got[r.ID] = pos
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return got
}

func TestAppendReadScanReopen(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir, Options{SegmentSize: 4096})
	got := appendN(t, l, 2000, 16)
	segs, _ := l.Segments()
	if len(segs) < 10 {
		t.Fatalf("only %d segments of 4 KiB for 2000 records", len(segs))
	}
	r := l.NewReader()
	for id, pos := range got {
		rec, err := r.ReadAt(pos)
		if err != nil || rec.ID != id {
			t.Fatalf("ReadAt(%v) = %q, %v; want %s", pos, rec.ID, err, id)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := l.Append(put(0)); !errors.Is(err, ErrClosed) {
		t.Fatalf("Append after Close: %v", err)
	}
	l = openLog(t, dir, Options{SegmentSize: 4096})
	defer l.Close()
	n := 0
	var last Pos
	err := l.Scan(MakePos(segs[0], SegmentHeader), func(pos Pos, rec Record) error {
		if pos <= last || got[rec.ID] != pos {
			return fmt.Errorf("record %s at %v after %v; appended at %v", rec.ID, pos, last, got[rec.ID])
		}
		last = pos
		n++
		return nil
	})
	if err != nil || n != len(got) {
		t.Fatalf("Scan: %d records, %v", n, err)
	}
}

// TestTornTail cuts the last segment at every length inside its last record, and appends zeros
// and garbage to it: reopening must drop exactly the damaged record and keep the rest.
func TestTornTail(t *testing.T) {
	base := t.TempDir()
	src := filepath.Join(base, "src")
	l := openLog(t, src, Options{})
	appendN(t, l, 3, 1)
	lastPos, _, _ := l.Append(put(3))
	end := l.End()
	l.Close()
	path := segmentPath(src, 1)
	whole, _ := os.ReadFile(path)
	cases := map[string][]byte{}
	for cut := int(lastPos.Offset()); cut < int(end.Offset()); cut++ {
		cases[fmt.Sprint("cut at ", cut)] = whole[:cut]
	}
	cases["zeros after"] = append(append([]byte{}, whole[:lastPos.Offset()]...), make([]byte, 4096)...)
	damaged := append([]byte{}, whole...)
	damaged[len(damaged)-1] ^= 1
	cases["last record's checksum fails"] = damaged
	garbage := append([]byte{}, whole[:lastPos.Offset()]...)
	for i := range 300 {
		garbage = append(garbage, byte(i*7+3), 0xff, byte(i))
	}
	cases["garbage after"] = garbage
	badLen := append([]byte{}, whole...)
	badLen[lastPos.Offset()+6] = 0x7f // length far beyond the file
	cases["last record's length damaged"] = badLen
	for name, data := range cases {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "q")
			os.MkdirAll(dir, 0o755)
			os.WriteFile(segmentPath(dir, 1), data, 0o644)
			l := openLog(t, dir, Options{})
			defer l.Close()
			if l.End() != lastPos {
				t.Fatalf("end %v after repair, want %v", l.End(), lastPos)
			}
			// The log goes on where the good data ends.
			pos, end, err := l.Append(put(9))
			if err != nil || pos != lastPos || l.WaitDurable(end) != nil {
				t.Fatalf("append after repair at %v: %v", pos, err)
			}
			if r, err := l.ReadAt(pos); err != nil || r.ID != "m9" {
				t.Fatalf("ReadAt: %+v, %v", r, err)
			}
		})
	}
}

// TestCorruptionNamesFileAndOffset damages a record that is followed by good ones: that is not a
// torn tail, and Open must say where it is instead of dropping data.
func TestCorruptionNamesFileAndOffset(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir, Options{})
	got := appendN(t, l, 10, 1)
	l.Close()
	path := segmentPath(dir, 1)
	data, _ := os.ReadFile(path)
	bad := got["m4"].Offset()
	data[bad+HeaderSize+3] ^= 0xff
	os.WriteFile(path, data, 0o644)
	_, err := Open(dir, Options{Logger: quiet})
	var ce *CorruptError
	if !errors.Is(err, ErrCorrupt) || !errors.As(err, &ce) || ce.File != path || ce.Offset != int64(bad) {
		t.Fatalf("Open: %v; want corruption in %s at %d", err, path, bad)
	}
	if IsTornTail(err) {
		t.Fatal("mid-segment damage classified as a torn tail")
	}
	if !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), fmt.Sprint(bad)) {
		t.Fatalf("message %q does not name file and offset", err)
	}
}

func TestBadSegmentHeader(t *testing.T) {
	for name, hdr := range map[string][]byte{
		"magic":    []byte("notawal1\x01\x00\x00\x00\x00\x00\x00\x00"),
		"number":   append([]byte(segMagic), 2, 0, 0, 0, 0, 0, 0, 0),
		"reserved": append([]byte(segMagic), 1, 0, 0, 0, 1, 0, 0, 0),
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			os.WriteFile(segmentPath(dir, 1), append(hdr, make([]byte, 100)...), 0o644)
			if _, err := Open(dir, Options{Logger: quiet}); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Open: %v", err)
			}
		})
	}
}

func TestReadAtMissingAndBad(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir, Options{SegmentSize: 4096})
	defer l.Close()
	got := appendN(t, l, 300, 1)
	if err := l.Remove(1); err != nil {
		t.Fatal(err)
	}
	if _, err := l.ReadAt(got["m0"]); !errors.Is(err, ErrMissing) {
		t.Fatalf("read from removed segment: %v", err)
	}
	if _, err := l.ReadAt(got["m299"] + 1); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("read inside a record: %v", err)
	}
	if _, err := l.ReadAt(MakePos(got["m299"].Segment(), 3)); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("read inside the header: %v", err)
	}
	if err := l.Remove(l.End().Segment()); err == nil {
		t.Fatal("removed the active segment")
	}
}

// FuzzOpen writes arbitrary bytes as the last segment after a good one and opens the log: Open
// must repair or refuse with ErrCorrupt, never panic, and whatever it keeps must scan cleanly.
func FuzzOpen(f *testing.F) {
	good, _ := put(1).Append(nil)
	f.Add(append(segmentHeader(2), good...))
	f.Add(append(segmentHeader(2), good[:len(good)-3]...))
	f.Add(segmentHeader(2)[:7])
	for _, b := range malformedFrames() {
		f.Add(append(segmentHeader(2), b...))
		f.Add(append(append(segmentHeader(2), b...), good...))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		first, _ := put(0).Append(segmentHeader(1))
		os.WriteFile(segmentPath(dir, 1), first, 0o644)
		os.WriteFile(segmentPath(dir, 2), data, 0o644)
		l, err := Open(dir, Options{Logger: quiet, NoSync: true})
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Open: unexpected error %v", err)
			}
			return
		}
		defer l.Close()
		n := 0
		if err := l.Scan(MakePos(1, SegmentHeader), func(Pos, Record) error { n++; return nil }); err != nil {
			t.Fatalf("Scan after Open: %v", err)
		}
		if n < 1 {
			t.Fatalf("the first segment's record was lost")
		}
	})
}

// TestDamagedLengthIsNotATornTail is the regression test of a damaged length field in synced data
// that made its frame seem to run past the end of the last segment: Open took it for a torn tail
// and truncated the segment there, silently dropping the records after it. The records that
// follow show it is damage, so Open must refuse and name the place instead.
func TestDamagedLengthIsNotATornTail(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir, Options{})
	got := appendN(t, l, 10, 1)
	l.Close()
	path := segmentPath(dir, 1)
	data, _ := os.ReadFile(path)
	bad := got["m4"].Offset()
	binary.LittleEndian.PutUint32(data[bad+4:], uint32(len(data))) // in range, past the end
	os.WriteFile(path, data, 0o644)
	_, err := Open(dir, Options{Logger: quiet})
	var ce *CorruptError
	if !errors.As(err, &ce) || ce.File != path || ce.Offset != int64(bad) {
		t.Fatalf("Open: %v; want corruption in %s at %d", err, path, bad)
	}
	if fi, _ := os.Stat(path); fi.Size() != int64(len(data)) {
		t.Fatalf("Open cut the segment to %d bytes of %d", fi.Size(), len(data))
	}
}
