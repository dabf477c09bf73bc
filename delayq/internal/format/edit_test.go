package format

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tockwheel/tock/delayq/internal/wal"
	"github.com/tockwheel/tock/internal/testlong"
)

var sampleEdits = []Edit{
	{Full: true, Replay: wal.MakePos(3, 16), SlotNs: int64(time.Second), Slots: 86400, Loaded: 1 << 30, Pending: 2,
		Paused: []string{"p", "q"},
		Limits: []Limit{{Topic: "q", Rate: 12.5, Burst: 2}, {Topic: "emails", Concurrency: 8}},
		Lists: []List{{Index: 5, Slot: 1<<30 + 5, Head: wal.MakePos(3, 500), First: wal.MakePos(2, 16), Due: 1, N: 2,
			Topics: []ListTopic{{Name: "t", N: 1, Due: 1, Last: 1<<30 + 5}, {Name: "q", N: 1, Last: 1<<30 + 86405, Taken: true},
				{Name: "gone", Last: 1<<30 + 5, Taken: true}}},
			{Index: 7, Slot: 1<<30 + 7, Head: wal.MakePos(3, 600), First: wal.MakePos(3, 550), N: 1,
				Topics: []ListTopic{{Name: "t", N: 1, Last: 1<<30 + 86407, Taken: true}}}},
		Pins: []Pin{{Segment: 2, Count: 1}, {Segment: 3, Count: 2}},
		Entries: []Entry{{Origin: wal.MakePos(1, 16), Pos: wal.MakePos(2, 99), DeliverAt: 7, Attempt: 2, Failure: FailureNacked, FailedAt: 6, Topic: "t.dead"},
			{Origin: wal.MakePos(1, 32), Pos: wal.MakePos(1, 32), Failure: FailureDeadLettered, FailedAt: 8, Topic: "u.dead", Reason: "no such user"}},
		IDs: []ID{{ID: "user", Slot: 1<<30 + 5, Pos: wal.MakePos(3, 500)}}},
	{Replay: wal.MakePos(4, 16), SlotNs: int64(time.Millisecond), Slots: 1, Loaded: -1, Pending: -3,
		Lists:          []List{{Index: 0, Slot: 9}},
		RemovedEntries: []wal.Pos{wal.MakePos(1, 16)},
		RemovedIDs:     []string{"user", ""},
		Damage:         []wal.Pos{wal.MakePos(1, 0), wal.MakePos(2, 4000)}},
	{Full: true, SlotNs: 1 << 40, Slots: MaxSlots},
	{Full: true, SlotNs: int64(time.Second), Slots: 10, Paused: []string{"mail"},
		Schedules: []Schedule{{Name: "digest", Topic: "mail", Spec: "30 9 * * *", Zone: "Europe/Paris", Payload: []byte("hello"),
			Misfire: MisfireAll, Overlap: OverlapAllow, Start: 1, Next: 2, Act: 3, Created: 4, Updated: 5, Fired: 6, PrevFired: 7,
			Triggered: 8, Fires: 9, Misfires: 10},
			{Name: "tick", Topic: "ticks", Spec: "@every 10ms", Misfire: MisfireSkip, Overlap: OverlapSkip, Paused: true}},
		Fires: 12, Misfires: 1 << 40},
	{Replay: wal.MakePos(9, 16), SlotNs: int64(time.Second), Slots: 10, RemovedSchedules: []string{"digest", "x"}, Misfires: 1,
		Schedules: []Schedule{{Name: "n", Topic: "t", Misfire: MisfireOnce, Overlap: OverlapAllow, Next: -1}}},
}

// normal returns ed with empty slices nil, as the comparison of edits wants them.
func normal(ed Edit) Edit {
	nilIfEmpty := func(n int, clear func()) {
		if n == 0 {
			clear()
		}
	}
	nilIfEmpty(len(ed.Paused), func() { ed.Paused = nil })
	nilIfEmpty(len(ed.Limits), func() { ed.Limits = nil })
	ed.Lists = append([]List(nil), ed.Lists...)
	for i := range ed.Lists {
		nilIfEmpty(len(ed.Lists[i].Topics), func() { ed.Lists[i].Topics = nil })
	}
	nilIfEmpty(len(ed.Lists), func() { ed.Lists = nil })
	nilIfEmpty(len(ed.Pins), func() { ed.Pins = nil })
	nilIfEmpty(len(ed.Entries), func() { ed.Entries = nil })
	nilIfEmpty(len(ed.RemovedEntries), func() { ed.RemovedEntries = nil })
	nilIfEmpty(len(ed.IDs), func() { ed.IDs = nil })
	nilIfEmpty(len(ed.RemovedIDs), func() { ed.RemovedIDs = nil })
	nilIfEmpty(len(ed.Damage), func() { ed.Damage = nil })
	nilIfEmpty(len(ed.Schedules), func() { ed.Schedules = nil })
	nilIfEmpty(len(ed.RemovedSchedules), func() { ed.RemovedSchedules = nil })
	return ed
}

