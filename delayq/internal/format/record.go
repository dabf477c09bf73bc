package format

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/tockwheel/tock/delayq/internal/wal"
)

// # Records
//
// A record is one change to the queue's durable state, the body of one frame of the log; the
// frame's type byte is the record's Kind. All integers are little endian; a name is a uint16
// length and that many bytes.
//
// Put (kind 1): a message, its first write or a rewrite (a rolled or relocated copy).
//
//	0   1  flags      bit 0: threaded (listSlot and prev are meaningful); bit 1: headers follow
//	                  the topic; other bits zero
//	1   8  listSlot   absolute disk-wheel slot whose list this record is threaded into
//	9   8  prev       position of the previous record of the same list; 0 ends the list
//	17  8  deliverAt  Unix nanoseconds
//	25  4  attempt    deliveries that already failed (a rolled copy keeps the count)
//	29  8  origin     position of the message's first Put; 0 means this record is the first
//	37     id         name
//	..     topic      name
//	..  2  count      (flag bit 1 only) the number of headers, 1 to MaxHeaders
//	..     headers    (flag bit 1 only) count pairs of names, key then value, the keys not empty,
//	                  in increasing byte order and each once, so that a message's headers have
//	                  one encoding
//	..     payload    the rest of the body
//
// Cancel (kind 2): a cancel of every earlier Put with the ID in the same list (threaded), or of
// the loaded message with the ID (not threaded).
//
//	0   1  flags      bit 0: threaded, as in Put; bit 1: the topic follows the ID
//	1   8  listSlot, 9 8 prev   as in Put
//	17     id         name
//	..     topic      name, not empty (flag bit 1 only): the topic of the message cancelled, so that
//	                  the disk wheel's counts per topic need not read its Put
//
// Ack (kind 3): the message in memory whose first Put is at target (its origin) is done.
//
//	0   8  target
//
// Update (kind 4): the message in memory whose first Put is at target changed: it failed a
// delivery, or an operator made it due (deliver now, requeue). It is due again at deliverAt with
// attempt failures, and on topic when topic is not empty (a dead letter's topic, or, for a
// requeued dead letter, the topic of its Put again).
//
//	0   8  target, 8 8 deliverAt, 16 4 attempt
//	20     topic      name
//	..  1  failure    optional (absent in records written before it): why the last delivery
//	                  failed, FailureNacked, FailureExpired or FailureDeadLettered, or
//	                  FailureNone to forget it
//	..  8  failedAt   with failure: when, in Unix nanoseconds
//	..     reason     optional, with failure FailureNacked or FailureDeadLettered: name, the
//	                  reason the consumer's Nack gave (absent when it gave none)
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
//	0   1  flags      bit 0: paused; other bits zero
//	1      topic      name
//
// Purge (kind 8): a cancel of every earlier Put of topic in the same list, which it is threaded
// into like a Cancel.
//
//	0   1  flags      bit 0, always set (threaded); other bits zero
//	1   8  listSlot, 9 8 prev   as in Put
//	17     topic      name
//
// Limit (kind 9): the delivery limit of topic is set; all zero removes it.
//
//	0      topic        name
//	..  8  rate         float64 bits (IEEE 754): deliveries a second, 0 for none
//	..  4  burst        uint32
//	..  4  concurrency  uint32: messages leased at once, 0 for no bound
//
// Schedule, Fire, Unschedule (kinds 10 to 12): a schedule's changes; see schedule.go.
//
// The threaded fields come first in Put, Cancel and Purge so a list can be followed without
// decoding the rest. What each kind and field was added in is in versions.go; a body that holds
// a kind, flag or field this version does not know is malformed, never skipped.

// A Kind says what a record's body holds: the type byte of its frame. Frozen.
type Kind uint8

