package delayq

import (
	"fmt"
	"slices"
	"time"

	"github.com/tockwheel/tock/delayq/internal/wal"
)

// The disk wheel is state.heads: one list head per slot of the horizon. A list is threaded
// backwards through the log (each record holds the position of the list's previous record), so the
// wheel costs 16 bytes per slot however many messages wait in it, and 8 more for state.slotDue, the
// count of messages due in each slot that DueCounts reports. The loader moves each slot's
// list into memory a preload ahead of the slot's start; from then on the slot's messages wait on
// the in-memory wheel, which fires them with millisecond precision.
//
// Loading slot a, as one step under mu:
//  1. read the list (most of it before taking mu, so Puts are not held up while it is read);
//  2. detach it (the head is cleared and loaded becomes a) and append an Advance record;
//  3. drop cancelled Puts and duplicate rolled copies; roll Puts due beyond a (they were put
//     more than a horizon ahead) by appending a copy threaded into a later list;
//  4. insert the rest into memory.
//
// Recovery replays an Advance record by doing steps 1 to 4 again from the same list, except that
// the rolled copies are already in the log right after the Advance record; copies lost to a crash
// are appended at the end of recovery, and duplicates are dropped when their list is loaded.

// runLoader loads each slot a preload ahead of its start, until Close.
func (q *Queue) runLoader() {
	defer q.bg.Done()
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		q.mu.Lock()
		next := q.state.loaded + 1
		at := q.state.slotStart(next) - int64(q.cfg.preload)
		q.mu.Unlock()
		if wait := time.Duration(at - time.Now().UnixNano()); wait > 0 {
			t.Reset(wait)
			select {
			case <-t.C:
			case <-q.closed:
				return
			}
			continue
		}
		if err := q.load(next); err != nil {
			q.mu.Lock()
			q.failLocked(err)
			q.mu.Unlock()
			return
		}
		select {
		case <-q.closed:
			return
		default:
		}
	}
}

// A listRecord is a record read from a slot list, with its position.
type listRecord struct {
	pos wal.Pos
	rec wal.Record
}

// readList reads the list from head backwards, stopping before stop (the head of a part already
// read) or at its end. On error it also returns the records read before it.
func (q *Queue) readList(r *wal.Reader, head, stop wal.Pos) ([]listRecord, error) {
	var out []listRecord
	for p := head; p != 0 && p != stop; {
		rec, err := r.ReadAt(p)
		if err != nil {
			return out, fmt.Errorf("delayq: reading slot list at %v: %w", p, err)
		}
		if rec.Kind != wal.KindPut && rec.Kind != wal.KindCancel || !rec.Threaded {
			return out, fmt.Errorf("%w: %v record at %v in a slot list", ErrCorrupt, rec.Kind, p)
		}
		if rec.Prev >= p {
			return out, fmt.Errorf("%w: slot list goes forward at %v", ErrCorrupt, p)
		}
		out = append(out, listRecord{p, rec})
		p = rec.Prev
	}
	return out, nil
}

// load moves slot a (which must be loaded+1) from the disk wheel into memory.
func (q *Queue) load(a int64) error {
	r := q.log.NewReader()
	// Read what the list holds now without mu; then catch up on what was added meanwhile.
	var parts [][]listRecord // oldest part first; each part newest record first
	var seen wal.Pos
	for try := 0; ; try++ {
		q.mu.Lock()
		if q.state.loaded != a-1 {
			q.mu.Unlock()
			return fmt.Errorf("delayq: internal error: loading slot %d after %d", a, q.state.loaded)
		}
		h := q.state.peek(a)
		if h.head == seen || try == 3 {
			break // keep mu
		}
		q.mu.Unlock()
		part, err := q.readList(r, h.head, seen)
		if err != nil {
			return err
		}
		parts = append(parts, part)
		seen = h.head
	}
	defer q.mu.Unlock()
	if h := q.state.peek(a).head; h != seen {
		// Records added since the last read.
		part, err := q.readList(r, h, seen)
		if err != nil {
			return err
		}
		parts = append(parts, part)
	}
	var recs []listRecord
	for _, p := range slices.Backward(parts) {
		recs = append(recs, p...)
	}
	if err := q.advanceLocked(a, true); err != nil {
		return err
	}
	rolls, err := q.applyListLocked(a, recs, true)
	if err != nil {
		return err
	}
	for _, e := range rolls {
		if _, _, err := q.putLocked(e.id, e.topic, e.payload, e.deliverAt, e.attempt, e.origin); err != nil {
			return err
		}
	}
	return nil
}

