package wal

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"reflect"
	"strings"
	"testing"
)

var sampleRecords = []Record{
	{Kind: KindPut, Threaded: true, ListSlot: 1 << 40, Prev: MakePos(3, 99), DeliverAt: -5, Attempt: 7, Origin: MakePos(1, 16), ID: "id", Topic: "topic", Payload: []byte("payload")},
	{Kind: KindPut, DeliverAt: 1, ID: "", Topic: "t", Payload: []byte{}},
	{Kind: KindPut, ID: strings.Repeat("i", MaxName), Topic: strings.Repeat("t", MaxName), Payload: bytes.Repeat([]byte{0xff}, 1000)},
	{Kind: KindCancel, Threaded: true, ListSlot: 12, Prev: MakePos(1, 16), ID: "gone"},
	{Kind: KindCancel, ID: "direct"},
	{Kind: KindAck, Target: MakePos(9, 1234)},
	{Kind: KindUpdate, Target: MakePos(2, 77), DeliverAt: 123456789, Attempt: 3, Topic: "t.dead"},
	{Kind: KindUpdate, Target: MakePos(2, 77)},
	{Kind: KindAdvance, Slot: -3},
	{Kind: KindRelocate, Slot: 1 << 40},
	{Kind: KindCancel, Threaded: true, ListSlot: 12, Prev: MakePos(1, 16), ID: "gone", Topic: "its topic"},
	{Kind: KindUpdate, Target: MakePos(2, 77), DeliverAt: 5, Attempt: 1, Failure: FailureNacked, FailedAt: 4},
	{Kind: KindUpdate, Target: MakePos(2, 77), Topic: "t.dead", Failure: FailureExpired, FailedAt: -1},
	{Kind: KindUpdate, Target: MakePos(2, 77), Topic: "t", Failure: FailureNone},
	{Kind: KindPause, Paused: true, Topic: "paused"},
	{Kind: KindPause, Topic: strings.Repeat("r", MaxName)},
	{Kind: KindPurge, Threaded: true, ListSlot: -7, Prev: MakePos(4, 400), Topic: "purged"},
}

func TestRecordRoundTrip(t *testing.T) {
	for _, r := range sampleRecords {
		b, err := r.Append(nil)
		if err != nil {
			t.Fatalf("%v: %v", r.Kind, err)
		}
		if len(b) != r.Size() {
			t.Fatalf("%v: encoded %d bytes, Size says %d", r.Kind, len(b), r.Size())
		}
		got, err := Decode(b)
		if err != nil {
			t.Fatalf("%v: %v", r.Kind, err)
		}
		if r.Payload == nil && r.Kind == KindPut {
			r.Payload = []byte{}
		}
		if got.Kind == KindPut && len(got.Payload) == 0 {
			got.Payload = []byte{}
		}
		if !reflect.DeepEqual(got, r) {
			t.Fatalf("round trip:\n got %+v\nwant %+v", got, r)
		}
	}
}

func TestRecordLimits(t *testing.T) {
	for _, r := range []Record{
		{Kind: KindPut, ID: strings.Repeat("i", MaxName+1)},
		{Kind: KindPut, Topic: strings.Repeat("t", MaxName+1)},
		{Kind: KindPut, Payload: make([]byte, MaxPayload+1)},
		{Kind: 0},
		{Kind: 99},
	} {
		if b, err := r.Append([]byte("keep")); err == nil || string(b) != "keep" {
			t.Errorf("%v with id %d topic %d payload %d: err %v, buffer %q", r.Kind, len(r.ID), len(r.Topic), len(r.Payload), err, b)
		}
	}
}

