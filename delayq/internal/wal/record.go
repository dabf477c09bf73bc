// Package wal is delayq's write-ahead log: append-only segment files of CRC-checked records,
// written with group commit, read back by position (to follow the disk wheel's slot lists) or in
// order (to replay the tail after a crash).
//
// # Record frame
//
// Every record is one frame; frames follow each other with no padding. All integers are little
// endian.
//
//	offset  size  field
//	0       4     crc     CRC-32C (Castagnoli) of bytes [4, 8+length): the length, kind and body,
//	                      so a damaged length is caught as surely as a damaged body
//	4       4     length  number of bytes after this field: 1 (kind) + len(body); at least 1
//	8       1     kind    what the body is (KindPut, KindCancel, ...) in the low 7 bits; 0 is never
//	                      written, so a run of zero bytes (a preallocated or half-written page)
//	                      never decodes. The high bit (0x80) says that the frame is not the last of
//	                      an atomic group: see below.
//	9       n     body    the kind's fields, below
//
// # Atomic groups
//
// Records appended as a group (Log.Reserve, then Append with Record.More set on all but the last)
// are written into one segment, one after the other, each with the high bit of its kind set except
// the last. Open treats a group without its last record at the end of the log as a torn write and
// cuts all of it, so a group is in the log whole or not at all. Elsewhere the bit means nothing:
// replay applies the records of a group one by one. The bit was added after the other fields: logs
// holding it cannot be read by versions of delayq older than it.
//
// # Bodies
//
// Put (kind 1): a message, its first write or a rewrite (a rolled copy).
//
//	0   1  flags      bit 0: threaded (listSlot and prev are meaningful); other bits zero
//	1   8  listSlot   absolute disk-wheel slot whose list this record is threaded into
//	9   8  prev       position of the previous record of the same list; 0 ends the list
//	17  8  deliverAt  Unix nanoseconds
//	25  4  attempt    deliveries that already failed (a rolled copy keeps the count)
//	29  8  origin     position of the message's first Put; 0 means this record is the first
//	37  2  idLen      then idLen bytes of ID
//	..  2  topicLen   then topicLen bytes of topic
//	..     payload    the rest of the body
//
// Cancel (kind 2): a cancel of every earlier Put with the ID in the same list (threaded), or of
// the loaded message with the ID (not threaded).
//
//	0   1  flags      bit 0: threaded, as in Put; bit 1: the topic follows the ID
//	1   8  listSlot, 9 8 prev   as in Put
//	17  2  idLen      then idLen bytes of ID
//	..  2  topicLen   then topicLen bytes of topic: the topic of the message cancelled, so that the
//	                  disk wheel's counts per topic need not read its Put (flag bit 1 only)
//
// Ack (kind 3): the message in memory whose first Put is at target (its origin) is done.
//
//	0   8  target
//
// Update (kind 4): the message in memory whose first Put is at target changed: it failed a
// delivery, or an operator made it due (deliver now, requeue). It is due again at deliverAt with
// attempt failures, and on topic when topicLen > 0 (a dead letter's topic, or, for a requeued dead
// letter, the topic of its Put again).
//
//	0   8  target, 8 8 deliverAt, 16 4 attempt, 20 2 topicLen, then topic
//	..  1  failure    optional (absent in records written before it): why the last delivery
//	                  failed, FailureNacked or FailureExpired, or FailureNone to forget it
//	..  8  failedAt   with failure: when, in Unix nanoseconds
//
// Advance (kind 5): slot's list was loaded into memory; the wheel no longer holds it.
//
//	0   8  slot
//
// Relocate (kind 6): slot's list, not loaded, was taken out of the disk wheel by compaction; the
// Puts that follow it, threaded into the same list, are copies of the messages still pending in
// it (cancelled ones and duplicate copies left out), so the old records are no longer needed.
//
//	0   8  slot
//
// Pause (kind 7): deliveries of topic are paused (flag bit 0) or resumed.
//
//	0   1  flags      bit 0: paused
//	1   2  topicLen   then topicLen bytes of topic
//
// Purge (kind 8): a cancel of every earlier Put of topic in the same list, which it is threaded
// into like a Cancel.
//
//	0   1  flags, 1 8 listSlot, 9 8 prev   as in Put (always threaded)
//	17  2  topicLen   then topicLen bytes of topic
//
// Kinds 7 and 8, the topic of a Cancel and the failure of an Update were added after the others:
// logs holding them cannot be read by versions of delayq older than them.
//
// The threaded fields come first in Put, Cancel and Purge so a list can be followed without
// decoding the rest. The constants in this file are frozen: changing one makes existing logs
// unreadable.
package wal

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
)

