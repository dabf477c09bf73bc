package wal

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func openLog(t testing.TB, dir string, opts Options) *Log {
	t.Helper()
	opts.Logger = quiet
	opts.Verify = verifyTest
	l, err := Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	return l
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
				pos, end, err := appendRec(l, r)
				if err != nil {
					t.Error(err)
					return
				}
				if err := l.WaitDurable(end); err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				got[r.id] = pos
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
		rec, err := readRec(r, pos)
		if err != nil || rec.id != id {
			t.Fatalf("ReadAt(%v) = %q, %v; want %s", pos, rec.id, err, id)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := appendRec(l, put(0)); !errors.Is(err, ErrClosed) {
		t.Fatalf("Append after Close: %v", err)
	}
	l = openLog(t, dir, Options{SegmentSize: 4096})
	defer l.Close()
	n := 0
	var last Pos
	err := l.Scan(MakePos(segs[0], SegmentHeader), 0, func(pos Pos, f Frame) error {
		rec := decodeRec(f)
		if pos <= last || got[rec.id] != pos {
			return fmt.Errorf("record %s at %v after %v; appended at %v", rec.id, pos, last, got[rec.id])
		}
		last = pos
		n++
		return nil
	}, nil)
	if err != nil || n != len(got) {
		t.Fatalf("Scan: %d records, %v", n, err)
	}
}

// TestTornTail cuts the last segment at every length inside its last record, and appends zeros
// and garbage to it: reopening must cut exactly the torn write and keep the rest.
func TestTornTail(t *testing.T) {
	base := t.TempDir()
	src := filepath.Join(base, "src")
	l := openLog(t, src, Options{})
	appendN(t, l, 3, 1)
	lastPos, _, _ := appendRec(l, put(3))
	end := l.End()
	l.Close()
	path := segmentPath(src, 1)
	whole, _ := os.ReadFile(path)
	cases := map[string][]byte{}
	for cut := int(lastPos.Offset()); cut < int(end.Offset()); cut++ {
		cases[fmt.Sprint("cut at ", cut)] = whole[:cut]
	}
	cases["zeros after"] = append(append([]byte{}, whole[:lastPos.Offset()]...), make([]byte, 4096)...)
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
			if l.End() != lastPos || len(l.OpenDamage()) != 0 {
				t.Fatalf("end %v after repair, want %v; damage %v", l.End(), lastPos, l.OpenDamage())
			}
			// The log goes on where the good data ends.
			pos, end, err := appendRec(l, put(9))
			if err != nil || pos != lastPos || l.WaitDurable(end) != nil {
				t.Fatalf("append after repair at %v: %v", pos, err)
			}
			if r, err := readRec(l.NewReader(), pos); err != nil || r.id != "m9" {
				t.Fatalf("ReadAt: %+v, %v", r, err)
			}
		})
	}
}

// TestCompleteFrameWithBadChecksumIsCorruption is the regression test of a complete record that
// fails its checksum at the end of the log, whose Put may have returned: Open dropped it as a torn
// write with only a warning. A torn write ends before its frame does; this one does not, so it is
// corruption: reported with file and offset, left in place, and the log goes on after it.
func TestCompleteFrameWithBadChecksumIsCorruption(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir, Options{})
	appendN(t, l, 3, 1)
	last, _, _ := appendRec(l, put(3))
	l.Close()
	path := segmentPath(dir, 1)
	data, _ := os.ReadFile(path)
	data[len(data)-1] ^= 1
	os.WriteFile(path, data, 0o644)

	l = openLog(t, dir, Options{})
	defer l.Close()
	d := l.OpenDamage()
	if len(d) != 1 || d[0].File != path || d[0].Offset != int64(last.Offset()) || IsTornTail(d[0]) {
		t.Fatalf("damage %v; want one corrupt record in %s at %d", d, path, last.Offset())
	}
	if fi, _ := os.Stat(path); fi.Size() != int64(len(data)) {
		t.Fatalf("Open cut the segment to %d bytes of %d", fi.Size(), len(data))
	}
	pos, end, err := appendRec(l, put(9))
	if err != nil || l.WaitDurable(end) != nil || pos.Offset() != uint32(len(data)) {
		t.Fatalf("append after the damage at %v: %v", pos, err)
	}
	ids, damage := scanAll(t, l)
	if !slices.Equal(ids, []string{"m0", "m1", "m2", "m9"}) || len(damage) != 1 || damage[0].Offset != int64(last.Offset()) {
		t.Fatalf("scan after the damage: %v, damage %v", ids, damage)
	}
}

