package delayq

import (
	"bytes"
	"context"
	"errors"
	"fmt"
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

	// cancelMu serialises Cancel calls, so two cancels of one message cannot both report true while
	// one of them walks a slot list without holding mu. Lock order: cancelMu before mu.
	cancelMu sync.Mutex

	// mu guards the state below. It is held while records are appended to the log, so the order of
	// records in the log is the order of the state changes they describe. Lock order: mu before
	// the log's own lock. Nothing waits for the log's writer while holding mu: Append never waits
	// (waitRoom holds producers back before they take mu), and records not yet written are read
	// from memory.
	mu      sync.Mutex
	state   state
	err     error   // sticky: a background failure that makes the queue unusable
	ckptPos wal.Pos // replay position of the last checkpoint written
	stats   counters

	// ckptMu serialises checkpoints (the background ones and Close's). Lock order: ckptMu before mu.
	ckptMu sync.Mutex

	// afterCancelRead, when set by a test, runs after Cancel has read a slot list without mu.
	afterCancelRead func()
}

// state is the part of a Queue that checkpoints and recovery rebuild.
type state struct {
	slotNs int64 // disk-wheel slot length
	// loaded is the newest slot whose list has been moved to memory. Messages in slots <= loaded
	// are in memory (entries); later ones are in the disk wheel's lists.
	loaded int64
	// heads[s mod len(heads)] is the list of slot s for the one slot s in (loaded, loaded+len]
	// congruent to that index, if any.
	heads []listHead
	// slotDue[i] counts the messages in heads[i]'s list that are due in the list's own slot, less
	// those cancelled: the status forecast (see DueCounts). Messages the list only holds until
	// they roll are not counted until they are rolled into their own slot's list.
	slotDue []int64
	// pins[seg] counts the records in segment seg that are still needed: records of lists not yet
	// loaded, and the current records of loaded messages. A segment older than the checkpoint with
	// no pins is deleted.
	pins map[uint32]int64
	// diskPending counts the messages in lists not yet loaded: their Put records less the Cancel
	// records threaded into them, each of which cancels one of them (see takeListLocked).
	diskPending int64
	// userIDs maps the chosen ID of each message in the disk wheel to its slot, for Cancel.
	userIDs map[string]int64

	byOrigin map[wal.Pos]*entry // messages in memory by their first record
	byID     map[string]*entry  // messages in memory with chosen IDs (the latest, for duplicates)
	buckets  map[int64]*bucket  // timer buckets by millisecond
	topics   map[string]*topicQueue
	leased   int
	ready    int
	// leaseSeq numbers leases. It starts at a random number at Open, so a receipt from before a
	// restart is all but certain not to name a lease after it.
	leaseSeq uint64
}

