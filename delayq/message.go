package delayq

import (
	"encoding/base32"
	"encoding/binary"
	"fmt"
	"strconv"
	"time"

	"github.com/tockwheel/tock/delayq/internal/wal"
)

// A Message is what producers put: a payload for a topic, to be delivered at DeliverAt.
type Message struct {
	// ID names the message for Cancel. Leave it empty to have Put generate one; generated IDs cost
	// no memory while the message waits on disk. An ID you choose costs about 60 bytes of memory
	// per pending message, because Cancel must be able to find it.
	//
	// A chosen ID is unique among pending messages (put and not yet acked, cancelled or dead), as
	// idempotency keys are: a Put with the ID of a pending message stores nothing; it succeeds and
	// returns the ID when the message is the same (a retried Put: same Topic and Payload, and the
	// same DeliverAt or both due already), and fails with a [*DuplicateError] ([ErrDuplicate]) naming
	// the pending message's due time otherwise. Once the message is acked, cancelled or dead, the
	// ID may be used again. Chosen IDs are not checked against the generated IDs of pending
	// messages: choose IDs that do not look like them (26 characters of 0-9 and a-v).
	ID string
	// Topic is the name consumers Receive by. It must not be empty.
	Topic string
	// Payload is delivered as is. It may be empty.
	Payload []byte
	// DeliverAt is when the message becomes due. A time before the Put (the zero time included)
	// means the moment of the Put: a message is due at the later of DeliverAt and the time of its
	// Put, and that is the DeliverAt its deliveries report, so that their lateness measures the
	// queue. The latest DeliverAt accepted is the start of 2262 (UTC); a later one is refused with
	// [ErrInvalid]. Its monotonic clock reading, if any, is ignored: it is stored as wall-clock time.
	DeliverAt time.Time
}

// A Delivery is a message leased to one consumer by Receive.
type Delivery struct {
	Message
	// Receipt names this lease for Ack and Nack. It is opaque and valid until the lease ends.
	Receipt string
	// Attempt counts deliveries of the message, starting at 1. A delivery cut short by a crash of
	// the queue is not counted, so Attempt can repeat after a restart.
	Attempt int
}

// Generated IDs are 26 characters of base32 (hex alphabet, lower case) of 16 bytes: the DeliverAt
// in Unix nanoseconds and the log position of the message's first record, both big endian, so IDs
// sort by DeliverAt. The position makes them unique within a queue directory and lets Cancel find
// the message without an index in memory.
var idEncoding = base32.NewEncoding("0123456789abcdefghijklmnopqrstuv").WithPadding(base32.NoPadding)

const generatedIDLen = 26

func makeID(deliverAt int64, pos wal.Pos) string {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], uint64(deliverAt))
	binary.BigEndian.PutUint64(b[8:], uint64(pos))
	return idEncoding.EncodeToString(b[:])
}

// parseID returns the DeliverAt and first position a generated ID encodes; ok is false for an ID
// not of that form (such as one a producer chose).
func parseID(id string) (deliverAt int64, pos wal.Pos, ok bool) {
	if len(id) != generatedIDLen {
		return 0, 0, false
	}
	var b [16]byte
	n, err := idEncoding.Decode(b[:], []byte(id))
	if err != nil || n != 16 || idEncoding.EncodeToString(b[:]) != id {
		return 0, 0, false
	}
	return int64(binary.BigEndian.Uint64(b[:8])), wal.Pos(binary.BigEndian.Uint64(b[8:])), true
}

// isGenerated reports whether id is the ID Put generated for a message first written at origin.
func isGenerated(id string, origin wal.Pos) bool {
	_, p, ok := parseID(id)
	return ok && p == origin
}

// A receipt is the position of the message's first record and its lease number, as 32 hex digits.
// Lease numbers are 64 random bits (a ChaCha8 stream seeded from crypto/rand at Open), so knowing a
// message's ID, and receipts of other leases, tells nothing of the receipt of its lease: a forged
// receipt is refused as unknown, with the same error whether or not the message exists.
func makeReceipt(pos wal.Pos, lease uint64) string {
	return fmt.Sprintf("%016x%016x", uint64(pos), lease)
}

func parseReceipt(s string) (wal.Pos, uint64, bool) {
	if len(s) != 32 {
		return 0, 0, false
	}
	p, err1 := strconv.ParseUint(s[:16], 16, 64)
	l, err2 := strconv.ParseUint(s[16:], 16, 64)
	if err1 != nil || err2 != nil {
		return 0, 0, false
	}
	return wal.Pos(p), l, true
}
