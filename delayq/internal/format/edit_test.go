package format

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"reflect"
	"testing"
	"time"

	"github.com/tockwheel/tock/delayq/internal/wal"
)

var sampleEdits = []Edit{
	{Full: true, Replay: wal.MakePos(3, 16), SlotNs: int64(time.Second), Slots: 86400, Loaded: 1 << 30, Pending: 2,
		Paused: []string{"p", "q"},
		Limits: []Limit{{Topic: "q", Rate: 12.5, Burst: 2}, {Topic: "emails", Concurrency: 8}},
		Lists: []List{{Index: 5, Slot: 1<<30 + 5, Head: wal.MakePos(3, 500), First: wal.MakePos(2, 16), Due: 1, N: 2,
			Topics: []ListTopic{{Name: "t", N: 1, Due: 1, Last: 1<<30 + 5}, {Name: "q", N: 1, Last: 1<<30 + 86405}}}},
		Pins: []Pin{{Segment: 2, Count: 1}, {Segment: 3, Count: 2}},
		Entries: []Entry{{Origin: wal.MakePos(1, 16), Pos: wal.MakePos(2, 99), DeliverAt: 7, Attempt: 2, Failure: FailureNacked, FailedAt: 6, Topic: "t.dead"},
			{Origin: wal.MakePos(1, 32), Pos: wal.MakePos(1, 32), Failure: FailureDeadLettered, FailedAt: 8, Topic: "u.dead", Reason: "no such user"}},
		IDs: []ID{{ID: "user", Slot: 1<<30 + 5, Pos: wal.MakePos(3, 500)}}},
	{Replay: wal.MakePos(4, 16), SlotNs: int64(time.Millisecond), Slots: 1, Loaded: -1, Pending: -3,
		Lists:          []List{{Index: 0, Slot: 9}},
		RemovedEntries: []wal.Pos{wal.MakePos(1, 16)},
		RemovedIDs:     []string{"user", ""}},
	{Full: true, SlotNs: 1 << 40, Slots: MaxSlots},
}

// normal returns ed with empty slices nil, as the comparison of edits wants them.
func normal(ed Edit) Edit {
	if len(ed.Paused) == 0 {
		ed.Paused = nil
	}
	if len(ed.Limits) == 0 {
		ed.Limits = nil
	}
	if len(ed.Lists) == 0 {
		ed.Lists = nil
	}
	for i := range ed.Lists {
		if len(ed.Lists[i].Topics) == 0 {
			ed.Lists[i].Topics = nil
		}
	}
	if len(ed.Pins) == 0 {
		ed.Pins = nil
	}
	if len(ed.Entries) == 0 {
		ed.Entries = nil
	}
	if len(ed.RemovedEntries) == 0 {
		ed.RemovedEntries = nil
	}
	if len(ed.IDs) == 0 {
		ed.IDs = nil
	}
	if len(ed.RemovedIDs) == 0 {
		ed.RemovedIDs = nil
	}
	return ed
}

func TestEditRoundTrip(t *testing.T) {
	b := AppendCheckpointHeader(nil)
	for i := range sampleEdits {
		var err error
		if b, err = AppendEdit(b, &sampleEdits[i]); err != nil {
			t.Fatal(err)
		}
	}
	var got []Edit
	cf, err := DecodeCheckpoint(b, func(ed *Edit) error {
		got = append(got, normal(*ed))
		return nil
	})
	if err != nil || cf.Version != CheckpointVersion || cf.End != int64(len(b)) || cf.Snapshot != nil {
		t.Fatalf("DecodeCheckpoint: %+v, %v", cf, err)
	}
	for i := range sampleEdits {
		if want := normal(sampleEdits[i]); !reflect.DeepEqual(got[i], want) {
			t.Fatalf("edit %d:\n got %+v\nwant %+v", i, got[i], want)
		}
	}
	// A last edit cut short ends the file at the edit before; any other damage is an error.
	for cut := cf.FirstEnd + 1; cut < int64(len(b)); cut++ {
		if cf2, err := DecodeCheckpoint(b[:cut], func(*Edit) error { return nil }); err != nil || cf2.End > cut {
			t.Fatalf("cut at %d: %+v, %v", cut, cf2, err)
		}
	}
	for i := range b {
		d := bytes.Clone(b)
		d[i] ^= 0x10
		if _, err := DecodeCheckpoint(d, func(*Edit) error { return nil }); err == nil && i < int(cf.FirstEnd) {
			t.Fatalf("a flipped byte at %d of the first edit went unnoticed", i)
		}
	}
}

// editBody returns the framed body of an edit of version as AppendEdit frames it.
func frameEditBody(body []byte) []byte {
	b := binary.LittleEndian.AppendUint32(nil, uint32(len(body)))
	b = binary.LittleEndian.AppendUint32(b, crc32.Checksum(body, castagnoli))
	return append(b, body...)
}

// FuzzEdit checks the edit schema both ways: a body decodeEdit accepts (as version 4 or 5)
// re-encodes, as version 5, to bytes that decode to the same edit, and to the same bytes when it
// was version 5 (an edit has one encoding); a sample edit changed by the fuzzer's values
// encodes to bytes that decode to it. It never panics.
func FuzzEdit(f *testing.F) {
	for i := range sampleEdits {
		b, _ := appendEdit(nil, &sampleEdits[i])
		f.Add(b, uint8(5), int64(0), "")
		f.Add(b, uint8(4), int64(1), "x")
	}
	f.Fuzz(func(t *testing.T, body []byte, version uint8, n int64, s string) {
		v := uint32(4 + version%2)
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
			if v == 5 && !bytes.Equal(again, body) {
				t.Fatalf("re-encoding differs:\n got %x\nwant %x", again, body)
			}
		}
		// decode(encode(v)): a sample changed by the fuzzer's values.
		ed2 := normal(sampleEdits[int(uint64(n)%uint64(len(sampleEdits)))])
		ed2.Loaded, ed2.Pending = n, -n
		if s != "" && len(s) <= MaxName {
			ed2.Paused = append(ed2.Paused, s)
			ed2.RemovedIDs = append(ed2.RemovedIDs, s)
			ed2.Entries = append(ed2.Entries, Entry{Origin: wal.Pos(n), Topic: s})
		}
		b, err := appendEdit(nil, &ed2)
		if err != nil {
			t.Fatal(err)
		}
		back, err := decodeEdit(b, CheckpointVersion)
		if err != nil || !reflect.DeepEqual(normal(*back), ed2) {
			t.Fatalf("%+v encodes to %x, which decodes to %+v, %v", ed2, b, back, err)
		}
		// A file of those edits decodes whole, and never panics cut anywhere.
		file := append(AppendCheckpointHeader(nil), frameEditBody(b)...)
		if _, err := DecodeCheckpoint(file, func(*Edit) error { return nil }); err != nil {
			t.Fatal(err)
		}
		DecodeCheckpoint(append(AppendCheckpointHeader(nil), frameEditBody(body)...), func(*Edit) error { return nil })
	})
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