// A listHead is the newest record of the disk-wheel list of one slot.
type listHead struct {
	slot int64   // absolute slot; meaningful only while head != 0
	head wal.Pos // 0: the list is empty
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
	}
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
// in order. It validates every message before writing any; an invalid one gives an error matching
// ErrInvalid and nothing is stored.
func (q *Queue) PutBatch(ctx context.Context, msgs []Message) ([]string, error) {
	for i := range msgs {
		if err := q.validate(&msgs[i]); err != nil {
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
	var end wal.Pos
	for i := range msgs {
		m := &msgs[i]
		at := now
		if m.DeliverAt.After(time.Unix(0, 0)) {
			at = m.DeliverAt.UnixNano()
		}
		id, e, err := q.putLocked(m.ID, m.Topic, m.Payload, at, 0, 0)
		if err != nil {
			q.failLocked(err)
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

// putLocked appends a Put record for a message due at deliverAt, into the disk wheel if its slot
// is not loaded yet and straight into memory otherwise. origin is the position of the message's
// first record for a rolled copy, else 0. It returns the ID and the end of the record.
func (q *Queue) putLocked(id, topic string, payload []byte, deliverAt int64, attempt uint32, origin wal.Pos) (string, wal.Pos, error) {
	s := &q.state
	rec := wal.Record{Kind: wal.KindPut, ID: id, Topic: topic, Payload: payload, DeliverAt: deliverAt, Attempt: attempt, Origin: origin}
	slot := s.slotOf(deliverAt)
	var h *listHead
	if slot > s.loaded {
		list := s.listSlotFor(slot)
		h = s.head(list)
		rec.Threaded, rec.ListSlot, rec.Prev = true, list, h.head
	}
	if id == "" {
		// The ID holds the record's own position, which is known before appending because
		// appends are serialised under mu.
		rec.ID = makeID(deliverAt, q.log.Reserve(rec.Size()+generatedIDLen))
	}
	pos, end, err := q.log.Append(&rec)
	if err != nil {
		return "", 0, err
	}
	s.pins[pos.Segment()]++
	if h != nil {
		h.slot, h.head = rec.ListSlot, pos
		s.diskPending++
		if rec.ListSlot == slot {
			s.slotDue[s.index(slot)]++
		}
		if !isGenerated(rec.ID, originOf(origin, pos)) {
			s.userIDs[rec.ID] = slot
		}
		return rec.ID, end, nil
	}
	// The caller may reuse its payload buffer once Put returns: keep a copy.
	e := &entry{pos: pos, origin: originOf(origin, pos), id: rec.ID, topic: topic, payload: bytes.Clone(payload), deliverAt: deliverAt, attempt: attempt}
	if !q.insertLocked(e) {
		q.unpinLocked(pos) // a rolled copy of a message in memory already
		return rec.ID, end, nil
	}
	q.armLocked(e)
	return rec.ID, end, nil
}

func originOf(origin, pos wal.Pos) wal.Pos {
	if origin != 0 {
		return origin
	}
	return pos
}

// Cancel cancels the pending message with the given ID and reports whether it did: false means no
// message with the ID is pending (never put, already acked, cancelled or dead, or the ID is
// malformed). A message already leased to a consumer is cancelled too; its receipt becomes stale.
// A true return is durable like Put. Cancel of a message in the disk wheel reads the records of
// its slot written after it; it keeps nothing in memory, however many messages are cancelled.
func (q *Queue) Cancel(ctx context.Context, id string) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	if err := q.waitRoom(); err != nil {
		return false, err
	}
	q.cancelMu.Lock()
	defer q.cancelMu.Unlock()
	for {
		q.mu.Lock()
		if err := q.usableLocked(); err != nil {
			q.mu.Unlock()
			return false, err
		}
		s := &q.state
		if e := q.lookupLocked(id); e != nil {
			_, end, err := q.log.Append(&wal.Record{Kind: wal.KindCancel, ID: id})
			if err != nil {
				q.failLocked(err)
				q.mu.Unlock()
				return false, err
			}
			q.removeLocked(e)
			q.stats.cancelled++
			q.mu.Unlock()
			return true, q.waitDurable(end)
		}
		slot, origin, ok := s.findSlot(id)
		if !ok || slot <= s.loaded {
			q.mu.Unlock()
			return false, nil
		}
		list := s.listSlotFor(slot)
		h := s.peek(list)
		if h.head == 0 {
			q.mu.Unlock()
			return false, nil
		}
		q.mu.Unlock()

		found, err := q.findInList(h.head, origin, id)
		if q.afterCancelRead != nil {
			q.afterCancelRead()
		}
		q.mu.Lock()
		if s.loaded >= list || s.peek(list) != h {
			// The slot was loaded, or records were added to it, while we read: look again. (A
			// read error can come from that too: a loaded list's segments may be deleted.)
			q.mu.Unlock()
			continue
		}
		if err != nil {
			q.mu.Unlock()
			return false, err
		}
		if !found {
			q.mu.Unlock()
			return false, nil
		}
		rec := wal.Record{Kind: wal.KindCancel, ID: id, Threaded: true, ListSlot: list, Prev: h.head}
		pos, end, err := q.log.Append(&rec)
		if err != nil {
			q.failLocked(err)
			q.mu.Unlock()
			return false, err
		}
		s.pins[pos.Segment()]++
		*s.head(list) = listHead{slot: list, head: pos}
		s.cancelDueLocked(id, list)
		s.diskPending--
		delete(s.userIDs, id)
		q.stats.cancelled++
		q.mu.Unlock()
		return true, q.waitDurable(end)
	}
}

// findSlot returns the disk-wheel slot of a message not loaded yet, and the position of its first
// record when the ID tells it (0 otherwise).
func (s *state) findSlot(id string) (slot int64, origin wal.Pos, ok bool) {
	if slot, ok := s.userIDs[id]; ok {
		return slot, 0, true
	}
	at, origin, ok := parseID(id)
	if !ok {
		return 0, 0, false
	}
	return s.slotOf(at), origin, true
}

// findInList reads the list from head backwards down to origin (to its end when origin is 0) and
// reports whether the newest record with the ID is a Put, that is, whether the message is pending.
func (q *Queue) findInList(head, origin wal.Pos, id string) (bool, error) {
	r := q.log.NewReader()
	for p := head; p != 0 && p >= origin; {
		rec, err := r.ReadAt(p)
		if err != nil {
			return false, fmt.Errorf("delayq: reading slot list: %w", err)
		}
		if rec.ID == id {
			return rec.Kind == wal.KindPut, nil
		}
		p = rec.Prev
	}
	return false, nil
}

// slotOf returns the disk-wheel slot of a time in Unix nanoseconds.
func (s *state) slotOf(ns int64) int64 {
	q := ns / s.slotNs
	if ns%s.slotNs < 0 {
		q--
	}
	return q
}

// slotStart returns the start of slot in Unix nanoseconds.
func (s *state) slotStart(slot int64) int64 { return slot * s.slotNs }

// listSlotFor returns the list a message of a slot after loaded goes into: its own slot within the
// horizon, otherwise the last slot within the horizon that shares its wheel index, where it will
// be rolled forward when loaded.
func (s *state) listSlotFor(slot int64) int64 {
	n := int64(len(s.heads))
	limit := s.loaded + n
	if slot <= limit {
		return slot
	}
	laps := (slot - limit + n - 1) / n
	return slot - laps*n
}

// index returns the wheel index of slot.
func (s *state) index(slot int64) int {
	n := int64(len(s.heads))
	return int(((slot % n) + n) % n)
}

// peek returns the head of list, which is empty if list's wheel index holds another lap's list.
func (s *state) peek(list int64) listHead {
	if h := s.heads[s.index(list)]; h.slot == list {
		return h
	}
	return listHead{}
}

// head returns the head of list's wheel index for updating, emptied first if it held another
// lap's list. It must only be called for a list in (loaded, loaded+horizon], where the index holds
// no other live list.
func (s *state) head(list int64) *listHead {
	i := s.index(list)
	h := &s.heads[i]
	if h.slot != list {
		*h = listHead{slot: list}
		s.slotDue[i] = 0
	}
	return h
}