// Frame constants. Frozen.
const (
	// kindMore is the bit of a frame's kind byte that says more records of its group follow.
	kindMore = 0x80
	// HeaderSize is the size of a frame's crc and length fields.
	HeaderSize = 8
	// MaxRecord bounds a frame's length field, so a damaged length cannot make a reader allocate
	// gigabytes. It leaves room for a payload of MaxPayload plus the largest ID and topic.
	MaxRecord = MaxPayload + 1<<18
	// MaxPayload is the largest message payload a record holds.
	MaxPayload = 16 << 20
	// MaxName is the longest ID or topic, in bytes.
	MaxName = 1<<16 - 1
)

// A Kind says what a record's body holds. Frozen.
type Kind uint8

// Record kinds.
const (
	KindPut     Kind = 1
	KindCancel  Kind = 2
	KindAck     Kind = 3
	KindUpdate  Kind = 4
	KindAdvance Kind = 5
	// KindRelocate was added after the others: logs holding it cannot be read by versions of delayq
	// older than compaction.
	KindRelocate Kind = 6
	KindPause    Kind = 7
	KindPurge    Kind = 8
)

// The causes of a failed delivery an Update record gives. Frozen.
const (
	// FailureUnchanged: the record does not say (written before the field, or not about a failure).
	FailureUnchanged uint8 = 0
	FailureNacked    uint8 = 1
	FailureExpired   uint8 = 2
	// FailureNone: the message has no failure to report any more (requeued).
	FailureNone uint8 = 3
)