// TestOpenNeverCutsWhatTheCheckpointCovers is the regression test of a damaged final record that
// a checkpoint covered: Open cut it as a torn tail, and every later Open failed because the
// checkpoint's position was past the end of the segment. Damage before Covered is corruption
// whatever it looks like: nothing on disk changes, and appends go to a new segment when the last
// one ends before Covered, so no position the checkpoint names is given to another record.
func TestOpenNeverCutsWhatTheCheckpointCovers(t *testing.T) {
	for _, c := range []struct {
		name   string
		damage func(data []byte, last int) []byte
		// fresh: appends go to a new segment
		fresh bool
	}{
		{"checksum", func(d []byte, _ int) []byte { d[len(d)-1] ^= 1; return d }, false},
		{"length past the end", func(d []byte, last int) []byte { d[last+6] = 0x7f; return d }, false},
		{"zeros", func(d []byte, last int) []byte { clear(d[last:]); return d }, false},
		{"cut short", func(d []byte, last int) []byte { return d[:last+5] }, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			l := openLog(t, dir, Options{})
			appendN(t, l, 3, 1)
			last, covered, _ := appendRec(l, put(3))
			l.Close()
			path := segmentPath(dir, 1)
			data, _ := os.ReadFile(path)
			data = c.damage(data, int(last.Offset()))
			os.WriteFile(path, data, 0o644)
			for round := range 2 { // and again: the first Open changed nothing that the second trips on
				l := openLog(t, dir, Options{Covered: covered})
				if d := l.OpenDamage(); round == 0 && (len(d) != 1 || d[0].Offset != int64(last.Offset())) {
					t.Fatalf("damage %v, want one at %d", d, last.Offset())
				}
				var damage []*CorruptError
				l.Scan(MakePos(1, 0), 0, func(Pos, Frame) error { return nil }, func(ce *CorruptError) error {
					damage = append(damage, ce)
					return nil
				})
				if len(damage) != 1 || damage[0].Offset != int64(last.Offset()) {
					t.Fatalf("round %d: a scan met damage %v, want one at %d", round, damage, last.Offset())
				}
				if got, _ := os.ReadFile(path); !bytes.Equal(got, data) {
					t.Fatalf("Open changed the segment the checkpoint covers: %d bytes of %d", len(got), len(data))
				}
				pos, end, err := appendRec(l, put(9))
				if err != nil || l.WaitDurable(end) != nil {
					t.Fatal(err)
				}
				if (pos.Segment() != 1) != c.fresh || pos < covered {
					t.Fatalf("appended at %v; checkpoint covers up to %v", pos, covered)
				}
				l.Close()
				data, _ = os.ReadFile(path)
			}
		})
	}
}

// TestCorruptionNamesFileAndOffset damages a record that is followed by good ones: Open reports
// where it is, changes nothing, and a scan goes past it.
func TestCorruptionNamesFileAndOffset(t *testing.T) {
	for _, c := range []struct {
		name string
		at   int // byte of the record to damage
		b    byte
	}{{"body", HeaderSize + 3, 0xff}, {"length", 6, 0x7f}, {"kind", 8, 0x40}} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			l := openLog(t, dir, Options{})
			got := appendN(t, l, 10, 1)
			l.Close()
			path := segmentPath(dir, 1)
			data, _ := os.ReadFile(path)
			bad := got["m4"].Offset()
			data[int(bad)+c.at] ^= c.b
			os.WriteFile(path, data, 0o644)
			l = openLog(t, dir, Options{})
			defer l.Close()
			d := l.OpenDamage()
			if len(d) != 1 || !errors.Is(d[0], ErrCorrupt) || d[0].File != path || d[0].Offset != int64(bad) || IsTornTail(d[0]) {
				t.Fatalf("damage %v; want corruption in %s at %d", d, path, bad)
			}
			if msg := d[0].Error(); !strings.Contains(msg, path) || !strings.Contains(msg, fmt.Sprint(bad)) || !strings.HasPrefix(msg, "delayq: ") {
				t.Fatalf("message %q does not name file and offset", msg)
			}
			if fi, _ := os.Stat(path); fi.Size() != int64(len(data)) {
				t.Fatalf("Open cut the segment to %d bytes of %d", fi.Size(), len(data))
			}
			n := 0
			err := l.Scan(MakePos(1, SegmentHeader), 0, func(_ Pos, f Frame) error {
				r := decodeRec(f)
				if r.id == "m4" {
					return fmt.Errorf("damaged record read back")
				}
				n++
				return nil
			}, func(*CorruptError) error { return nil })
			if err != nil || n != 9 {
				t.Fatalf("scan past the damage: %d records, %v", n, err)
			}
			if _, err := readRec(l.NewReader(), got["m4"]); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("ReadAt of the damaged record: %v", err)
			}
		})
	}
}