// checkpointOf returns a checkpoint file of the current version holding eds.
func checkpointOf(t testing.TB, eds ...Edit) []byte {
	t.Helper()
	b := AppendCheckpointHeader(nil)
	for i := range eds {
		var err error
		if b, err = AppendEdit(b, &eds[i]); err != nil {
			t.Fatal(err)
		}
	}
	return b
}

// decodeAll decodes a checkpoint file, returning its edits.
func decodeAll(b []byte) ([]Edit, CheckpointFile, error) {
	var got []Edit
	cf, err := DecodeCheckpoint(b, func(ed *Edit) error {
		got = append(got, normal(*ed))
		return nil
	})
	return got, cf, err
}

func TestEditRoundTrip(t *testing.T) {
	b := checkpointOf(t, sampleEdits...)
	got, cf, err := decodeAll(b)
	if err != nil || cf.Version != CheckpointVersion || cf.End != int64(len(b)) || cf.Snapshot != nil || len(got) != len(sampleEdits) {
		t.Fatalf("DecodeCheckpoint: %+v, %d edits, %v", cf, len(got), err)
	}
	for i := range sampleEdits {
		if want := normal(sampleEdits[i]); !reflect.DeepEqual(got[i], want) {
			t.Fatalf("edit %d:\n got %+v\nwant %+v", i, got[i], want)
		}
	}
	// A last edit cut short, or zeros after the last edit, end the file at the edit before.
	for cut := cf.FirstEnd + 1; cut < int64(len(b)); cut++ {
		_, cf2, err := decodeAll(b[:cut])
		if err != nil || cf2.End > cut || cf2.End < cf.FirstEnd {
			t.Fatalf("cut at %d: %+v, %v", cut, cf2, err)
		}
	}
	if _, cf2, err := decodeAll(append(bytes.Clone(b), make([]byte, 100)...)); err != nil || cf2.End != cf.End {
		t.Fatalf("zeros after the last edit: %+v, %v; want it to end at %d", cf2, err, cf.End)
	}
	// Any other damage is an error.
	for i := checkpointHeader; i < len(b); i++ {
		d := bytes.Clone(b)
		d[i] ^= 0x10
		if _, cf2, err := decodeAll(d); err == nil && cf2.End == int64(len(b)) {
			t.Fatalf("a flipped byte at %d went unnoticed", i)
		}
	}
}

// TestLargeEditIsAGroup writes edits larger than a frame: each takes a group of frames, reads back
// whole, and a file cut anywhere in a group ends at the edit before. Frames are made small here;
// TestEditOverAFrame writes one over the frame's real limit.
func TestLargeEditIsAGroup(t *testing.T) {
	b := AppendCheckpointHeader(nil)
	var ends []int64
	for i := range sampleEdits {
		var err error
		if b, err = appendEditFrames(b, &sampleEdits[i], 50); err != nil {
			t.Fatal(err)
		}
		ends = append(ends, int64(len(b)))
	}
	frames := 0
	if _, err := wal.ReadFrames("", checkpointHeader, b[checkpointHeader:], verifyEditFrame, func(int64, wal.Frame) error {
		frames++
		return nil
	}); err != nil || frames < 2*len(sampleEdits) {
		t.Fatalf("%d frames of 50 bytes for %d edits of %d bytes, %v", frames, len(sampleEdits), len(b), err)
	}
	got, cf, err := decodeAll(b)
	if err != nil || len(got) != len(sampleEdits) || cf.End != int64(len(b)) {
		t.Fatalf("decoded %d edits, %+v, %v", len(got), cf, err)
	}
	for i := range got {
		if !reflect.DeepEqual(got[i], normal(sampleEdits[i])) {
			t.Fatalf("edit %d:\n got %+v\nwant %+v", i, got[i], normal(sampleEdits[i]))
		}
	}
	for cut := ends[0] + 1; cut < int64(len(b)); cut++ {
		want := ends[0]
		for _, e := range ends {
			if e <= cut {
				want = e
			}
		}
		if _, cf2, err := decodeAll(b[:cut]); err != nil || cf2.End != want {
			t.Fatalf("cut at %d: %+v, %v; want it to end at %d", cut, cf2, err, want)
		}
	}
}

