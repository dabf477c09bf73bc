package wal

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"strings"
	"testing"
)

// The tests' frames carry a testRecord: type 1, an ID and a payload. verifyTest is its check.
type testRecord struct {
	id      string
	payload []byte
}

const testType = 1

func (r *testRecord) body() []byte {
	b := binary.LittleEndian.AppendUint16(nil, uint16(len(r.id)))
	return append(append(b, r.id...), r.payload...)
}

func (r *testRecord) size() int { return FrameSize(2 + len(r.id) + len(r.payload)) }

func verifyTest(typ byte, body []byte) error {
	if typ != testType || len(body) < 2 || int(binary.LittleEndian.Uint16(body)) > len(body)-2 {
		return fmt.Errorf("not a test record")
	}
	return nil
}

func decodeRec(f Frame) testRecord {
	n := int(binary.LittleEndian.Uint16(f.Body))
	return testRecord{id: string(f.Body[2 : 2+n]), payload: bytes.Clone(f.Body[2+n:])}
}

// scanAll scans l from its first frame and returns the IDs of the records it reads and the damage
// it meets, in order.
func scanAll(t *testing.T, l *Log) (ids []string, damage []*CorruptError) {
	t.Helper()
	if err := l.Scan(MakePos(1, SegmentHeader), 0, func(_ Pos, f Frame) error {
		ids = append(ids, decodeRec(f).id)
		return nil
	}, func(ce *CorruptError) error {
		damage = append(damage, ce)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return ids, damage
}

func put(i int) *testRecord {
	return &testRecord{id: fmt.Sprint("m", i), payload: []byte(strings.Repeat("x", i%50))}
}

func frameOf(b []byte, r *testRecord) []byte {
	b, err := AppendFrame(b, testType, false, r.body())
	if err != nil {
		panic(err)
	}
	return b
}

func appendRec(l *Log, r *testRecord) (Pos, Pos, error) { return l.Append(testType, false, r.body()) }

// readRec reads the test record at pos.
func readRec(r *Reader, pos Pos) (testRecord, error) {
	f, err := r.ReadAt(pos)
	if err != nil {
		return testRecord{}, err
	}
	return decodeRec(f), nil
}

func TestFrameRoundTrip(t *testing.T) {
	for _, c := range []struct {
		typ  byte
		more bool
		body []byte
	}{{1, false, nil}, {1, true, []byte("x")}, {MaxType, false, bytes.Repeat([]byte{0xab}, 1000)}, {42, true, make([]byte, MaxBody)}} {
		b, err := AppendFrame([]byte("keep"), c.typ, c.more, c.body)
		if err != nil || string(b[:4]) != "keep" || len(b) != 4+FrameSize(len(c.body)) {
			t.Fatalf("AppendFrame(%d, %v, %d bytes): %d bytes, %v", c.typ, c.more, len(c.body), len(b), err)
		}
		f, err := DecodeFrame(b[4:], nil)
		if err != nil || f.Type != c.typ || f.More != c.more || !bytes.Equal(f.Body, c.body) {
			t.Fatalf("DecodeFrame of type %d, more %v, %d bytes: %d, %v, %d bytes, %v", c.typ, c.more, len(c.body), f.Type, f.More, len(f.Body), err)
		}
	}
	for _, c := range []struct {
		typ byte
		n   int
	}{{0, 1}, {MaxType + 1, 1}, {0xff, 1}, {1, MaxBody + 1}} {
		if b, err := AppendFrame([]byte("keep"), c.typ, false, make([]byte, c.n)); err == nil || string(b) != "keep" {
			t.Errorf("AppendFrame of type %d and %d bytes: %v, %d bytes", c.typ, c.n, err, len(b))
		}
	}
}

// malformedFrames are bytes that are not one valid frame; each must give an error, never a panic.
func malformedFrames() [][]byte {
	good := frameOf(nil, &testRecord{id: "id", payload: []byte("payload")})
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
	reframe := func(typ byte, body []byte) []byte {
		b := make([]byte, 9, 9+len(body))
		b[8] = typ
		b = append(b, body...)
		binary.LittleEndian.PutUint32(b[4:], uint32(1+len(body)))
		binary.LittleEndian.PutUint32(b, crc32.Checksum(b[4:], castagnoli))
		return b
	}
	return [][]byte{
		nil,
		{1, 2, 3},
		good[:HeaderSize],
		good[:len(good)-1],
		append(bytes.Clone(good), 0),
		flip(0), flip(5), flip(8), flip(len(good) - 1),
		withLen(0), withLen(maxLength + 1), withLen(1 << 31),
		reframe(0, nil),
		reframe(moreBit, []byte{0, 0}),
		reframe(42, []byte{1, 2, 3}),         // a type the content refuses
		reframe(testType, []byte{5, 0, 'a'}), // a body the content refuses
	}
}

func TestDecodeMalformed(t *testing.T) {
	for i, b := range malformedFrames() {
		if f, err := DecodeFrame(b, verifyTest); err == nil {
			t.Errorf("frame %d (%x) decoded as %+v", i, b, f)
		} else if fe := (*frameError)(nil); !errors.As(err, &fe) {
			t.Errorf("frame %d: error of type %T: %v", i, err, err)
		}
	}
}

// FuzzFrame checks that DecodeFrame never panics, that what it accepts re-encodes to the same
// bytes (a frame has one encoding), and that UncheckedFrame agrees with it on frames whose
// checksum holds.
func FuzzFrame(f *testing.F) {
	f.Add(frameOf(nil, put(3)))
	for _, b := range malformedFrames() {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		fr, err := DecodeFrame(b, nil)
		u, ok := UncheckedFrame(b)
		if err != nil {
			return
		}
		if !ok || u.Type != fr.Type || u.More != fr.More || !bytes.Equal(u.Body, fr.Body) {
			t.Fatalf("UncheckedFrame %+v, %v; DecodeFrame %+v", u, ok, fr)
		}
		again, err := AppendFrame(nil, fr.Type, fr.More, fr.Body)
		if err != nil || !bytes.Equal(again, b) {
			t.Fatalf("re-encoding differs (%v):\n got %x\nwant %x", err, again, b)
		}
	})
}
