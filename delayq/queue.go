package delayq

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/tockwheel/tock"
	"github.com/tockwheel/tock/delayq/internal/wal"
)

// A Queue is a durable delayed-message queue kept in one directory. A Queue is safe for
// concurrent use by any number of goroutines.
type Queue struct {
	dir  string
	cfg  config
	log  *wal.Log
	lock *os.File // holds the directory's flock

	// wheel fires the in-memory timers: messages of the near window becoming due, and leases
	// running out.
	wheel *tock.Wheel

	closed chan struct{} // closed when Close begins
	bg     sync.WaitGroup

	// mu guards the state below. It is held while records are appended to the log, so the order of
	// records in the log is the order of the state changes they describe. Lock order: mu before
	// the log's own lock. Nothing waits for the log's writer while holding mu: Append never waits
	// (waitRoom holds producers back before they take mu), and records not yet written are read
	// from memory.
	mu   sync.Mutex
	disk diskWheel     // messages waiting on disk
	mem  deliveryIndex // messages in memory
	pins pins          // records still needed, per segment
	// moving holds, by origin, messages taken out of a list by an Advance or Relocate record whose
	// copies are owed (see apply.go).
	moving map[wal.Pos]*entry
	// leaseRand draws lease numbers: a ChaCha8 generator seeded from crypto/rand at Open.
	leaseRand *rand.ChaCha8
	acks      recentAcks
	err       error   // sticky: a background failure that makes the queue unusable
	ckptPos   wal.Pos // replay position of the last checkpoint written
	stats     counters

	// ckptMu serialises checkpoints (the background ones and Close's). Lock order: ckptMu before mu.
	ckptMu sync.Mutex

	// damageMu guards the damage found so far (see damage.go). Lock order: mu before damageMu.
	damageMu   sync.Mutex
	damageSeen map[string]struct{}
	corrupt    uint64

	// afterListRead, when set by a test (under mu), runs after lockList has read a list without mu.
	afterListRead func()
}

// Open opens the queue in dir, creating the directory if it does not exist, and recovers from
// whatever state a crash left it in: it truncates a torn tail of the log, reads the checkpoint,
// replays the log written since, and makes due every message that came due while the queue was
// closed (late, never lost). Damage it cannot repair gives an error matching ErrCorrupt that names
// the file and offset. Only one Queue may have a directory open at a time; Open returns ErrLocked
// otherwise.
func Open(dir string, opts ...Option) (*Queue, error) {
	cfg := defaultConfig()
	for _, o := range opts {
		o(&cfg)
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("delayq: %w", err)
	}
	lock, err := lockDir(filepath.Join(dir, "LOCK"))
	if err != nil {
		return nil, err
	}
	q := &Queue{
		dir:    dir,
		cfg:    cfg,
		lock:   lock,
		closed: make(chan struct{}),
		wheel:  tock.New(),
		pins:   make(pins),
		moving: make(map[wal.Pos]*entry),
	}
	var seed [32]byte
	crand.Read(seed[:])
	q.leaseRand = rand.NewChaCha8(seed)
	q.mem = newDeliveryIndex(q.wheel, q.fire)
	if err := q.recover(); err != nil {
		q.wheel.Stop()
		if q.log != nil {
			q.log.Close()
		}
		unlockDir(lock)
		return nil, err
	}
	q.bg.Add(2)
	go q.runLoader()
	go q.every(q.cfg.checkpoint, q.checkpoint)
	if q.cfg.compactLive > 0 {
		q.bg.Add(1)
		c := newCompactor()
		go q.every(q.cfg.checkpoint, func() error { return q.compactRound(c) })
	}
	return q, nil
}

// Close stops the queue: it wakes waiting Receive calls with ErrClosed, writes a final
// checkpoint, syncs and closes the log, and releases the directory. Messages leased and not yet
// acked are delivered again after the next Open. A second Close returns ErrClosed.
func (q *Queue) Close() error {
	q.mu.Lock()
	select {
	case <-q.closed:
		q.mu.Unlock()
		return ErrClosed
	default:
	}
	close(q.closed)
	q.mu.Unlock()
	q.bg.Wait()
	q.wheel.Stop()
	err := q.checkpoint()
	if errors.Is(err, ErrClosed) {
		err = nil
	}
	if cerr := q.log.Close(); err == nil {
		err = cerr
	}
	if uerr := unlockDir(q.lock); err == nil {
		err = uerr
	}
	return err
}

// usableLocked returns the error that stops new operations: Close or a background failure.
func (q *Queue) usableLocked() error {
	select {
	case <-q.closed:
		return ErrClosed
	default:
	}
	return q.err
}

// failLocked records a background failure; every later operation returns it.
func (q *Queue) failLocked(err error) {
	if q.err == nil {
		q.err = err
		q.cfg.logger.Error("delayq: queue stopped by a failure", "dir", q.dir, "err", err)
	}
}

// Put stores m and returns its ID (m.ID, or a generated one when it is empty). When Put returns
// without error the message is durable: its record is written and synced (unless NoSync). It is
// then delivered at or after m.DeliverAt, at least once, unless cancelled. ctx is checked only
// before the message is written: once written, Put waits for the sync.
func (q *Queue) Put(ctx context.Context, m Message) (string, error) {
	ids, err := q.PutBatch(ctx, []Message{m})
	if err != nil {
		return "", err
	}
	return ids[0], nil
}