// TestEditOverAFrame writes a full edit over a frame's limit (16 MiB): it takes a group of two
// frames and reads back whole. Long mode only: it costs seconds under the race detector.
func TestEditOverAFrame(t *testing.T) {
	testlong.Skip(t)
	big := Edit{Full: true, SlotNs: int64(time.Second), Slots: 10}
	for i, size := 0, 0; size <= wal.MaxBody; i++ {
		id := fmt.Sprintf("%d-%s", i, strings.Repeat("x", MaxName-10))
		big.IDs = append(big.IDs, ID{ID: id, Slot: int64(i), Pos: wal.Pos(i)})
		size += len(id) + 18
	}
	b := checkpointOf(t, big)
	frames := 0
	wal.ReadFrames("", checkpointHeader, b[checkpointHeader:], verifyEditFrame, func(int64, wal.Frame) error {
		frames++
		return nil
	})
	got, _, err := decodeAll(b)
	if err != nil || frames != 2 || len(got) != 1 || !reflect.DeepEqual(got[0], normal(big)) {
		t.Fatalf("an edit of %d bytes: %d frames, %d edits decoded, %v", len(b), frames, len(got), err)
	}
}

// FuzzEdit checks the edit schema both ways: a body decodeEdit accepts, as version 4 to 9,
// re-encodes to bytes that decode to the same edit, and to the same bytes when it was of the
// current version (an edit has one encoding); a sample edit changed by the fuzzer's values encodes
// to bytes that decode to it. A file of the fuzzer's bytes never makes DecodeCheckpoint panic.
func FuzzEdit(f *testing.F) {
	for i := range sampleEdits {
		b, _ := appendEdit(nil, &sampleEdits[i])
		f.Add(b, uint8(2), int64(0), "")
		f.Add(b, uint8(1), int64(1), "x")
		f.Add(b, uint8(0), int64(2), "y")
		f.Add(b, uint8(3), int64(3), "z")
		f.Add(b, uint8(4), int64(4), "")
		f.Add(b, uint8(5), int64(5), "")
	}
	f.Fuzz(func(t *testing.T, body []byte, version uint8, n int64, s string) {
		v := uint32(4 + version%6)
		ed, err := decodeEdit(body, v)
		if err == nil {
			again, err := appendEdit(nil, ed)
			if err != nil {
				t.Fatalf("decoded %+v does not encode: %v", ed, err)
			}
			back, err := decodeEdit(again, CheckpointVersion)
			if err != nil || !reflect.DeepEqual(normal(*back), normal(*ed)) {
				t.Fatalf("%x decodes to %+v, encodes to %x, decodes to %+v, %v", body, ed, again, back, err)
			}
			if v == CheckpointVersion && !bytes.Equal(again, body) {
				t.Fatalf("re-encoding differs:\n got %x\nwant %x", again, body)
			}
		}
		// decode(encode(v)): a sample changed by the fuzzer's values.
		ed2 := normal(sampleEdits[int(uint64(n)%uint64(len(sampleEdits)))])
		ed2.Loaded, ed2.Pending = n, -n
		if s != "" && len(s) <= MaxName {
			ed2.Paused = append(ed2.Paused[:len(ed2.Paused):len(ed2.Paused)], s)
			ed2.RemovedIDs = append(ed2.RemovedIDs[:len(ed2.RemovedIDs):len(ed2.RemovedIDs)], s)
			ed2.Entries = append(ed2.Entries[:len(ed2.Entries):len(ed2.Entries)], Entry{Origin: wal.Pos(n), Topic: s})
			ed2.Schedules = append(ed2.Schedules[:len(ed2.Schedules):len(ed2.Schedules)], Schedule{Name: s, Topic: s, Spec: s,
				Misfire: MisfireOnce, Overlap: OverlapSkip, Next: n, Payload: []byte(s)})
			ed2.RemovedSchedules = append(ed2.RemovedSchedules[:len(ed2.RemovedSchedules):len(ed2.RemovedSchedules)], s)
		}
		b, err := appendEdit(nil, &ed2)
		if err != nil {
			t.Fatal(err)
		}
		back, err := decodeEdit(b, CheckpointVersion)
		if err != nil || !reflect.DeepEqual(normal(*back), ed2) {
			t.Fatalf("%+v encodes to %x, which decodes to %+v, %v", ed2, b, back, err)
		}
		// Files of those bodies, in each framing: none panics.
		for _, file := range [][]byte{checkpointOf(t, ed2), fileV6(4, body), fileV6(5, body), fileV6(6, body)} {
			DecodeCheckpoint(file, func(*Edit) error { return nil })
		}
		if f, err := wal.AppendFrame(AppendCheckpointHeader(nil), frameEdit, false, body); err == nil {
			DecodeCheckpoint(f, func(*Edit) error { return nil })
		}
	})
}

