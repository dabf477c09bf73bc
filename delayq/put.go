package delayq

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"time"

	"github.com/tockwheel/tock/delayq/internal/format"
	"github.com/tockwheel/tock/delayq/internal/wal"
	"github.com/tockwheel/tock/queue"
)

// Put stores m and returns its ID (m.ID, or a generated one when it is empty). When Put returns
// without error the message is durable: its record is written and synced (unless WithNoSync). It is
// then delivered at or after m.DeliverAt, at least once, unless cancelled. ctx is checked only
// before the message is written: once written, Put waits for the sync. An empty or overlong topic
// or ID, or a DeliverAt after [queue.MaxDeliverAt], is refused with [ErrInvalid]; a payload over
// the limit ([WithMaxPayload]) with [ErrTooLarge].
func (q *Queue) Put(ctx context.Context, m Message) (string, error) {
	ids, err := q.PutBatch(ctx, []Message{m})
	if err != nil {
		return "", err
	}
	return ids[0], nil
}

// PutBatch stores msgs as Put does, in one critical section and one sync, and returns their IDs
// in order. It is all or nothing: it validates every message before writing any (an invalid one
// gives an error matching [ErrInvalid] or [ErrTooLarge] and nothing is stored; so does a chosen ID
// that repeats within the batch), a duplicate ID fails the whole batch (an error matching
// [ErrDuplicate], see [Message]), and the batch's records are written to the log as one atomic
// group, so that after a crash either all of them are there or none. The records of a batch must
// fit in [MaxBatchBytes] ([ErrTooLarge] otherwise). Messages of the batch that repeat a waiting
// message (a retried Put) are not stored again; their IDs are returned all the same.
func (q *Queue) PutBatch(ctx context.Context, msgs []Message) ([]string, error) {
	total := 0
	for i := range msgs {
		m := &msgs[i]
		err := q.validate(m)
		if err == nil && m.Replace && m.ID != "" && len(msgs) > 1 {
			err = fmt.Errorf("id %q: a batch does not replace; put the message alone: %w", m.ID, ErrInvalid)
		}
		if err == nil {
			total += putSize(m)
			if total > MaxBatchBytes {
				err = fmt.Errorf("batch of %d messages over %d bytes: %w", len(msgs), MaxBatchBytes, ErrTooLarge)
			}
		}
		if err != nil {
			return nil, batchErr(msgs, i, err)
		}
	}
	if err := q.waitRoom(ctx); err != nil {
		return nil, err
	}
	var r *recordReader // only for chosen IDs already pending: most Puts read nothing
	var read map[string]readRecord
	for try := 0; ; try++ {
		now := time.Now().UnixNano()
		q.mu.Lock()
		if err := q.usableLocked(); err != nil {
			q.mu.Unlock()
			return nil, err
		}
		repeats, cancel, need, err := q.checkIDsLocked(msgs, now, read)
		if err != nil {
			q.mu.Unlock()
			return nil, err
		}
		if len(need) > 0 && r == nil {
			r = newRecordReader(q.log)
		}
		if len(need) > 0 && try < listTries {
			// Records of pending messages with the batch's IDs, to compare: read without mu.
			q.mu.Unlock()
			read = q.readRecords(r, need)
			continue
		}
		if len(need) > 0 {
			read = q.readRecords(r, need) // under mu at last; from memory or the page cache
			if repeats, cancel, _, err = q.checkIDsLocked(msgs, now, read); err != nil {
				q.mu.Unlock()
				return nil, err
			}
		}
		var ids []string
		var end wal.Pos
		q.awaited = true // waitDurable below commits the records
		if cancel != nil {
			ids, end, err = q.replaceLocked(&msgs[0], cancel, now)
		} else {
			ids, end, err = q.putBatchLocked(msgs, repeats, now)
		}
		q.awaited = false
		q.mu.Unlock()
		if err != nil {
			return nil, err
		}
		if err := q.waitDurable(end); err != nil {
			return nil, err
		}
		return ids, nil
	}
}

// batchErr says which message of a batch err is about.
func batchErr(msgs []Message, i int, err error) error {
	if len(msgs) > 1 {
		return fmt.Errorf("delayq: message %d: %w", i, err)
	}
	return fmt.Errorf("delayq: %w", err)
}

// maxDeliverAtNs is queue.MaxDeliverAt in Unix nanoseconds.
var maxDeliverAtNs = queue.MaxDeliverAt().UnixNano()