// PutBatch stores msgs as Put does, in one critical section and one sync, and returns their IDs
// in order. It is all or nothing: it validates every message before writing any (an invalid one
// gives an error matching ErrInvalid and nothing is stored), and the batch's records are written to
// the log as one atomic group, so that after a crash either all of them are there or none. The
// records of a batch must fit in MaxBatchBytes.
func (q *Queue) PutBatch(ctx context.Context, msgs []Message) ([]string, error) {
	total := 0
	for i := range msgs {
		m := &msgs[i]
		err := q.validate(m)
		if err == nil {
			total += putSize(m)
			if total > MaxBatchBytes {
				err = fmt.Errorf("%w: batch of %d messages over %d bytes", ErrInvalid, len(msgs), MaxBatchBytes)
			}
		}
		if err != nil {
			if len(msgs) > 1 {
				err = fmt.Errorf("message %d: %w", i, err)
			}
			return nil, err
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := q.waitRoom(); err != nil {
		return nil, err
	}
	ids := make([]string, len(msgs))
	now := time.Now().UnixNano()
	q.mu.Lock()
	if err := q.usableLocked(); err != nil {
		q.mu.Unlock()
		return nil, err
	}
	// The group stays in one segment; each record's position is known before it is appended.
	q.log.Reserve(total)
	var end wal.Pos
	for i := range msgs {
		m := &msgs[i]
		at := now
		if m.DeliverAt.After(time.Unix(0, 0)) {
			at = m.DeliverAt.UnixNano()
		}
		id, e, err := q.putLocked(m.ID, m.Topic, m.Payload, at, 0, 0, i < len(msgs)-1)
		if err != nil {
			q.mu.Unlock()
			return nil, err
		}
		ids[i], end = id, e
	}
	q.stats.puts += uint64(len(msgs))
	q.mu.Unlock()
	if err := q.waitDurable(end); err != nil {
		return nil, err
	}
	return ids, nil
}

// MaxBatchBytes bounds the size of the records of one PutBatch, which are written as one group
// into one segment: a message takes its payload, ID and topic and about 50 bytes.
const MaxBatchBytes = 1 << 30

// putSize returns the size of the Put record of m.
func putSize(m *Message) int {
	idLen := len(m.ID)
	if idLen == 0 {
		idLen = generatedIDLen
	}
	r := wal.Record{Kind: wal.KindPut, Topic: m.Topic, Payload: m.Payload}
	return r.Size() + idLen
}

func (q *Queue) validate(m *Message) error {
	switch {
	case m.Topic == "":
		return fmt.Errorf("%w: empty topic", ErrInvalid)
	case len(m.Topic) > wal.MaxName:
		return fmt.Errorf("%w: topic of %d bytes", ErrInvalid, len(m.Topic))
	case len(q.cfg.deadLetterTopic(m.Topic)) > wal.MaxName:
		// A dead letter's topic is written in its Update record: one the log refuses would stop
		// the queue when the message fails its last delivery.
		return fmt.Errorf("%w: topic of %d bytes leaves no room for its dead-letter topic", ErrInvalid, len(m.Topic))
	case len(m.ID) > wal.MaxName:
		return fmt.Errorf("%w: id of %d bytes", ErrInvalid, len(m.ID))
	case len(m.Payload) > q.cfg.maxPayload:
		return fmt.Errorf("%w: payload of %d bytes over %d", ErrInvalid, len(m.Payload), q.cfg.maxPayload)
	case m.DeliverAt.After(maxDeliverAt):
		return fmt.Errorf("%w: DeliverAt %v after %v", ErrInvalid, m.DeliverAt, maxDeliverAt)
	}
	return nil
}

// maxDeliverAt is the latest DeliverAt Put accepts: times are kept as int64 Unix nanoseconds.
var maxDeliverAt = time.Unix(0, 1<<63-1).Add(-24 * time.Hour)

// waitRoom holds a producer back while the log's writer lags. It is called before taking mu: no
// wait for the writer may happen under mu.
func (q *Queue) waitRoom() error {
	if err := q.log.WaitRoom(); err != nil {
		if errors.Is(err, wal.ErrClosed) {
			return ErrClosed
		}
		return err
	}
	return nil
}

// waitDurable waits for the log to sync through end, or returns at once with NoSync.
func (q *Queue) waitDurable(end wal.Pos) error {
	if q.cfg.noSync {
		return nil
	}
	if err := q.log.WaitDurable(end); err != nil {
		if errors.Is(err, wal.ErrClosed) {
			return ErrClosed
		}
		return err
	}
	return nil
}

// putLocked appends and applies a Put record of a message due at deliverAt: threaded into the
// list of its slot when that slot is not loaded yet, else straight into memory. origin is the
// position of the message's first record for a copy (a roll or a relocation), else 0; more says
// that more records of the caller's atomic group follow. It returns the ID and the end of the
// record.
func (q *Queue) putLocked(id, topic string, payload []byte, deliverAt int64, attempt uint32, origin wal.Pos, more bool) (string, wal.Pos, error) {
	rec := wal.Record{Kind: wal.KindPut, ID: id, Topic: topic, Payload: payload, DeliverAt: deliverAt, Attempt: attempt, Origin: origin, More: more}
	w := &q.disk
	if slot := w.slotOf(deliverAt); slot > w.loaded {
		list := w.listFor(slot)
		rec.Threaded, rec.ListSlot, rec.Prev = true, list, w.peek(list).head
	} else if origin == 0 {
		// Into memory, where the message keeps the payload: the caller may reuse its buffer once
		// Put returns. (A copy's payload was read from the log.)
		rec.Payload = bytes.Clone(payload)
	}
	if id == "" {
		// The ID holds the record's own position, which is known before appending because
		// appends are serialised under mu.
		rec.ID = makeID(deliverAt, q.log.Reserve(rec.Size()+generatedIDLen))
	}
	end, err := q.commitLocked(&rec, nil)
	return rec.ID, end, err
}