func (k Kind) String() string {
	switch k {
	case KindPut:
		return "put"
	case KindCancel:
		return "cancel"
	case KindAck:
		return "ack"
	case KindUpdate:
		return "update"
	case KindAdvance:
		return "advance"
	case KindRelocate:
		return "relocate"
	case KindPause:
		return "pause"
	case KindPurge:
		return "purge"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

const (
	flagThreaded = 1
	flagTopic    = 2 // Cancel: the topic follows the ID
	flagPaused   = 1 // Pause
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// A Record is one decoded log record. Only the fields of its Kind are set.
type Record struct {
	Kind Kind

	// More reports that the record is not the last of an atomic group (see the package doc).
	More bool

	// Threaded reports whether the record is part of a slot list (Put, Cancel, Purge).
	Threaded bool
	ListSlot int64 // Put, Cancel, Purge: the list's absolute slot
	Prev     Pos   // Put, Cancel, Purge: the previous record of the list

	DeliverAt int64  // Put, Update: Unix nanoseconds
	Attempt   uint32 // Put, Update
	Origin    Pos    // Put: the message's first Put, or 0 for this record
	ID        string // Put, Cancel
	// Topic is the message's topic (Put), the topic of the message cancelled (Cancel; empty in
	// records written before the field), its new topic (Update; empty: unchanged), or the topic
	// paused or purged (Pause, Purge).
	Topic   string
	Payload []byte // Put

	Target Pos   // Ack, Update
	Slot   int64 // Advance, Relocate

	Failure  uint8 // Update: FailureNacked, FailureExpired, FailureNone, or FailureUnchanged
	FailedAt int64 // Update with a Failure of FailureNacked or FailureExpired: Unix nanoseconds
	Paused   bool  // Pause: paused, or resumed
}

// Size returns the size of r's frame.
func (r *Record) Size() int { return HeaderSize + 1 + r.bodySize() }

func (r *Record) bodySize() int {
	switch r.Kind {
	case KindPut:
		return 37 + 2 + len(r.ID) + 2 + len(r.Topic) + len(r.Payload)
	case KindCancel:
		n := 17 + 2 + len(r.ID)
		if r.Topic != "" {
			n += 2 + len(r.Topic)
		}
		return n
	case KindAck:
		return 8
	case KindUpdate:
		n := 22 + len(r.Topic)
		if r.Failure != FailureUnchanged {
			n += 9
		}
		return n
	case KindAdvance, KindRelocate:
		return 8
	case KindPause:
		return 1 + 2 + len(r.Topic)
	case KindPurge:
		return 17 + 2 + len(r.Topic)
	}
	return 0
}

// Append appends r's frame to b. It returns an error for an unknown kind or a name or payload over
// its limit, and then b unchanged.
func (r *Record) Append(b []byte) ([]byte, error) {
	if len(r.ID) > MaxName || len(r.Topic) > MaxName {
		return b, fmt.Errorf("delayq: id or topic longer than %d bytes", MaxName)
	}
	if len(r.Payload) > MaxPayload {
		return b, fmt.Errorf("delayq: payload of %d bytes is over %d", len(r.Payload), MaxPayload)
	}
	n := r.bodySize()
	if n == 0 {
		return b, fmt.Errorf("delayq: cannot encode record of %v", r.Kind)
	}
	start := len(b)
	kind := byte(r.Kind)
	if r.More {
		kind |= kindMore
	}
	b = append(b, 0, 0, 0, 0, 0, 0, 0, 0, kind)
	binary.LittleEndian.PutUint32(b[start+4:], uint32(1+n))
	le := binary.LittleEndian
	switch r.Kind {
	case KindPut, KindCancel, KindPurge:
		var flags byte
		if r.Threaded || r.Kind == KindPurge {
			flags = flagThreaded
		}
		if r.Kind == KindCancel && r.Topic != "" {
			flags |= flagTopic
		}
		b = append(b, flags)
		b = le.AppendUint64(b, uint64(r.ListSlot))
		b = le.AppendUint64(b, uint64(r.Prev))
		switch r.Kind {
		case KindPut:
			b = le.AppendUint64(b, uint64(r.DeliverAt))
			b = le.AppendUint32(b, r.Attempt)
			b = le.AppendUint64(b, uint64(r.Origin))
			b = appendName(b, r.ID)
			b = appendName(b, r.Topic)
			b = append(b, r.Payload...)
		case KindCancel:
			b = appendName(b, r.ID)
			if r.Topic != "" {
				b = appendName(b, r.Topic)
			}
		case KindPurge:
			b = appendName(b, r.Topic)
		}
	case KindAck:
		b = le.AppendUint64(b, uint64(r.Target))
	case KindUpdate:
		b = le.AppendUint64(b, uint64(r.Target))
		b = le.AppendUint64(b, uint64(r.DeliverAt))
		b = le.AppendUint32(b, r.Attempt)
		b = appendName(b, r.Topic)
		if r.Failure != FailureUnchanged {
			b = append(b, r.Failure)
			b = le.AppendUint64(b, uint64(r.FailedAt))
		}
	case KindAdvance, KindRelocate:
		b = le.AppendUint64(b, uint64(r.Slot))
	case KindPause:
		var flags byte
		if r.Paused {
			flags = flagPaused
		}
		b = append(b, flags)
		b = appendName(b, r.Topic)
	}
	binary.LittleEndian.PutUint32(b[start:], crc32.Checksum(b[start+4:], castagnoli))
	return b, nil
}

func appendName(b []byte, s string) []byte {
	b = binary.LittleEndian.AppendUint16(b, uint16(len(s)))
	return append(b, s...)
}

// frameError describes why bytes are not a valid frame. truncated means the bytes ended before
// the frame did, which at the end of the last segment is a torn tail rather than corruption.
type frameError struct {
	msg       string
	truncated bool
}

func (e *frameError) Error() string { return e.msg }

// frameLen validates a frame header and returns the frame's total size.
func frameLen(hdr []byte) (int, error) {
	if len(hdr) < HeaderSize {
		return 0, &frameError{msg: "frame header cut short", truncated: true}
	}
	n := binary.LittleEndian.Uint32(hdr[4:])
	if n == 0 || n > MaxRecord {
		return 0, &frameError{msg: fmt.Sprintf("frame length %d out of range", n)}
	}
	return HeaderSize + int(n), nil
}

// Decode decodes the single frame that b holds exactly. Payload, ID and topic are copied, so b may
// be reused. Bad input gives an error, never a panic.
func Decode(b []byte) (Record, error) { return decodeFrame(b) }

func decodeFrame(b []byte) (Record, error) {
	n, err := frameLen(b)
	if err != nil {
		return Record{}, err
	}
	if len(b) < n {
		return Record{}, &frameError{msg: fmt.Sprintf("frame of %d bytes cut short at %d", n, len(b)), truncated: true}
	}
	if len(b) > n {
		return Record{}, &frameError{msg: fmt.Sprintf("%d bytes after a frame of %d", len(b)-n, n)}
	}
	if want, got := binary.LittleEndian.Uint32(b), crc32.Checksum(b[4:n], castagnoli); want != got {
		return Record{}, &frameError{msg: fmt.Sprintf("checksum mismatch: stored %08x, computed %08x", want, got)}
	}
	r, err := decodeBody(Kind(b[8]&^kindMore), b[9:n])
	r.More = b[8]&kindMore != 0
	return r, err
}

func decodeBody(k Kind, body []byte) (Record, error) {
	d := decoder{b: body}
	r := Record{Kind: k}
	switch k {
	case KindPut, KindCancel, KindPurge:
		flags := d.u8()
		if flags&^knownFlags(k) != 0 || k == KindPurge && flags&flagThreaded == 0 {
			return r, &frameError{msg: fmt.Sprintf("unknown flags %#x in %v record", flags, k)}
		}
		r.Threaded = flags&flagThreaded != 0
		r.ListSlot = int64(d.u64())
		r.Prev = Pos(d.u64())
		switch k {
		case KindPut:
			r.DeliverAt = int64(d.u64())
			r.Attempt = d.u32()
			r.Origin = Pos(d.u64())
			r.ID = d.name()
			r.Topic = d.name()
			if !d.bad {
				r.Payload = append([]byte(nil), d.b...)
				d.b = nil
			}
		case KindCancel:
			r.ID = d.name()
			if flags&flagTopic != 0 {
				r.Topic = d.name()
				if r.Topic == "" {
					return r, &frameError{msg: "cancel record with an empty topic"}
				}
			}
		case KindPurge:
			r.Topic = d.name()
		}
	case KindAck:
		r.Target = Pos(d.u64())
	case KindUpdate:
		r.Target = Pos(d.u64())
		r.DeliverAt = int64(d.u64())
		r.Attempt = d.u32()
		r.Topic = d.name()
		if !d.bad && len(d.b) > 0 {
			r.Failure = d.u8()
			r.FailedAt = int64(d.u64())
			if r.Failure == FailureUnchanged || r.Failure > FailureNone {
				return r, &frameError{msg: fmt.Sprintf("unknown failure %d in update record", r.Failure)}
			}
		}
	case KindAdvance, KindRelocate:
		r.Slot = int64(d.u64())
	case KindPause:
		flags := d.u8()
		if flags&^flagPaused != 0 {
			return r, &frameError{msg: fmt.Sprintf("unknown flags %#x in %v record", flags, k)}
		}
		r.Paused = flags&flagPaused != 0
		r.Topic = d.name()
	default:
		return r, &frameError{msg: fmt.Sprintf("unknown record kind %d", uint8(k))}
	}
	if d.bad {
		return r, &frameError{msg: fmt.Sprintf("%v record body of %d bytes is too short", k, len(body))}
	}
	if len(d.b) != 0 {
		return r, &frameError{msg: fmt.Sprintf("%d stray bytes after %v record", len(d.b), k)}
	}
	return r, nil
}

// knownFlags returns the flags a threaded kind's record may have.
func knownFlags(k Kind) byte {
	if k == KindCancel {
		return flagThreaded | flagTopic
	}
	return flagThreaded
}

// validBody reports whether body is a well-formed body of kind k, as decodeBody would find it,
// without allocating.
func validBody(k Kind, body []byte) bool {
	d := decoder{b: body}
	skipName := func() int {
		n := int(d.u16())
		d.take(n)
		return n
	}
	switch k {
	case KindPut, KindCancel, KindPurge:
		flags := d.u8()
		if flags&^knownFlags(k) != 0 || k == KindPurge && flags&flagThreaded == 0 {
			return false
		}
		d.take(16)
		switch k {
		case KindPut:
			d.take(20)
			skipName()
			skipName()
			d.b = d.b[:0:0]
		case KindCancel:
			skipName()
			if flags&flagTopic != 0 && skipName() == 0 {
				return false
			}
		case KindPurge:
			skipName()
		}
	case KindAck, KindAdvance, KindRelocate:
		d.take(8)
	case KindUpdate:
		d.take(20)
		skipName()
		if !d.bad && len(d.b) > 0 {
			if f := d.u8(); f == FailureUnchanged || f > FailureNone {
				return false
			}
			d.take(8)
		}
	case KindPause:
		if d.u8()&^flagPaused != 0 {
			return false
		}
		skipName()
	default:
		return false
	}
	return !d.bad && len(d.b) == 0
}

func (d *decoder) u16() uint16 {
	if p := d.take(2); p != nil {
		return binary.LittleEndian.Uint16(p)
	}
	return 0
}

// decoder reads fixed fields from b and remembers running out instead of panicking.
type decoder struct {
	b   []byte
	bad bool
}

func (d *decoder) take(n int) []byte {
	if d.bad || len(d.b) < n {
		d.bad = true
		return nil
	}
	p := d.b[:n]
	d.b = d.b[n:]
	return p
}

func (d *decoder) u8() byte {
	if p := d.take(1); p != nil {
		return p[0]
	}
	return 0
}

func (d *decoder) u32() uint32 {
	if p := d.take(4); p != nil {
		return binary.LittleEndian.Uint32(p)
	}
	return 0
}

func (d *decoder) u64() uint64 {
	if p := d.take(8); p != nil {
		return binary.LittleEndian.Uint64(p)
	}
	return 0
}

func (d *decoder) name() string {
	n := 0
	if p := d.take(2); p != nil {
		n = int(binary.LittleEndian.Uint16(p))
	}
	return string(d.take(n))
}
