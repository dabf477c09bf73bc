package wal

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// boundarySizes returns payload sizes at and around every buffer boundary a frame can meet in a
// Reader (a page, its window, a window larger than the default) and in a scan (its buffer), and
// the limit.
func boundarySizes() []int {
	const overhead = HeaderSize + 1 + 2 + 3 // a test record with an ID of 3 bytes
	var sizes []int
	for _, b := range []int{4 << 10, ReadWindow - 4<<10, ReadWindow, 2 * ReadWindow, 1 << 20} {
		for _, at := range []int{b, b - overhead} {
			sizes = append(sizes, at-1, at, at+1)
		}
	}
	sizes = append(sizes, 0, MaxBody-2-4)
	slices.Sort(sizes)
	return slices.Compact(sizes)
}

func sizedPut(i, size int) *testRecord {
	p := bytes.Repeat([]byte{byte(i)}, size)
	if size > 0 {
		p[0], p[size-1] = 0xaa, 0xee
	}
	return &testRecord{id: fmt.Sprint("s", i), payload: p}
}

// TestReadAtEveryBoundary is the regression test of a record larger than the Reader's window:
// the window was made to start after the record did, and reading it panicked. Records of every
// size of boundarySizes are appended, small ones between them, and read back by position with one
// Reader (newest first, as slot lists are followed, then oldest first) and by a scan.
func TestReadAtEveryBoundary(t *testing.T) {
	l := openLog(t, t.TempDir(), Options{SegmentSize: 1 << 20, NoSync: true})
	defer l.Close()
	var recs []*testRecord
	var pos []Pos
	for i, size := range boundarySizes() {
		for _, r := range []*testRecord{sizedPut(i, size), put(i)} {
			p, _, err := appendRec(l, r)
			if err != nil {
				t.Fatal(err)
			}
			recs, pos = append(recs, r), append(pos, p)
		}
	}
	if err := l.WaitWritten(l.End()); err != nil {
		t.Fatal(err)
	}
	r := l.NewReader()
	readBack := func(order []int) {
		t.Helper()
		for _, i := range order {
			got, err := readRec(r, pos[i])
			if err != nil {
				t.Fatalf("ReadAt(%v) of a %d-byte payload: %v", pos[i], len(recs[i].payload), err)
			}
			if !bytes.Equal(got.payload, recs[i].payload) || got.id != recs[i].id {
				t.Fatalf("ReadAt(%v): payload of %d bytes, want %d", pos[i], len(got.payload), len(recs[i].payload))
			}
		}
	}
	order := make([]int, len(recs))
	for i := range order {
		order[i] = len(recs) - 1 - i
	}
	readBack(order)
	slices.Reverse(order)
	readBack(order)
	n := 0
	err := l.Scan(MakePos(1, SegmentHeader), 0, func(p Pos, f Frame) error {
		got := decodeRec(f)
		if p != pos[n] || !bytes.Equal(got.payload, recs[n].payload) {
			return fmt.Errorf("record %d at %v: %d bytes, want %d at %v", n, p, len(got.payload), len(recs[n].payload), pos[n])
		}
		n++
		return nil
	}, nil)
	if err != nil || n != len(recs) {
		t.Fatalf("Scan: %d of %d records, %v", n, len(recs), err)
	}
}

// FuzzReaderLargeRecords appends records of sizes the fuzzer chooses, up to several times the
// Reader's window, and reads them back by position in an order it chooses and by a scan.
func FuzzReaderLargeRecords(f *testing.F) {
	f.Add([]byte{0, 1, 255, 255, 16, 0}, uint64(1))
	f.Add([]byte{63, 255, 64, 0, 64, 1, 0, 0}, uint64(2))
	f.Add([]byte{255, 255, 255, 255, 1, 1}, uint64(3))
	f.Fuzz(func(t *testing.T, spec []byte, seed uint64) {
		if len(spec) > 24 {
			spec = spec[:24]
		}
		l := openLog(t, t.TempDir(), Options{SegmentSize: 1 << 20, NoSync: true})
		defer l.Close()
		var recs []*testRecord
		var pos []Pos
		for i := 0; i+1 < len(spec); i += 2 {
			// Up to 4 MiB in steps of 64 bytes: every window and segment boundary is reachable.
			r := sizedPut(i, (int(spec[i])<<8|int(spec[i+1]))*64+int(spec[i]%64))
			p, _, err := appendRec(l, r)
			if err != nil {
				t.Fatal(err)
			}
			recs, pos = append(recs, r), append(pos, p)
		}
		if err := l.WaitWritten(l.End()); err != nil {
			t.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(seed, 0))
		r := l.NewReader()
		for _, i := range rng.Perm(len(recs)) {
			got, err := readRec(r, pos[i])
			if err != nil || !bytes.Equal(got.payload, recs[i].payload) {
				t.Fatalf("ReadAt(%v) of %d bytes: %d bytes, %v", pos[i], len(recs[i].payload), len(got.payload), err)
			}
		}
		n := 0
		if err := l.Scan(MakePos(1, SegmentHeader), 0, func(p Pos, f Frame) error {
			got := decodeRec(f)
			if p != pos[n] || !bytes.Equal(got.payload, recs[n].payload) {
				return fmt.Errorf("record %d at %v differs", n, p)
			}
			n++
			return nil
		}, nil); err != nil || n != len(recs) {
			t.Fatalf("Scan: %d of %d records, %v", n, len(recs), err)
		}
	})
}
