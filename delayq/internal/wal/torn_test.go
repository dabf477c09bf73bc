package wal

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// A crashLog is a segment as a power loss finds it: frames synced, then one commit written over
// the zeros ahead of them and not synced (see "The end of the log" in frame.go).
type crashLog struct {
	synced, written []byte // the file after the last sync, and after the unsynced commit's write
	durable         int64  // where the unsynced commit begins
	ends            []int64
	ids             []string // ids[i] is the frame ending at ends[i]; synced ones first
	nSynced         int
}

// newCrashLog writes synced frames and then one commit's frames (not waited for) through a Log
// with the operating system's files, and keeps both images of the segment. Frames are of sizes
// that put sector boundaries in headers and bodies, some larger than a sector.
func newCrashLog(t testing.TB, synced, unsynced int) *crashLog {
	t.Helper()
	dir := t.TempDir()
	l := openLog(t, dir, Options{})
	rec := func(i int, at int64) *testRecord {
		r := &testRecord{id: fmt.Sprint("m", i)}
		n := (i * 97) % 700
		if i == synced+5 {
			// The next frame's header crosses a sector boundary: its crc in one sector, its
			// length in the next.
			n = int(((sectorSize-4-at-int64(r.size()))%sectorSize + sectorSize) % sectorSize)
		}
		r.payload = bytes.Repeat([]byte{'a' + byte(i%26)}, n)
		return r
	}
	c := &crashLog{nSynced: synced}
	path := segmentPath(dir, 1)
	for i := range synced + unsynced {
		if i == synced {
			if err := l.WaitDurable(l.End()); err != nil {
				t.Fatal(err)
			}
			c.durable = int64(l.DurableEnd().Offset())
			c.synced, _ = os.ReadFile(path)
		}
		// The unsynced frames wake nobody: they stay pending, and WaitWritten below writes
		// them all in one commit.
		r := rec(i, int64(l.End().Offset()))
		_, end, err := l.AppendAwaited(testType, false, r.body())
		if err != nil {
			t.Fatal(err)
		}
		c.ends = append(c.ends, int64(end.Offset()))
		c.ids = append(c.ids, r.id)
	}
	if err := l.WaitWritten(l.End()); err != nil {
		t.Fatal(err)
	}
	c.written, _ = os.ReadFile(path)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if len(c.written) < int(c.ends[len(c.ends)-1])+preallocLow || len(c.synced) < int(c.durable)+preallocLow {
		t.Fatalf("no zeros ahead of the frames: files of %d and %d bytes", len(c.synced), len(c.written))
	}
	return c
}

// start returns the offset of frame i.
func (c *crashLog) start(i int) int64 {
	if i == 0 {
		return SegmentHeader
	}
	return c.ends[i-1]
}

// lengthOfLastSynced reports whether off is in the length field of the last synced frame: damage there that
// makes the frame run into the zeros after it is taken for a lost write (see frame.go).
func (c *crashLog) lengthOfLastSynced(off int64) bool {
	start := c.start(c.nSynced - 1)
	return off >= start+4 && off < start+HeaderSize
}

// crash returns the segment with the sectors of the unsynced commit for which lost is true as
// they were before it (zeros); when end > 0, the file ends there, as a log written without zeros
// ahead can be left when the file's size was written and not all of its data.
func (c *crashLog) crash(lost func(sector int) bool, end int) []byte {
	img := bytes.Clone(c.written)
	if end > 0 {
		img = img[:end]
	}
	for s := int(c.durable) / sectorSize; s*sectorSize < min(len(img), int(c.ends[len(c.ends)-1])); s++ {
		if lost(s) {
			lo, hi := s*sectorSize, min((s+1)*sectorSize, len(img))
			copy(img[lo:hi], c.synced[lo:hi])
		}
	}
	return img
}