// putBatchLocked appends the messages of msgs that are not repeats, as one atomic group, and
// returns the IDs of all and the end of what must be durable before PutBatch returns.
func (q *Queue) putBatchLocked(msgs []Message, repeats []bool, now int64) ([]string, wal.Pos, error) {
	ids := make([]string, len(msgs))
	total, last := 0, -1
	for i := range msgs {
		if repeats != nil && repeats[i] {
			ids[i] = msgs[i].ID
		} else {
			total += putSize(&msgs[i])
			last = i
		}
	}
	if last < 0 {
		// Every message repeats one put before, whose record may not be durable yet.
		return ids, q.log.End(), nil
	}
	if last > 0 {
		// The group stays in one segment; each record's position is known before it is appended.
		q.log.Reserve(total)
	}
	var end wal.Pos
	for i := range msgs {
		if repeats != nil && repeats[i] {
			continue
		}
		m := &msgs[i]
		id, e, err := q.putLocked(m.ID, m.Topic, m.Payload, m.Headers, dueAt(m, now), 0, 0, i < last)
		if err != nil {
			return nil, 0, err
		}
		ids[i], end = id, e
		q.stats.puts++
		q.mem.topics.get(m.Topic).puts++
	}
	return ids, end, nil
}

// dueAt returns when m is due if put at now (Unix ns): its DeliverAt, or now if that is earlier.
func dueAt(m *Message, now int64) int64 {
	if m.DeliverAt.After(time.Unix(0, now)) {
		return m.DeliverAt.UnixNano()
	}
	return now
}

// A readRecord is the Put record of the pending message with a chosen ID, read for comparison.
type readRecord struct {
	loc idLoc
	rec *format.Record // nil: not readable (damaged, or not that message's record)
}

// checkIDsLocked checks the chosen IDs of msgs against the pending messages and each other. It
// returns which messages repeat a pending one (a retried Put: stored already), the Cancel of the
// waiting message a message with Replace set replaces (only a batch of one replaces), the IDs
// whose records must be read to tell (those waiting in the disk wheel and not in read), or a
// *DuplicateError.
func (q *Queue) checkIDsLocked(msgs []Message, now int64, read map[string]readRecord) (repeats []bool, cancel *format.Record, need map[string]idLoc, err error) {
	var first map[string]int // the first message of the batch with each chosen ID
	for i := range msgs {
		m := &msgs[i]
		if m.ID == "" {
			continue
		}
		if repeats == nil {
			repeats = make([]bool, len(msgs))
		}
		if j, ok := first[m.ID]; ok {
			return nil, nil, nil, batchErr(msgs, i, fmt.Errorf("id %q repeats that of message %d: %w", m.ID, j, ErrInvalid))
		}
		if first == nil {
			first = make(map[string]int)
		}
		first[m.ID] = i
		if e := q.mem.byID[m.ID]; e != nil && m.Replace {
			if e.st == leased {
				return nil, nil, nil, batchErr(msgs, i, &DuplicateError{ID: m.ID, DeliverAt: time.Unix(0, e.deliverAt), Leased: true})
			}
			cancel = &format.Record{Kind: format.KindCancel, ID: m.ID}
			continue
		} else if e != nil {
			delivered := e.attempt > 0 || e.st != waiting || e.dead()
			if !sameMessage(e.home.name, e.payload, e.deliverAt, delivered, m, now) {
				return nil, nil, nil, batchErr(msgs, i, &DuplicateError{ID: m.ID, DeliverAt: time.Unix(0, e.deliverAt)})
			}
			repeats[i] = true
			continue
		}
		loc, ok := q.disk.ids[m.ID]
		if !ok || loc.slot <= q.disk.loaded {
			continue // not pending (an entry left by damage is not either)
		}
		rr, ok := read[m.ID]
		if !ok || rr.loc != loc {
			if need == nil {
				need = make(map[string]idLoc)
			}
			need[m.ID] = loc
			continue
		}
		if rr.rec == nil {
			continue // lost to damage: not pending after all
		}
		if m.Replace {
			cancel = &format.Record{Kind: format.KindCancel, ID: m.ID, Topic: rr.rec.Topic, Threaded: true, ListSlot: loc.slot}
			continue
		}
		if !sameMessage(rr.rec.Topic, rr.rec.Payload, rr.rec.DeliverAt, false, m, now) {
			return nil, nil, nil, batchErr(msgs, i, &DuplicateError{ID: m.ID, DeliverAt: time.Unix(0, rr.rec.DeliverAt)})
		}
		repeats[i] = true
	}
	return repeats, cancel, need, nil
}