// malformed frames; each must give an error, never a panic.
func malformedFrames() [][]byte {
	good, _ := sampleRecords[0].Append(nil)
	flip := func(i int) []byte {
		b := bytes.Clone(good)
		b[i] ^= 0x40
		return b
	}
	withLen := func(n uint32) []byte {
		b := bytes.Clone(good)
		binary.LittleEndian.PutUint32(b[4:], n)
		return b
	}
	reframe := func(kind byte, body []byte) []byte {
		b := make([]byte, 9, 9+len(body))
		b[8] = kind
		b = append(b, body...)
		binary.LittleEndian.PutUint32(b[4:], uint32(1+len(body)))
		binary.LittleEndian.PutUint32(b, crc(b[4:]))
		return b
	}
	return [][]byte{
		nil,
		{1, 2, 3},
		good[:HeaderSize],
		good[:len(good)-1],
		append(bytes.Clone(good), 0),
		flip(0), flip(5), flip(8), flip(len(good) - 1),
		withLen(0), withLen(MaxRecord + 1), withLen(1 << 31),
		reframe(0, nil),
		reframe(42, []byte{1, 2, 3}),
		reframe(byte(KindPut), make([]byte, 36)),
		reframe(byte(KindPut), append([]byte{2}, make([]byte, 40)...)),                 // unknown flag
		reframe(byte(KindPut), append(make([]byte, 37), 0xff, 0xff)),                   // id longer than body
		reframe(byte(KindCancel), make([]byte, 18)),                                    // id length cut short
		reframe(byte(KindAck), make([]byte, 7)),                                        // short
		reframe(byte(KindAck), make([]byte, 9)),                                        // stray byte
		reframe(byte(KindUpdate), append(make([]byte, 20), 5, 0, 'a')),                 // topic cut short
		reframe(byte(KindAdvance), make([]byte, 16)),                                   // stray bytes
		reframe(byte(KindRelocate), make([]byte, 4)),                                   // short
		reframe(byte(KindCancel), append([]byte{3}, make([]byte, 20)...)),              // topic flag, empty topic
		reframe(byte(KindCancel), append([]byte{4}, make([]byte, 18)...)),              // unknown flag
		reframe(byte(KindUpdate), append(make([]byte, 22), 4, 0, 0, 0, 0, 0, 0, 0, 0)), // unknown failure
		reframe(byte(KindUpdate), append(make([]byte, 22), 0, 0, 0, 0, 0, 0, 0, 0, 0)), // failure 0 written
		reframe(byte(KindUpdate), append(make([]byte, 22), 1, 0, 0)),                   // failedAt cut short
		reframe(byte(KindPause), []byte{2, 0, 0}),                                      // unknown flag
		reframe(byte(KindPause), []byte{1, 3, 0, 'a'}),                                 // topic cut short
		reframe(byte(KindPurge), make([]byte, 19)),                                     // not threaded
		reframe(byte(KindPurge), append([]byte{1}, make([]byte, 17)...)),               // topic length cut short
	}
}

func crc(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

func TestDecodeMalformed(t *testing.T) {
	for i, b := range malformedFrames() {
		if r, err := Decode(b); err == nil {
			t.Errorf("frame %d (%x) decoded as %+v", i, b, r)
		}
	}
}

// FuzzDecode checks that Decode never panics, and that what it accepts re-encodes to the same
// bytes (a frame has one encoding).
func FuzzDecode(f *testing.F) {
	for _, r := range sampleRecords {
		b, _ := r.Append(nil)
		f.Add(b)
	}
	for _, b := range malformedFrames() {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := Decode(b)
		if len(b) > HeaderSize {
			if _, berr := decodeBody(Kind(b[8]), b[9:]); (berr == nil) != validBody(Kind(b[8]), b[9:]) {
				t.Fatalf("validBody and decodeBody disagree on %x: %v", b[8:], berr)
			}
		}
		if err != nil {
			var fe *frameError
			if !errors.As(err, &fe) {
				t.Fatalf("error of type %T: %v", err, err)
			}
			return
		}
		again, err := r.Append(nil)
		if err != nil {
			t.Fatalf("decoded %+v does not encode: %v", r, err)
		}
		if !bytes.Equal(again, b) {
			t.Fatalf("re-encoding differs:\n got %x\nwant %x", again, b)
		}
	})
}