func TestBadSegmentHeader(t *testing.T) {
	good := frameOf(nil, put(1))
	for name, hdr := range map[string][]byte{
		"magic":    []byte("notawal1\x01\x00\x00\x00\x00\x00\x00\x00"),
		"number":   append([]byte(segMagic), 2, 0, 0, 0, 0, 0, 0, 0),
		"reserved": append([]byte(segMagic), 1, 0, 0, 0, 1, 0, 0, 0),
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			os.WriteFile(segmentPath(dir, 1), append(hdr, good...), 0o644)
			l := openLog(t, dir, Options{})
			defer l.Close()
			if d := l.OpenDamage(); len(d) != 1 || !errors.Is(d[0], ErrCorrupt) {
				t.Fatalf("damage %v", d)
			}
			n := 0
			l.Scan(MakePos(1, 0), 0, func(Pos, Frame) error { n++; return nil }, func(*CorruptError) error { return nil })
			if n != 1 {
				t.Fatalf("%d records after a damaged header, want 1", n)
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
	if _, err := readRec(l.NewReader(), got["m0"]); !errors.Is(err, ErrMissing) {
		t.Fatalf("read from removed segment: %v", err)
	}
	if _, err := readRec(l.NewReader(), got["m299"]+1); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("read inside a record: %v", err)
	}
	if _, err := readRec(l.NewReader(), MakePos(got["m299"].Segment(), 3)); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("read inside the header: %v", err)
	}
	if err := l.Remove(l.End().Segment()); err == nil {
		t.Fatal("removed the active segment")
	}
}

// FuzzOpen writes arbitrary bytes as the last segment after a good one and opens the log: Open
// must never panic or fail on damage, the first segment's record must survive, a scan of what it
// kept must meet no damage Open did not report, and the log must go on.
func FuzzOpen(f *testing.F) {
	good := frameOf(nil, put(1))
	f.Add(append(segmentHeader(2), good...))
	f.Add(append(segmentHeader(2), good[:len(good)-3]...))
	f.Add(segmentHeader(2)[:7])
	for _, b := range malformedFrames() {
		f.Add(append(segmentHeader(2), b...))
		f.Add(append(append(segmentHeader(2), b...), good...))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		first := frameOf(segmentHeader(1), put(0))
		os.WriteFile(segmentPath(dir, 1), first, 0o644)
		os.WriteFile(segmentPath(dir, 2), data, 0o644)
		l, err := Open(dir, Options{Logger: quiet, NoSync: true, Verify: verifyTest})
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		defer l.Close()
		n, damaged := 0, 0
		if err := l.Scan(MakePos(1, SegmentHeader), 0, func(Pos, Frame) error { n++; return nil },
			func(*CorruptError) error { damaged++; return nil }); err != nil {
			t.Fatalf("Scan after Open: %v", err)
		}
		if n < 1 {
			t.Fatalf("the first segment's record was lost")
		}
		// (A scan does not look at the header of a segment with no record in range.)
		if damaged > len(l.OpenDamage()) {
			t.Fatalf("Open reported %d damaged places, the scan met %d", len(l.OpenDamage()), damaged)
		}
		// The log goes on.
		pos, end, err := appendRec(l, put(7))
		if err != nil || l.WaitDurable(end) != nil {
			t.Fatalf("Append: %v", err)
		}
		if r, err := readRec(l.NewReader(), pos); err != nil || r.id != "m7" {
			t.Fatalf("ReadAt of the record appended after Open: %+v, %v", r, err)
		}
	})
}

// TestDamagedLengthIsNotATornTail is the regression test of a damaged length field in synced data
// that made its frame seem to run past the end of the last segment: Open took it for a torn tail
// and truncated the segment there, silently dropping the records after it.
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
	l = openLog(t, dir, Options{})
	defer l.Close()
	if d := l.OpenDamage(); len(d) != 1 || d[0].File != path || d[0].Offset != int64(bad) {
		t.Fatalf("damage %v; want corruption in %s at %d", d, path, bad)
	}
	if fi, _ := os.Stat(path); fi.Size() != int64(len(data)) {
		t.Fatalf("Open cut the segment to %d bytes of %d", fi.Size(), len(data))
	}
}