// replaceLocked puts m in place of the waiting message with its ID, which cancel cancels: the
// Cancel and the Put as one atomic group. It returns m's ID and the end of the group.
func (q *Queue) replaceLocked(m *Message, cancel *format.Record, now int64) ([]string, wal.Pos, error) {
	put := format.Record{Kind: format.KindPut, ID: m.ID, Topic: m.Topic, Payload: bytes.Clone(m.Payload), DeliverAt: dueAt(m, now)}
	if len(m.Headers) > 0 {
		put.Headers = maps.Clone(m.Headers)
	}
	end, err := q.commitAllLocked([]format.Record{*cancel, put})
	if err != nil {
		return nil, 0, err
	}
	q.stats.puts++
	q.mem.topics.get(m.Topic).puts++
	return []string{m.ID}, end, nil
}

// readRecords reads the Put records of the pending messages with the IDs in need.
func (q *Queue) readRecords(r *recordReader, need map[string]idLoc) map[string]readRecord {
	out := make(map[string]readRecord, len(need))
	for id, loc := range need {
		rr := readRecord{loc: loc}
		if loc.pos != 0 {
			if rec, err := r.ReadAt(loc.pos); err == nil && rec.Kind == format.KindPut && rec.ID == id {
				rr.rec = &rec
			}
		}
		out[id] = rr
	}
	return out
}

// sameMessage reports whether m, put at now, repeats a pending message of the given topic,
// payload and due time (delivered: it has been due and delivered already): the same topic and
// payload, and the same due time, or both due by now.
func sameMessage(topic string, payload []byte, due int64, delivered bool, m *Message, now int64) bool {
	if topic != m.Topic || !bytes.Equal(payload, m.Payload) {
		return false
	}
	want := dueAt(m, now)
	if delivered || due <= now {
		return want == now
	}
	return due == want
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
	r := format.Record{Kind: format.KindPut, Topic: m.Topic, Payload: m.Payload, Headers: m.Headers}
	return frameSize(&r) + idLen
}

func (q *Queue) validate(m *Message) error {
	switch {
	case m.Topic == "":
		return fmt.Errorf("empty topic: %w", ErrInvalid)
	case len(m.Topic) > format.MaxName:
		return fmt.Errorf("topic of %d bytes: %w", len(m.Topic), ErrInvalid)
	case len(q.cfg.deadLetterTopic(m.Topic)) > format.MaxName:
		// A dead letter's topic is written in its Update record: one the log refuses would stop
		// the queue when the message fails its last delivery.
		return fmt.Errorf("topic of %d bytes leaves no room for its dead-letter topic: %w", len(m.Topic), ErrInvalid)
	case len(m.ID) > format.MaxName:
		return fmt.Errorf("id of %d bytes: %w", len(m.ID), ErrInvalid)
	case len(m.Payload) > q.cfg.maxPayload:
		return fmt.Errorf("payload of %d bytes over %d: %w", len(m.Payload), q.cfg.maxPayload, ErrTooLarge)
	}
	if len(m.Headers) > 0 {
		if err := queue.CheckHeaders(m.Headers); err != nil {
			return err
		}
		if n := len(m.Payload) + queue.HeadersSize(m.Headers); n > q.cfg.maxPayload {
			return fmt.Errorf("payload and headers of %d bytes over %d: %w", n, q.cfg.maxPayload, ErrTooLarge)
		}
	}
	_, err := queue.DueAt(m.DeliverAt, time.Time{})
	return err
}

// putLocked appends and applies a Put record of a message due at deliverAt: threaded into the
// list of its slot when that slot is not loaded yet, else straight into memory. origin is the
// position of the message's first record for a copy (a roll or a relocation), else 0; more says
// that more records of the caller's atomic group follow. It returns the ID and the end of the
// record.
func (q *Queue) putLocked(id, topic string, payload []byte, headers map[string]string, deliverAt int64, attempt uint32, origin wal.Pos, more bool) (string, wal.Pos, error) {
	if len(headers) == 0 {
		headers = nil
	}
	rec := format.Record{Kind: format.KindPut, ID: id, Topic: topic, Payload: payload, Headers: headers, DeliverAt: deliverAt, Attempt: attempt, Origin: origin}
	w := &q.disk
	if slot := w.slotOf(deliverAt); slot > w.loaded {
		list := w.listFor(slot)
		rec.Threaded, rec.ListSlot, rec.Prev = true, list, w.peek(list).head
	} else if origin == 0 {
		// Into memory, where the message keeps the payload and headers: the caller may reuse its
		// buffer and change its map once Put returns. (A copy's were read from the log.)
		rec.Payload = bytes.Clone(payload)
		rec.Headers = maps.Clone(headers)
	}
	if id == "" {
		// The ID holds the record's own position, which is known before appending because
		// appends are serialised under mu.
		rec.ID = makeID(deliverAt, q.log.Reserve(frameSize(&rec)+generatedIDLen))
	}
	end, err := q.commitGroupLocked(&rec, more, nil)
	return rec.ID, end, err
}