// Record kinds. Frozen: a kind's number is never reused.
const (
	KindPut      Kind = 1
	KindCancel   Kind = 2
	KindAck      Kind = 3
	KindUpdate   Kind = 4
	KindAdvance  Kind = 5
	KindRelocate Kind = 6
	KindPause    Kind = 7
	KindPurge    Kind = 8
	KindLimit    Kind = 9
	// The schedules' records: see schedule.go.
	KindSchedule   Kind = 10
	KindFire       Kind = 11
	KindUnschedule Kind = 12
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
	case KindLimit:
		return "limit"
	case KindSchedule:
		return "schedule"
	case KindFire:
		return "fire"
	case KindUnschedule:
		return "unschedule"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Threads reports whether records of kind k can be threaded into the disk wheel's lists.
func (k Kind) Threads() bool { return k == KindPut || k == KindCancel || k == KindPurge }

// The causes of a failed delivery an Update record gives. Frozen.
const (
	// FailureUnchanged: the record does not say (written before the field, or not about a failure).
	FailureUnchanged uint8 = 0
	FailureNacked    uint8 = 1
	FailureExpired   uint8 = 2
	// FailureNone: the message has no failure to report any more (requeued).
	FailureNone uint8 = 3
	// FailureDeadLettered: nacked by its consumer to the dead letters at once.
	FailureDeadLettered uint8 = 4
)

// Limits of what records hold.
const (
	// MaxPayload is the largest message payload a record holds, with the bytes of its headers'
	// keys and values.
	MaxPayload = 16 << 20
	// MaxName is the longest ID or topic, in bytes.
	MaxName = 1<<16 - 1
	// MaxHeaders is the most headers a Put holds.
	MaxHeaders = 1024
)

// The largest record, a Put of the largest names, headers and payload, fits in a frame.
const _ = uint(wal.MaxBody - (37 + 2 + MaxName + 2 + MaxName + 2 + 4*MaxHeaders + MaxPayload))

// Flag bits of the records that have flags. Frozen.
const (
	flagThreaded = 1 << 0 // Put, Cancel, Purge
	flagTopic    = 1 << 1 // Cancel: the topic follows the ID
	flagHeaders  = 1 << 1 // Put: headers follow the topic
	flagPaused   = 1 << 0 // Pause
)

// A Record is one decoded record: a plain value. Only the fields of its Kind are meaningful.
type Record struct {
	Kind Kind

	// Threaded reports whether the record is part of a slot list (Put, Cancel; always for Purge).
	Threaded bool
	ListSlot int64   // Put, Cancel, Purge: the list's absolute slot
	Prev     wal.Pos // Put, Cancel, Purge: the previous record of the list

	DeliverAt int64   // Put, Update: Unix nanoseconds
	Attempt   uint32  // Put, Update
	Origin    wal.Pos // Put: the message's first Put, or 0 for this record
	ID        string  // Put, Cancel
	// Topic is the message's topic (Put), the topic of the message cancelled (Cancel; empty in
	// records written before the field), its new topic (Update; empty: unchanged), or the topic
	// paused or purged (Pause, Purge).
	Topic   string
	Payload []byte // Put
	// Headers are a Put's message headers: nil or empty for none (decoded as nil).
	Headers map[string]string

	Target wal.Pos // Ack, Update
	Slot   int64   // Advance, Relocate

	Failure  uint8 // Update: FailureNacked, FailureExpired, FailureDeadLettered, FailureNone, or FailureUnchanged
	FailedAt int64 // Update with a Failure other than FailureUnchanged: Unix nanoseconds
	// Reason is the reason of an Update's failure (FailureNacked or FailureDeadLettered only).
	Reason string
	Paused bool // Pause: paused, or resumed

	// Limit: the topic's delivery limit (Topic names it).
	Rate        float64
	Burst       uint32
	Concurrency uint32

	// Schedule, Fire, Unschedule: a schedule's fields; a Schedule record holds its topic and
	// payload in Topic and Payload.
	ScheduleFields
}

// errMalformed is wrapped by the errors of bodies that are not a valid record, and of values that
// have no encoding.
var errMalformed = errors.New("delayq: malformed record")

// Size returns the size of r's body, or 0 for a kind with no body.
func (r *Record) Size() int {
	e := encoder{count: true}
	if r.encode(&e) != nil {
		return 0
	}
	return e.n
}

// Append appends r's body to b. It returns an error, and b unchanged, for a value DecodeRecord
// would not give back: an unknown kind, a name or payload over its limit, an unthreaded Purge, an
// unknown failure.
func (r *Record) Append(b []byte) ([]byte, error) {
	e := encoder{b: b}
	if err := r.encode(&e); err != nil {
		return b, err
	}
	return e.b, nil
}

func (r *Record) encode(e *encoder) error {
	if len(r.ID) > MaxName || len(r.Topic) > MaxName {
		return fmt.Errorf("%w: id or topic longer than %d bytes", errMalformed, MaxName)
	}
	if len(r.Payload) > MaxPayload {
		return fmt.Errorf("%w: payload of %d bytes is over %d", errMalformed, len(r.Payload), MaxPayload)
	}
	if len(r.Headers) > 0 {
		if r.Kind != KindPut {
			return fmt.Errorf("%w: headers in a %v record", errMalformed, r.Kind)
		}
		if err := checkHeaders(r.Headers, len(r.Payload)); err != nil {
			return err
		}
	}
	threaded := func(flags byte) {
		if r.Threaded {
			flags |= flagThreaded
		}
		e.u8(flags)
		e.i64(r.ListSlot)
		e.pos(r.Prev)
	}
	switch r.Kind {
	case KindPut:
		var flags byte
		if len(r.Headers) > 0 {
			flags |= flagHeaders
		}
		threaded(flags)
		e.i64(r.DeliverAt)
		e.u32(r.Attempt)
		e.pos(r.Origin)
		e.name(r.ID)
		e.name(r.Topic)
		if len(r.Headers) > 0 {
			e.headers(r.Headers)
		}
		e.rest(r.Payload)
	case KindCancel:
		var flags byte
		if r.Topic != "" {
			flags |= flagTopic
		}
		threaded(flags)
		e.name(r.ID)
		if r.Topic != "" {
			e.name(r.Topic)
		}
	case KindAck:
		e.pos(r.Target)
	case KindUpdate:
		if r.Failure > FailureDeadLettered {
			return fmt.Errorf("%w: update with failure %d", errMalformed, r.Failure)
		}
		if r.Reason != "" && r.Failure != FailureNacked && r.Failure != FailureDeadLettered {
			return fmt.Errorf("%w: update with a reason and failure %d", errMalformed, r.Failure)
		}
		e.pos(r.Target)
		e.i64(r.DeliverAt)
		e.u32(r.Attempt)
		e.name(r.Topic)
		if r.Failure != FailureUnchanged {
			e.u8(r.Failure)
			e.i64(r.FailedAt)
		}
		if r.Reason != "" {
			e.name(r.Reason)
		}
	case KindLimit:
		if math.IsNaN(r.Rate) || r.Rate < 0 {
			return fmt.Errorf("%w: limit of rate %v", errMalformed, r.Rate)
		}
		e.name(r.Topic)
		e.u64(math.Float64bits(r.Rate))
		e.u32(r.Burst)
		e.u32(r.Concurrency)
	case KindAdvance, KindRelocate:
		e.i64(r.Slot)
	case KindPause:
		var flags byte
		if r.Paused {
			flags = flagPaused
		}
		e.u8(flags)
		e.name(r.Topic)
	case KindPurge:
		if !r.Threaded {
			return fmt.Errorf("%w: purge not threaded into a list", errMalformed)
		}
		threaded(0)
		e.name(r.Topic)
	case KindSchedule, KindFire, KindUnschedule:
		return r.encodeSchedule(e)
	default:
		return fmt.Errorf("%w: cannot encode a record of %v", errMalformed, r.Kind)
	}
	return nil
}

// DecodeRecord decodes the body of a record of kind k. IDs, topics and payloads are copied, so
// body may be reused. Bad input gives an error, never a panic.
func DecodeRecord(k Kind, body []byte) (Record, error) {
	d := decoder{b: body, keep: true}
	return decode(k, &d)
}

// Verify checks that body is a valid record of kind typ, as DecodeRecord would find it, without
// allocating: the log's Verifier.
func Verify(typ byte, body []byte) error {
	d := decoder{b: body}
	_, err := decode(Kind(typ), &d)
	return err
}

func decode(k Kind, d *decoder) (Record, error) {
	r := Record{Kind: k}
	bad := func(format string, args ...any) (Record, error) {
		return r, fmt.Errorf("%w: %v record: %s", errMalformed, k, fmt.Sprintf(format, args...))
	}
	threaded := func(known byte) byte {
		flags := d.u8()
		r.Threaded = flags&flagThreaded != 0
		r.ListSlot = d.i64()
		r.Prev = d.pos()
		if flags&^known != 0 {
			d.bad = true
		}
		return flags
	}
	switch k {
	case KindPut:
		flags := threaded(flagThreaded | flagHeaders)
		if flags&^(flagThreaded|flagHeaders) != 0 {
			return bad("unknown flags %#x", flags)
		}
		r.DeliverAt = d.i64()
		r.Attempt = d.u32()
		r.Origin = d.pos()
		r.ID = d.name()
		r.Topic = d.name()
		size := 0
		if flags&flagHeaders != 0 {
			var why string
			if r.Headers, size, why = d.headers(); why != "" && !d.bad {
				return bad("%s", why)
			}
		}
		if n := d.left() + size; n > MaxPayload && !d.bad {
			return bad("payload and headers of %d bytes, over %d", n, MaxPayload)
		}
		r.Payload = d.rest()
	case KindCancel:
		flags := threaded(flagThreaded | flagTopic)
		if flags&^(flagThreaded|flagTopic) != 0 {
			return bad("unknown flags %#x", flags)
		}
		r.ID = d.name()
		if flags&flagTopic != 0 {
			at := d.off
			if d.nameLen() == 0 && !d.bad {
				return bad("empty topic")
			}
			if d.keep {
				d.off = at
				r.Topic = d.name()
			}
		}
	case KindAck:
		r.Target = d.pos()
	case KindUpdate:
		r.Target = d.pos()
		r.DeliverAt = d.i64()
		r.Attempt = d.u32()
		r.Topic = d.name()
		if d.more() {
			r.Failure = d.u8()
			r.FailedAt = d.i64()
			if r.Failure == FailureUnchanged || r.Failure > FailureDeadLettered {
				return bad("unknown failure %d", r.Failure)
			}
		}
		if d.more() {
			if r.Failure != FailureNacked && r.Failure != FailureDeadLettered {
				return bad("a reason with failure %d", r.Failure)
			}
			if d.keep {
				r.Reason = d.name()
				if r.Reason == "" && !d.bad {
					return bad("an empty reason")
				}
			} else if d.nameLen() == 0 && !d.bad {
				return bad("an empty reason")
			}
		}
	case KindLimit:
		r.Topic = d.name()
		r.Rate = math.Float64frombits(d.u64())
		r.Burst, r.Concurrency = d.u32(), d.u32()
		if math.IsNaN(r.Rate) || r.Rate < 0 {
			return bad("a limit of rate %v", r.Rate)
		}
	case KindAdvance, KindRelocate:
		r.Slot = d.i64()
	case KindPause:
		flags := d.u8()
		if flags&^flagPaused != 0 {
			return bad("unknown flags %#x", flags)
		}
		r.Paused = flags&flagPaused != 0
		r.Topic = d.name()
	case KindPurge:
		flags := threaded(flagThreaded)
		if flags != flagThreaded && !d.bad {
			return bad("flags %#x", flags)
		}
		r.Topic = d.name()
	case KindSchedule, KindFire, KindUnschedule:
		if err := r.decodeSchedule(d); err != nil {
			return bad("%v", err)
		}
	default:
		return r, fmt.Errorf("%w: unknown record kind %d", errMalformed, uint8(k))
	}
	if d.bad {
		return bad("body of %d bytes is too short", len(d.b))
	}
	if d.left() != 0 {
		return bad("%d stray bytes", d.left())
	}
	return r, nil
}

// Describe says what the body of a record of kind k seems to hold, read from bytes whose checksum
// may have failed, or "" when they do not look like a record.
func Describe(k Kind, body []byte) string {
	r, err := DecodeRecord(k, body)
	if err != nil {
		return ""
	}
	switch r.Kind {
	case KindPut:
		return fmt.Sprintf("put of %q on topic %q due %s (%d bytes of payload, %d headers)", r.ID, r.Topic, time.Unix(0, r.DeliverAt).UTC().Format(time.RFC3339Nano), len(r.Payload), len(r.Headers))
	case KindCancel:
		return fmt.Sprintf("cancel of %q", r.ID)
	case KindAck:
		return fmt.Sprintf("ack of the message first put at %v", r.Target)
	case KindUpdate:
		return fmt.Sprintf("retry of the message first put at %v", r.Target)
	case KindPause:
		return fmt.Sprintf("pause (%v) of topic %q", r.Paused, r.Topic)
	case KindPurge:
		return fmt.Sprintf("purge of topic %q from the list of slot %d", r.Topic, r.ListSlot)
	case KindLimit:
		return fmt.Sprintf("limit of topic %q", r.Topic)
	case KindSchedule, KindFire, KindUnschedule:
		return describeSchedule(&r)
	default:
		return fmt.Sprintf("%v of slot %d", r.Kind, r.Slot)
	}
}

// checkHeaders checks that a Put's headers, beside a payload of payload bytes, have an encoding.
func checkHeaders(h map[string]string, payload int) error {
	if len(h) > MaxHeaders {
		return fmt.Errorf("%w: %d headers, over %d", errMalformed, len(h), MaxHeaders)
	}
	size := payload
	for k, v := range h {
		if k == "" || len(k) > MaxName || len(v) > MaxName {
			return fmt.Errorf("%w: a header of key %d and value %d bytes", errMalformed, len(k), len(v))
		}
		size += len(k) + len(v)
	}
	if size > MaxPayload {
		return fmt.Errorf("%w: payload and headers of %d bytes, over %d", errMalformed, size, MaxPayload)
	}
	return nil
}
