package delayq

import (
	"encoding/base32"
	"encoding/binary"

	"github.com/tockwheel/tock/delayq/internal/wal"
	"github.com/tockwheel/tock/queue"
)

// A Message is what producers put: a payload for a topic, to be delivered at DeliverAt. It is
// [queue.Message]; what the queue adds to its contract:
//
//   - ID: leave it empty to have Put generate one; generated IDs cost no memory while the message
//     waits on disk. An ID you choose costs about 60 bytes of memory per waiting message, because
//     Cancel must be able to find it. A chosen ID is unique among waiting messages (put and not yet
//     acked or cancelled; a dead letter keeps its ID), as idempotency keys are: a Put with the ID
//     of a waiting message stores nothing; it succeeds and returns the ID when the message is the
//     same (a retried Put: same Topic and Payload, and the same DeliverAt or both due already), and
//     fails with a [*DuplicateError] ([ErrDuplicate]) naming the waiting message's due time
//     otherwise. Chosen IDs are not checked against the generated IDs of waiting messages: choose
//     IDs that do not look like them (26 characters of 0-9 and a-v).
//   - Topic must not be empty, and must leave room for its dead-letter topic within 65535 bytes.
//   - DeliverAt: a message is due at the later of DeliverAt and the time of its Put, and that is
//     the DeliverAt its deliveries report, so that their lateness measures the queue. It is stored
//     as Unix nanoseconds, wall-clock time.
type Message = queue.Message

// A Delivery is a message leased to one consumer by Receive. Attempt counts deliveries of the
// message, starting at 1; a delivery cut short by a crash of the queue is not counted, so Attempt
// can repeat after a restart.
type Delivery = queue.Delivery

// Generated IDs are 26 characters of base32 (hex alphabet, lower case) of 16 bytes: the DeliverAt
// in Unix nanoseconds and the log position of the message's first record, both big endian, so IDs
// sort by DeliverAt. The position makes them unique within a queue directory and lets Cancel find
// the message without an index in memory.
var idEncoding = base32.NewEncoding(idAlphabet).WithPadding(base32.NoPadding)

const idAlphabet = "0123456789abcdefghijklmnopqrstuv"

const generatedIDLen = 26

func makeID(deliverAt int64, pos wal.Pos) string {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], uint64(deliverAt))
	binary.BigEndian.PutUint64(b[8:], uint64(pos))
	return idEncoding.EncodeToString(b[:])
}

// parseID returns the DeliverAt and first position a generated ID encodes; ok is false for an ID
// not of that form (such as one a producer chose). Only the canonical spelling is generated: 26
// characters of idEncoding's alphabet whose last 2 bits, which encode nothing, are zero.
//
// It decodes the 130 bits itself: every message loaded into memory and every Put applied asks
// (isGenerated), and the base32 package's Decode, with the encoding again to check the spelling,
// was a tenth of the time a slot of 100,000 took to load.
func parseID(id string) (deliverAt int64, pos wal.Pos, ok bool) {
	if len(id) != generatedIDLen {
		return 0, 0, false
	}
	var bad uint8
	digit := func(i int) uint64 {
		v := idDigits[id[i]]
		bad |= v
		return uint64(v & 31)
	}
	var at uint64
	for i := range 12 { // 60 bits of DeliverAt
		at = at<<5 | digit(i)
	}
	mid := digit(12) // its last 4 bits, and the position's first
	at = at<<4 | mid>>1
	p := mid & 1
	for i := 13; i < 25; i++ { // 60 bits of the position
		p = p<<5 | digit(i)
	}
	last := digit(25) // its last 3 bits, and 2 unused
	if bad&notDigit != 0 || last&3 != 0 {
		return 0, 0, false
	}
	return int64(at), wal.Pos(p<<3 | last>>2), true
}

// idDigits maps each byte to its value in idEncoding's alphabet, or notDigit.
var idDigits = func() (t [256]uint8) {
	for i := range t {
		t[i] = notDigit
	}
	for i, c := range idAlphabet {
		t[c] = uint8(i)
	}
	return t
}()

const notDigit = 1 << 7

// isGenerated reports whether id is the ID Put generated for a message first written at origin.
func isGenerated(id string, origin wal.Pos) bool {
	_, p, ok := parseID(id)
	return ok && p == origin
}