// kept returns the IDs Open must keep of img: every synced frame, and the unsynced frames before
// the first one not wholly as written.
func (c *crashLog) kept(img []byte) []string {
	ids := slices.Clone(c.ids[:c.nSynced])
	for i := c.nSynced; i < len(c.ids); i++ {
		lo, hi := c.start(i), c.ends[i]
		if hi > int64(len(img)) || !bytes.Equal(img[lo:hi], c.written[lo:hi]) {
			break
		}
		ids = append(ids, c.ids[i])
	}
	return ids
}

// checkCrash opens img as the only segment and checks that Open kept exactly want, reported as
// damage exactly the frames at damaged (none for nil), and that the log goes on after what it
// kept.
func checkCrash(t *testing.T, img []byte, want []string, damaged []int64, covered Pos) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "q")
	os.MkdirAll(dir, 0o755)
	if err := os.WriteFile(segmentPath(dir, 1), img, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, readOnly := range []bool{true, false} { // as tock check sees it, then as Open repairs it
		l, err := Open(dir, Options{Logger: quiet, Verify: verifyTest, Covered: covered, ReadOnly: readOnly, NoSync: true})
		if err != nil {
			t.Fatal(err)
		}
		var offs []int64
		for _, d := range l.OpenDamage() {
			offs = append(offs, d.Offset)
		}
		if !slices.Equal(offs, damaged) {
			l.Close()
			t.Fatalf("read-only %v: damage %v, want at %v (torn tail %v)", readOnly, l.OpenDamage(), damaged, l.TornTail())
		}
		var got []string
		if err := l.Scan(MakePos(1, SegmentHeader), 0, func(_ Pos, f Frame) error {
			got = append(got, decodeRec(f).id)
			return nil
		}, func(*CorruptError) error { return nil }); err != nil {
			l.Close()
			t.Fatal(err)
		}
		if !slices.Equal(got, want) {
			l.Close()
			t.Fatalf("read-only %v: kept %d frames %v\nwant %d %v\n(torn tail %v)", readOnly, len(got), got, len(want), want, l.TornTail())
		}
		if readOnly {
			l.Close()
			if now, _ := os.ReadFile(segmentPath(dir, 1)); !bytes.Equal(now, img) {
				t.Fatal("a read-only Open changed the segment")
			}
			continue
		}
		pos, end, err := appendRec(l, put(9999))
		if err != nil || l.WaitDurable(end) != nil {
			t.Fatalf("append after Open: %v", err)
		}
		if r, err := readRec(l.NewReader(), pos); err != nil || r.id != "m9999" {
			t.Fatalf("ReadAt(%v) after Open: %+v, %v", pos, r, err)
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		l = openLog(t, dir, Options{Covered: covered, NoSync: true})
		if l.TornTail() != nil || len(l.OpenDamage()) != len(damaged) {
			t.Fatalf("second Open: torn tail %v, damage %v", l.TornTail(), l.OpenDamage())
		}
		l.Close()
	}
}

// TestUnsyncedCommitTorn builds a segment whose last commit was written over the zeros ahead of
// the frames and lost in every shape a page cache and a disk can leave it: Open keeps every
// synced frame and the unsynced ones before the first lost sector, reports no damage, and cuts
// the rest, valid frames after a lost sector included. Then the same with a byte flipped in a
// synced frame: that frame is reported as corruption, as before.
func TestUnsyncedCommitTorn(t *testing.T) {
	c := newCrashLog(t, 40, 30)
	first := int(c.durable) / sectorSize
	last := int(c.ends[len(c.ends)-1]-1) / sectorSize
	sectorOf := func(i int) int { return int(c.ends[i]-1) / sectorSize } // the sector a frame ends in
	var headerSplit int                                                  // a sector whose start falls inside an unsynced frame's header
	for i := c.nSynced; i < len(c.ends); i++ {
		if start := c.ends[i-1]; start/sectorSize != (start+HeaderSize-1)/sectorSize {
			headerSplit = int(start+HeaderSize-1) / sectorSize
			break
		}
	}
	if headerSplit == 0 {
		t.Fatal("no unsynced frame's header crosses a sector boundary: change the sizes")
	}
	shapes := map[string]func(int) bool{
		"written whole":                     func(int) bool { return false },
		"lost whole":                        func(int) bool { return true },
		"frame half written then zeros":     func(s int) bool { return s > sectorOf(c.nSynced+3) },
		"first sector lost, later written":  func(s int) bool { return s == first },
		"a middle sector lost":              func(s int) bool { return s == (first+last)/2 },
		"length field torn, first half":     func(s int) bool { return s == headerSplit-1 },
		"length field torn, second half":    func(s int) bool { return s == headerSplit },
		"valid frames after zeros":          func(s int) bool { return s >= first && s < first+3 },
		"every other sector":                func(s int) bool { return s%2 == 0 },
		"only the last sector written":      func(s int) bool { return s != last },
		"the last sector lost":              func(s int) bool { return s == last },
		"only the sector after synced lost": func(s int) bool { return s == first+1 },
	}
	for _, flip := range []bool{false, true} {
		for name, lost := range shapes {
			for _, end := range []int{0, (first + last) / 2 * sectorSize} {
				t.Run(fmt.Sprintf("%s/flip=%v/end=%d", name, flip, end), func(t *testing.T) {
					img := c.crash(lost, end)
					want := c.kept(img)
					var damaged []int64
					if flip {
						i := 17 // a synced frame: its last byte flipped
						img[c.ends[i]-1] ^= 0x10
						damaged = []int64{c.start(i)}
						want = slices.DeleteFunc(want, func(id string) bool { return id == c.ids[i] })
					}
					checkCrash(t, img, want, damaged, 0)
				})
			}
		}
	}
	// The last synced frame damaged, with nothing written after it but the zeros ahead: the
	// shape a torn frame would have if its bytes were lost, but with no sector of zeros in it.
	t.Run("last synced frame flipped", func(t *testing.T) {
		img := c.crash(func(int) bool { return true }, 0)
		i := c.nSynced - 1
		img[c.ends[i]-3] ^= 0x01
		want := slices.Clone(c.ids[:i])
		checkCrash(t, img, want, []int64{c.start(i)}, 0)
	})
	// Zeros where a synced frame was, before what the checkpoint covers: corruption.
	t.Run("covered sector zeroed", func(t *testing.T) {
		img := c.crash(func(int) bool { return true }, 0)
		s := int(c.ends[20]) / sectorSize
		clear(img[s*sectorSize : (s+1)*sectorSize])
		var want []string
		for i, id := range c.ids[:c.nSynced] {
			if c.ends[i] <= int64(s*sectorSize) || c.start(i) >= int64((s+1)*sectorSize) {
				want = append(want, id)
			}
		}
		var start int64 // the first frame the zeros reach into
		for i := range c.nSynced {
			if c.ends[i] > int64(s*sectorSize) {
				start = c.start(i)
				break
			}
		}
		checkCrash(t, img, want, []int64{start}, MakePos(1, uint32(c.durable)))
	})
}

// TestUnsyncedCommitTornAtRandom loses a random set of the unsynced commit's sectors, in rounds
// whose seed it prints: TOCK_TORN_SEED replays one.
func TestUnsyncedCommitTornAtRandom(t *testing.T) {
	c := newCrashLog(t, 25, 40)
	seed := rand.Uint64()
	if s := os.Getenv("TOCK_TORN_SEED"); s != "" {
		fmt.Sscan(s, &seed)
	}
	t.Logf("seed %d (TOCK_TORN_SEED)", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	for round := range 50 {
		p := rng.Float64()
		end := 0
		if rng.IntN(2) == 0 {
			end = int(c.durable) + rng.IntN(int(c.ends[len(c.ends)-1]-c.durable)+1)
		}
		img := c.crash(func(int) bool { return rng.Float64() < p }, end)
		t.Run(fmt.Sprint(round), func(t *testing.T) {
			checkCrash(t, img, c.kept(img), nil, 0)
		})
	}
}

// FuzzUnsyncedCommitTorn loses the unsynced commit's sectors that the fuzzer's bits say, ends the
// file where it says inside the commit, if anywhere, and flips the byte it names, if any, in the
// synced frames (but the length of the last, see lengthOfLastSynced): Open must keep exactly what was synced
// and written whole before the first lost sector, and report the flipped frame, and only it.
func FuzzUnsyncedCommitTorn(f *testing.F) {
	c := newCrashLog(f, 12, 20)
	f.Add([]byte{}, uint16(0), uint16(0))
	f.Add([]byte{1}, uint16(0), uint16(0))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff}, uint16(100), uint16(700))
	f.Add([]byte{0xaa, 0x55}, uint16(3000), uint16(0))
	f.Add([]byte{0xfe}, uint16(0), uint16(1))
	f.Fuzz(func(t *testing.T, mask []byte, at, short uint16) {
		first := int(c.durable) / sectorSize
		end := 0 // the file's end: where it was written to, or short bytes into the commit
		if short > 0 {
			end = int(c.durable) + int(short)%int(c.ends[len(c.ends)-1]-c.durable+1)
		}
		img := c.crash(func(s int) bool {
			i := s - first
			return i/8 < len(mask) && mask[i/8]&(1<<(i%8)) != 0
		}, end)
		want := c.kept(img)
		var damaged []int64
		if off := SegmentHeader + int64(at)%(c.durable-SegmentHeader); at > 0 && !c.lengthOfLastSynced(off) {
			i := slices.IndexFunc(c.ends, func(end int64) bool { return end > off })
			img[off] ^= 0x80
			damaged = []int64{c.start(i)}
			want = slices.DeleteFunc(want, func(id string) bool { return id == c.ids[i] })
		}
		checkCrash(t, img, want, damaged, 0)
	})
}