// advanceLocked detaches slot a's list and marks a loaded; when write is set and the list was not
// empty, it appends the Advance record that replays this.
func (q *Queue) advanceLocked(a int64, write bool) error {
	s := &q.state
	h := s.head(a)
	nonEmpty := h.head != 0
	*h = listHead{}
	s.slotDue[s.index(a)] = 0
	s.loaded = a
	if write && nonEmpty {
		if _, _, err := q.log.Append(&wal.Record{Kind: wal.KindAdvance, Slot: a}); err != nil {
			return err
		}
	}
	return nil
}

// applyListLocked takes the records of slot a's list, newest first, out of the disk wheel: it
// drops cancelled Puts and duplicate copies, inserts the messages due in slot a (arming them when
// arm is set), and returns the messages due later, which must be rolled.
func (q *Queue) applyListLocked(a int64, recs []listRecord, arm bool) (rolls []*entry, err error) {
	s := &q.state
	for _, e := range q.takeListLocked(recs) {
		if slot, ok := s.userIDs[e.id]; ok && slot == s.slotOf(e.deliverAt) {
			delete(s.userIDs, e.id)
		}
		if s.slotOf(e.deliverAt) > a {
			rolls = append(rolls, e)
			continue
		}
		if !q.insertLocked(e) {
			continue
		}
		s.pins[e.pos.Segment()]++
		if arm {
			q.armLocked(e)
		}
	}
	return rolls, nil
}

// takeListLocked takes the records of a list, recs (newest first, the whole list), out of the disk
// wheel: it unpins them, counts their messages off diskPending, and returns the messages still
// pending in the list, newest first. A Put cancelled by a later Cancel of its ID, and all but the
// newest copy of a message, are left out.
//
// A Cancel took its message off diskPending when it was written, so the first Put each Cancel
// meets is not counted off again; a Cancel drops every older Put with its ID (a chosen ID can name
// several messages of one list), and those after the first are counted off here.
func (q *Queue) takeListLocked(recs []listRecord) []*entry {
	s := &q.state
	cancelled := make(map[string]int) // Cancel records not yet matched with a Put, by ID
	// Rolled copies of one message can be in one list twice (a roll repeated after a crash);
	// copies are rare, so only they are remembered.
	copies := make(map[wal.Pos]bool)
	var out []*entry
	for _, lr := range recs {
		rec := &lr.rec
		q.unpinLocked(lr.pos)
		if rec.Kind == wal.KindCancel {
			cancelled[rec.ID]++
			continue
		}
		if n, ok := cancelled[rec.ID]; ok && n > 0 {
			cancelled[rec.ID] = n - 1
		} else {
			s.diskPending--
		}
		origin := originOf(rec.Origin, lr.pos)
		if _, ok := cancelled[rec.ID]; ok || copies[origin] {
			continue
		}
		if rec.Origin != 0 {
			copies[origin] = true
		}
		out = append(out, &entry{pos: lr.pos, origin: origin, id: rec.ID, topic: rec.Topic, payload: rec.Payload, deliverAt: rec.DeliverAt, attempt: rec.Attempt})
	}
	return out
}

// countDue counts the messages of list's records, newest first, that are due in list's own slot
// and not cancelled, as putLocked and Cancel maintain state.slotDue: a Cancel record takes off the
// newest older Put with its ID if that one is due in list's slot. Recovery uses it to rebuild the
// counts of a checkpoint that lacks them; tests check the counts against it.
func (s *state) countDue(list int64, recs []listRecord) int64 {
	var n int64
	cancels := make(map[string]bool) // IDs of Cancel records not yet matched with their Put
	for _, lr := range recs {
		rec := &lr.rec
		if rec.Kind == wal.KindCancel {
			cancels[rec.ID] = true
			continue
		}
		cancelled := cancels[rec.ID]
		delete(cancels, rec.ID)
		if !cancelled && s.slotOf(rec.DeliverAt) == list {
			n++
		}
	}
	return n
}

// cancelDueLocked takes a Cancel of id threaded into list off list's count, if the message it
// cancels is due in list's own slot. It must be called before id leaves userIDs. It decides from
// the state alone, so replaying the Cancel record decides the same.
func (s *state) cancelDueLocked(id string, list int64) {
	if slot, _, ok := s.findSlot(id); ok && slot == list {
		s.slotDue[s.index(list)]--
	}
}