// fileV6 returns a checkpoint file of version 4, 5 or 6 holding the edit body.
func fileV6(version uint32, body []byte) []byte {
	b := binary.LittleEndian.AppendUint32([]byte(CheckpointMagic), version)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(body)))
	b = binary.LittleEndian.AppendUint32(b, crc32.Checksum(body, castagnoli))
	return append(b, body...)
}

var sampleSnapshots = []Snapshot{
	{Version: 1, Replay: wal.MakePos(1, 16), SlotNs: int64(time.Second), Slots: 10, Loaded: 5, Pending: 3,
		Heads: []Head{{Slot: 7, Head: wal.MakePos(1, 99)}}, Pins: []Pin{{Segment: 1, Count: 3}},
		Entries: []Entry{{Pos: wal.MakePos(1, 40), Origin: wal.MakePos(1, 40), DeliverAt: 9, Attempt: 1, Topic: "t"}},
		IDs:     []ID{{ID: "u", Slot: 7}}},
	{Version: 2, SlotNs: int64(time.Millisecond), Slots: 1, Heads: []Head{{Slot: 1, Head: 2, Due: 3}}},
	{Version: 3, SlotNs: int64(time.Millisecond), Slots: MaxSlots, Loaded: -1},
}

func normalSnapshot(s Snapshot) Snapshot {
	if len(s.Heads) == 0 {
		s.Heads = nil
	}
	if len(s.Pins) == 0 {
		s.Pins = nil
	}
	if len(s.Entries) == 0 {
		s.Entries = nil
	}
	if len(s.IDs) == 0 {
		s.IDs = nil
	}
	return s
}

// FuzzSnapshot checks the schema of checkpoints of versions 1 to 3 both ways, as FuzzEdit does.
func FuzzSnapshot(f *testing.F) {
	for i := range sampleSnapshots {
		b, _ := AppendSnapshot(nil, &sampleSnapshots[i])
		f.Add(b, int64(0))
	}
	f.Fuzz(func(t *testing.T, b []byte, n int64) {
		if s, err := DecodeSnapshot(b); err == nil {
			again, err := AppendSnapshot(nil, s)
			if err != nil || !bytes.Equal(again, b) {
				t.Fatalf("%x decodes to %+v, encodes to %x, %v", b, s, again, err)
			}
		}
		s := normalSnapshot(sampleSnapshots[int(uint64(n)%uint64(len(sampleSnapshots)))])
		s.Loaded, s.Pending = n, -n
		if s.Version == 1 {
			for i := range s.Heads {
				s.Heads[i].Due = 0
			}
		}
		enc, err := AppendSnapshot(nil, &s)
		if err != nil {
			t.Fatal(err)
		}
		back, err := DecodeSnapshot(enc)
		if err != nil || !reflect.DeepEqual(normalSnapshot(*back), s) {
			t.Fatalf("%+v encodes to %x, which decodes to %+v, %v", s, enc, back, err)
		}
	})
}

// FuzzSecret checks the secret file's schema both ways.
func FuzzSecret(f *testing.F) {
	f.Add(AppendSecret(nil, [32]byte{1, 2, 3}), []byte("key"))
	f.Add([]byte("tocksec1"), []byte{})
	f.Fuzz(func(t *testing.T, b []byte, key []byte) {
		if k, err := DecodeSecret(b); err == nil {
			if again := AppendSecret(nil, k); !bytes.Equal(again, b) {
				t.Fatalf("%x decodes to %x, encodes to %x", b, k, again)
			}
		}
		var k [32]byte
		copy(k[:], key)
		if got, err := DecodeSecret(AppendSecret(nil, k)); err != nil || got != k {
			t.Fatalf("key %x: %x, %v", k, got, err)
		}
	})
}