// TestReadOnlyChangesNothing opens logs a crash left (a torn write, a group cut short, a torn
// segment header) read-only: nothing on disk changes, the torn write is reported but not cut,
// scans stop where a writable Open would have cut, and nothing can be appended.
func TestReadOnlyChangesNothing(t *testing.T) {
	base := t.TempDir()
	src := filepath.Join(base, "src")
	l := openLog(t, src, Options{})
	appendN(t, l, 3, 1)
	last, _, _ := appendRec(l, put(3))
	l.Close()
	whole, _ := os.ReadFile(segmentPath(src, 1))
	for name, c := range map[string]struct {
		files  map[uint32][]byte
		torn   int64 // offset of the torn write, -1 for none
		frames int
	}{
		"clean":        {map[uint32][]byte{1: whole}, -1, 4},
		"torn write":   {map[uint32][]byte{1: whole[:len(whole)-3]}, int64(last.Offset()), 3},
		"torn header":  {map[uint32][]byte{1: whole, 2: segmentHeader(2)[:7]}, 7, 4},
		"zeros at end": {map[uint32][]byte{1: append(bytes.Clone(whole), make([]byte, 100)...)}, int64(len(whole)), 4},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			for seg, b := range c.files {
				os.WriteFile(segmentPath(dir, seg), b, 0o644)
			}
			l, err := Open(dir, Options{ReadOnly: true, Logger: quiet, Verify: verifyTest})
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			if tt := l.TornTail(); (tt == nil) != (c.torn < 0) || tt != nil && tt.Offset != c.torn {
				t.Fatalf("torn tail %v, want at %d", tt, c.torn)
			}
			n := 0
			if err := l.Scan(MakePos(1, 0), 0, func(Pos, Frame) error { n++; return nil }, nil); err != nil || n != c.frames {
				t.Fatalf("scan: %d frames, %v; want %d", n, err, c.frames)
			}
			if _, _, err := appendRec(l, put(9)); !errors.Is(err, ErrClosed) {
				t.Fatalf("Append to a read-only log: %v", err)
			}
			for seg, b := range c.files {
				if got, err := os.ReadFile(segmentPath(dir, seg)); err != nil || !bytes.Equal(got, b) {
					t.Fatalf("segment %d changed: %d bytes of %d, %v", seg, len(got), len(b), err)
				}
			}
			if segs, _ := ListSegments(dir); len(segs) != len(c.files) {
				t.Fatalf("segments %v, want %d", segs, len(c.files))
			}
		})
	}
}

// TestPreallocatedZeros checks the zeros a segment file is written with ahead of its frames: the
// file is longer than its frames while the log is open, and only by zeros; Close cuts them; and
// a file left with them, as a crash leaves it, opens at the end of its frames, which the log
// appends after.
func TestPreallocatedZeros(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir, Options{})
	got := appendN(t, l, 100, 4)
	end := l.End()
	path := segmentPath(dir, end.Segment())
	crashed, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(crashed) < int(end.Offset())+preallocLow {
		t.Fatalf("segment of %d bytes while open, for frames up to %d: no zeros ahead", len(crashed), end.Offset())
	}
	if tail := crashed[end.Offset():]; !bytes.Equal(tail, make([]byte, len(tail))) {
		t.Fatal("the bytes after the frames are not all zeros")
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Size() != int64(end.Offset()) {
		t.Fatalf("segment after Close: %v, %v; want %d bytes", fi.Size(), err, end.Offset())
	}

	// The file as a crash leaves it.
	if err := os.WriteFile(path, crashed, 0o644); err != nil {
		t.Fatal(err)
	}
	l = openLog(t, dir, Options{})
	if l.End() != end || len(l.OpenDamage()) != 0 {
		t.Fatalf("end %v after the crash, want %v; damage %v", l.End(), end, l.OpenDamage())
	}
	if tt := l.TornTail(); tt == nil || tt.Offset != int64(end.Offset()) {
		t.Fatalf("torn tail %v, want the zeros from %d", tt, end.Offset())
	}
	pos, end2, err := appendRec(l, put(1000))
	if err != nil || pos != end || l.WaitDurable(end2) != nil {
		t.Fatalf("append after the crash at %v: %v", pos, err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = openLog(t, dir, Options{})
	defer l.Close()
	if l.TornTail() != nil || l.End() != end2 {
		t.Fatalf("after a clean close: torn tail %v, end %v; want none, %v", l.TornTail(), l.End(), end2)
	}
	r := l.NewReader()
	got["m1000"] = pos
	for id, p := range got {
		if rec, err := readRec(r, p); err != nil || rec.id != id {
			t.Fatalf("ReadAt(%v) = %q, %v; want %s", p, rec.id, err, id)
		}
	}
}

// TestReaderWindowEndsAtTheWrittenEnd is the regression test of a Reader's window over the
// segment being written to, which is longer than its frames (the zeros written ahead of them):
// the window held those zeros, and a frame written there after the window was read was read back
// from it as zeros, damage.
func TestReaderWindowEndsAtTheWrittenEnd(t *testing.T) {
	l := openLog(t, t.TempDir(), Options{})
	defer l.Close()
	r := l.NewReader()
	for i := range 50 {
		pos, end, err := appendRec(l, put(i))
		if err != nil || l.WaitDurable(end) != nil {
			t.Fatalf("append %d: %v", i, err)
		}
		if rec, err := readRec(r, pos); err != nil || rec.id != fmt.Sprint("m", i) {
			t.Fatalf("ReadAt(%v) = %q, %v; want m%d", pos, rec.id, err, i)
		}
	}
}
