package format

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"time"

	"github.com/tockwheel/tock/delayq/internal/wal"
)

// # Snapshots (checkpoint versions 1 to 3)
//
// Before checkpoints were logs of edits, a checkpoint file was one snapshot. Open still reads
// them (and writes the state in the current version); nothing writes them but tests.
//
//	0   8  magic "tockckp1"
//	8   4  version (version 1 lacks the due counts of heads, and versions 1 and 2 count
//	       cancelled messages among those in the disk wheel)
//	12  8  replay position
//	20  8  slot length in nanoseconds
//	28  4  slots in the disk wheel
//	32  8  loaded
//	40  8  messages in the disk wheel
//	48  4  heads, 4 pins, 4 entries, 4 user IDs: the counts of the sections that follow
//	       heads:    slot int64, head uint64, due int64 (due from version 2 on)
//	       pins:     segment uint32, count int64
//	       entries:  pos uint64, origin uint64, deliverAt int64, attempt uint32, topic name
//	       user IDs: slot int64, id name
//	end 4  CRC-32C of everything before it

// A Snapshot is the state a checkpoint of versions 1 to 3 held.
type Snapshot struct {
	Version uint32
	Replay  wal.Pos
	SlotNs  int64
	Slots   int
	Loaded  int64
	Pending int64
	// Heads are the lists that are not empty: their slot, newest record and due count (version
	// 2 on); they lack first, n and topics.
	Heads []Head
	Pins  []Pin
	// Entries lack Failure and FailedAt.
	Entries []Entry
	// IDs lack Pos.
	IDs []ID
}

// A Head is a list of a snapshot.
type Head struct {
	Slot int64
	Head wal.Pos
	Due  int64
}

// AppendSnapshot appends s as a checkpoint file of its version (1 to 3) to b.
func AppendSnapshot(b []byte, s *Snapshot) ([]byte, error) {
	if s.Version < 1 || s.Version > 3 {
		return b, fmt.Errorf("%w: snapshot of version %d", errMalformed, s.Version)
	}
	start := len(b)
	e := encoder{b: append(b, CheckpointMagic...)}
	e.u32(s.Version)
	e.pos(s.Replay)
	e.i64(s.SlotNs)
	e.u32(uint32(s.Slots))
	e.i64(s.Loaded)
	e.i64(s.Pending)
	for _, n := range []int{len(s.Heads), len(s.Pins), len(s.Entries), len(s.IDs)} {
		e.u32(uint32(n))
	}
	for _, h := range s.Heads {
		e.i64(h.Slot)
		e.pos(h.Head)
		if s.Version >= 2 {
			e.i64(h.Due)
		}
	}
	for _, p := range s.Pins {
		e.u32(p.Segment)
		e.i64(p.Count)
	}
	for _, en := range s.Entries {
		if len(en.Topic) > MaxName {
			return b, fmt.Errorf("%w: topic of %d bytes", errMalformed, len(en.Topic))
		}
		e.pos(en.Pos)
		e.pos(en.Origin)
		e.i64(en.DeliverAt)
		e.u32(en.Attempt)
		e.name(en.Topic)
	}
	for _, id := range s.IDs {
		if len(id.ID) > MaxName {
			return b, fmt.Errorf("%w: id of %d bytes", errMalformed, len(id.ID))
		}
		e.i64(id.Slot)
		e.name(id.ID)
	}
	return binary.LittleEndian.AppendUint32(e.b, crc32.Checksum(e.b[start:], castagnoli)), nil
}

// DecodeSnapshot decodes a checkpoint file of versions 1 to 3. Damage gives an *Error.
func DecodeSnapshot(b []byte) (*Snapshot, error) {
	const fixed = 64
	bad := func(off int, format string, args ...any) error {
		return &Error{Offset: int64(off), Reason: fmt.Sprintf(format, args...)}
	}
	if len(b) < fixed+4 {
		return nil, bad(len(b), "checkpoint of %d bytes is too short", len(b))
	}
	body := b[:len(b)-4]
	if want, got := binary.LittleEndian.Uint32(b[len(b)-4:]), crc32.Checksum(body, castagnoli); want != got {
		return nil, bad(len(b)-4, "checkpoint checksum mismatch: stored %08x, computed %08x", want, got)
	}
	d := decoder{b: body, off: 8, keep: true}
	s := &Snapshot{Version: d.u32()}
	if s.Version < 1 || s.Version > 3 {
		return nil, bad(8, "snapshot of version %d", s.Version)
	}
	headSize := 16
	if s.Version >= 2 {
		headSize = 24
	}
	s.Replay, s.SlotNs, s.Slots, s.Loaded, s.Pending = d.pos(), d.i64(), int(d.u32()), d.i64(), d.i64()
	nh, np, ne, nu := int(d.u32()), int(d.u32()), int(d.u32()), int(d.u32())
	if s.SlotNs < int64(time.Millisecond) || s.Slots < 1 || s.Slots > MaxSlots {
		return nil, bad(20, "slot length %d ns or %d slots out of range", s.SlotNs, s.Slots)
	}
	if rest := d.left(); nh > rest/headSize || np > rest/12 || ne > rest/30 || nu > rest/10 || nh > s.Slots {
		return nil, bad(48, "section counts %d/%d/%d/%d exceed the data", nh, np, ne, nu)
	}
	s.Heads = make([]Head, nh)
	for i := range s.Heads {
		h := Head{Slot: d.i64(), Head: d.pos()}
		if s.Version >= 2 {
			h.Due = d.i64()
		}
		s.Heads[i] = h
	}
	s.Pins = make([]Pin, np)
	for i := range s.Pins {
		s.Pins[i] = Pin{Segment: d.u32(), Count: d.i64()}
	}
	s.Entries = make([]Entry, ne)
	for i := range s.Entries {
		s.Entries[i] = Entry{Pos: d.pos(), Origin: d.pos(), DeliverAt: d.i64(), Attempt: d.u32(), Topic: d.name()}
	}
	s.IDs = make([]ID, nu)
	for i := range s.IDs {
		s.IDs[i] = ID{Slot: d.i64()}
		s.IDs[i].ID = d.name()
	}
	if d.bad {
		return nil, bad(d.off, "checkpoint cut short")
	}
	if d.left() != 0 {
		return nil, bad(d.off, "%d stray bytes in checkpoint", d.left())
	}
	return s, nil
}