// TestZeroHeaderDropsTheSegment is a new segment whose first write was lost but for its size:
// its header and frames zeros, or its header zeros and a later sector written. The segment goes,
// the one before it stays whole, and the log goes on in a segment of the same number.
func TestZeroHeaderDropsTheSegment(t *testing.T) {
	first := frameOf(segmentHeader(1), put(0))
	second := frameOf(frameOf(segmentHeader(2), put(1)), &testRecord{id: "big", payload: bytes.Repeat([]byte("z"), 2000)})
	for name, img := range map[string][]byte{
		"all zeros":               make([]byte, 1<<20),
		"header lost, rest there": append(make([]byte, sectorSize), second[sectorSize:]...),
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			os.WriteFile(segmentPath(dir, 1), first, 0o644)
			os.WriteFile(segmentPath(dir, 2), img, 0o644)
			l := openLog(t, dir, Options{})
			defer l.Close()
			if d := l.OpenDamage(); len(d) != 0 || l.TornTail() == nil {
				t.Fatalf("damage %v, torn tail %v", d, l.TornTail())
			}
			if l.End() != MakePos(2, SegmentHeader) {
				t.Fatalf("end %v, want 2:%d", l.End(), SegmentHeader)
			}
			var ids []string
			l.Scan(MakePos(1, SegmentHeader), 0, func(_ Pos, f Frame) error {
				ids = append(ids, decodeRec(f).id)
				return nil
			}, nil)
			if !slices.Equal(ids, []string{"m0"}) {
				t.Fatalf("frames %v", ids)
			}
			_, end, err := appendRec(l, put(5))
			if err != nil || l.WaitDurable(end) != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestUnusedZerosAhead closes a log whose segment was written ahead with zeros never used (a new
// segment with no frame, one frame, a segment started by rotation): Close cuts them, and a crash
// that keeps them leaves a log that opens at the end of its frames.
func TestUnusedZerosAhead(t *testing.T) {
	for _, n := range []int{0, 1, 60} {
		t.Run(fmt.Sprint(n, " frames"), func(t *testing.T) {
			dir := t.TempDir()
			l := openLog(t, dir, Options{SegmentSize: 4096})
			appendN(t, l, n, 1)
			end := l.End()
			if n == 0 { // nothing written yet: the header goes with the first commit
				_, e, _ := appendRec(l, put(0))
				l.WaitDurable(e)
				end = e
			}
			crashed, _ := os.ReadFile(segmentPath(dir, end.Segment()))
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			segs, sizes := l.Segments()
			for i, s := range segs {
				fi, err := os.Stat(segmentPath(dir, s))
				if err != nil || fi.Size() != sizes[i] {
					t.Fatalf("segment %d after Close: %v bytes, %v; the log says %d", s, fi.Size(), err, sizes[i])
				}
			}
			if int64(len(crashed)) <= int64(end.Offset()) || len(crashed) > 4096 { // zeros ahead, not past the segment size
				t.Fatalf("segment of %d bytes while open, frames to %d", len(crashed), end.Offset())
			}
			os.WriteFile(segmentPath(dir, end.Segment()), crashed, 0o644)
			l = openLog(t, dir, Options{SegmentSize: 4096})
			defer l.Close()
			if l.End() != end || len(l.OpenDamage()) != 0 || l.TornTail() == nil || !strings.Contains(l.TornTail().Reason, "zero bytes") {
				t.Fatalf("end %v, want %v; damage %v, torn tail %v", l.End(), end, l.OpenDamage(), l.TornTail())
			}
		})
	}
}

// TestCorruptLastFrameBeforeZerosAhead checks that a complete last frame that fails its checksum,
// with the zeros written ahead of the frames after it, is corruption of that frame alone: the
// damage ends where the frame does, not at the file's end with the zeros in it, and Open cuts the
// zeros as the end of the log after it, so that appends go on right after the frame.
func TestCorruptLastFrameBeforeZerosAhead(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir, Options{})
	appendN(t, l, 3, 1)
	last, end, err := appendRec(l, put(3))
	if err != nil || l.WaitDurable(end) != nil {
		t.Fatalf("append: %v", err)
	}
	path := segmentPath(dir, 1)
	crashed, _ := os.ReadFile(path)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if int64(len(crashed)) <= int64(end.Offset()) {
		t.Fatalf("segment of %d bytes while open, frames to %d: no zeros ahead", len(crashed), end.Offset())
	}
	crashed[end.Offset()-1] ^= 1 // the last byte of the last frame
	os.WriteFile(path, crashed, 0o644)

	l = openLog(t, dir, Options{})
	defer l.Close()
	d := l.OpenDamage()
	if len(d) != 1 || d[0].Offset != int64(last.Offset()) || d[0].Size != int64(end.Offset()-last.Offset()) || IsTornTail(d[0]) {
		t.Fatalf("damage %v; want the frame at %d of %d bytes, corrupt", d, last.Offset(), end.Offset()-last.Offset())
	}
	if tt := l.TornTail(); tt == nil || tt.Offset != int64(end.Offset()) || !strings.Contains(tt.Reason, "zero bytes") {
		t.Fatalf("torn tail %v; want the zeros from %d", tt, end.Offset())
	}
	if fi, _ := os.Stat(path); fi.Size() != int64(end.Offset()) {
		t.Fatalf("segment of %d bytes after Open; want it cut to the damaged frame's end, %d", fi.Size(), end.Offset())
	}
	pos, e, err := appendRec(l, put(9))
	if err != nil || l.WaitDurable(e) != nil || pos != end {
		t.Fatalf("append after the damage at %v, want %v: %v", pos, end, err)
	}
	ids, damage := scanAll(t, l)
	if !slices.Equal(ids, []string{"m0", "m1", "m2", "m9"}) || len(damage) != 1 || damage[0].Offset != int64(last.Offset()) {
		t.Fatalf("scan after the damage: %v, damage %v", ids, damage)
	}
}

// TestNoSyncWritesNoZeros checks that a log with NoSync writes no zeros ahead of its frames: they
// only spare a sync the file's size, and cost a write.
func TestNoSyncWritesNoZeros(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir, Options{NoSync: true})
	defer l.Close()
	appendN(t, l, 50, 2)
	end := l.End()
	if err := l.WaitWritten(end); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(segmentPath(dir, end.Segment())); err != nil || fi.Size() != int64(end.Offset()) {
		t.Fatalf("segment of %d bytes, %v; frames end at %d", fi.Size(), err, end.Offset())
	}
}
