package delayq

import (
	"errors"
	"fmt"
	"slices"

	"github.com/tockwheel/tock/delayq/internal/format"
	"github.com/tockwheel/tock/delayq/internal/wal"
)

// A listRecord is a record read from a slot list, with its position. A broken one stands for a
// record of the list that could not be read (its rec is zero): no message, but a record the list
// held, whose segment pin goes with the list.
type listRecord struct {
	pos    wal.Pos
	rec    listRec
	broken bool
}

// A listRec is what the readers of a list use of one of its records (Put, Cancel or Purge): the
// message of a Put, the ID of a Cancel and its topic, the topic of a Purge. The fields are those
// of format.Record that it keeps, under the same names. A list of a burst holds a record for each
// of its messages, all kept until the list is taken: as format.Records, which have the fields of
// every kind, they took three times the memory, and clearing and faulting in that memory was
// two fifths of the time a slot of 100,000 took to load.
type listRec struct {
	Kind      format.Kind
	Attempt   uint32
	DeliverAt int64
	Origin    wal.Pos
	ID        string
	Topic     string
	Payload   []byte
	Headers   map[string]string
}

// listRecOf returns what a list keeps of rec, a Put, Cancel or Purge record of it.
func listRecOf(rec *format.Record) listRec {
	return listRec{Kind: rec.Kind, Attempt: rec.Attempt, DeliverAt: rec.DeliverAt, Origin: rec.Origin, ID: rec.ID,
		Topic: rec.Topic, Payload: rec.Payload, Headers: rec.Headers}
}

// record returns r as the record it was read from, threaded into list, its prev left out (its
// size is that of the record in the log).
func (r *listRec) record(list int64) format.Record {
	return format.Record{Kind: r.Kind, Threaded: true, ListSlot: list, Attempt: r.Attempt, DeliverAt: r.DeliverAt,
		Origin: r.Origin, ID: r.ID, Topic: r.Topic, Payload: r.Payload, Headers: r.Headers}
}

// A heldError is damage met reading something, with what the damaged bytes held as far as the
// reader knows it (see Queue.damaged).
type heldError struct {
	err  error
	held string
}

func (e *heldError) Error() string { return e.err.Error() }
func (e *heldError) Unwrap() error { return e.err }

// readChain reads the records of list from head backwards, down to lo (records before lo are not
// read) or to stop, a record known to be in the list, whichever comes first. It returns the records
// read, newest first, and whether it reached stop: when stop is not 0 and is not reached, the list
// was replaced since stop was its head, and the records read are all of it (down to lo).
//
// Damage does not stop it. A record that cannot be read, or is not a record of the list, breaks
// the chain there: it is passed to report, and the rest of the list, its records older than the
// damaged one, is found by scanning the log from the list's first record (or stop, or lo) for the
// records threaded into list. So damage costs only the messages of the damaged record. (A read
// made without mu reports damage only once it knows the list was not loaded meanwhile: the
// segments of a loaded list can be deleted.)
//
// first is the list's first record, from the wheel; readChain does not look at the wheel, so that
// it can run without mu. size is how many records the caller expects (the list's count, or 0 when
// it does not know): a list of a burst holds a record for each of its messages, hundreds of bytes
// each, and growing the slice to them by appending copied it over and over, most of the cost of
// loading a slot of 100,000 messages. (A count is only a hint: the slice is made for at most
// maxListHint records, and grows past them as needed.)
func (q *Queue) readChain(r *recordReader, list int64, head, first, stop, lo wal.Pos, size int64, report func(error)) ([]listRecord, bool, error) {
	var out []listRecord
	if size > 0 {
		out = make([]listRecord, 0, min(size, maxListHint))
	}
	reached, err := q.walkChain(r, list, head, first, stop, lo, report, func(lr *listRecord) { out = append(out, *lr) })
	if err != nil {
		return nil, false, err
	}
	return out, reached, nil
}

// maxListHint bounds the records readChain makes room for ahead of reading them.
const maxListHint = 1 << 20

// walkChain calls fn with each record readChain would return, newest first, without keeping
// them: every reader of a list, the admin's listing included, sees the same records past damage.
// A record of the list that cannot be read is passed as a broken one, before the records found
// past it. fn must not keep lr.
func (q *Queue) walkChain(r *recordReader, list int64, head, first, stop, lo wal.Pos, report func(error), fn func(lr *listRecord)) (reached bool, err error) {
	p := head
	// One listRecord is passed each time, filled anew: fn takes a pointer, which made each record
	// read a heap allocation of its own.
	lr := new(listRecord)
	for p != 0 && p != stop && p >= lo {
		rec, err := r.ReadAt(p)
		unreadable := errors.Is(err, ErrCorrupt)
		if err == nil && (!rec.Kind.Threads() || !rec.Threaded || rec.ListSlot != list || rec.Prev >= p) {
			err = q.corruptAt(p, fmt.Sprintf("%v record is not a record of the list of slot %d", rec.Kind, list))
		}
		if errors.Is(err, ErrCorrupt) {
			report(&heldError{err, fmt.Sprintf("a record of the list of slot %d (due %s)", list, q.slotTime(list))})
			if unreadable {
				fn(&listRecord{pos: p, broken: true})
			}
			rest, err := q.scanList(list, max(lo, first, stop+1), p, report)
			for i := range rest {
				fn(&rest[i])
			}
			return stop != 0, err
		}
		if err != nil {
			return false, fmt.Errorf("delayq: reading slot list at %v: %w", p, err)
		}
		*lr = listRecord{pos: p, rec: listRecOf(&rec)}
		fn(lr)
		p = rec.Prev
	}
	return stop != 0 && p == stop, nil
}

// scanList returns the records threaded into list in [from, to), newest first, found by scanning
// the log. Damage met is reported and skipped; segments missing are skipped (they hold no record
// of a list in the wheel, or the damage was reported where it was found).
func (q *Queue) scanList(list int64, from, to wal.Pos, report func(error)) ([]listRecord, error) {
	from = max(from, wal.MakePos(1, 0))
	var out []listRecord
	err := scanRecords(q.log, from, to, func(pos wal.Pos, rec *format.Record) error {
		if rec.Threaded && rec.ListSlot == list && rec.Kind.Threads() {
			out = append(out, listRecord{pos: pos, rec: listRecOf(rec)})
		}
		return nil
	}, func(ce *wal.CorruptError) error {
		if !errors.Is(ce, wal.ErrMissing) {
			report(ce)
		}
		return nil
	})
	slices.Reverse(out)
	return out, err
}

// readList reads the whole list of slot list, which must not change meanwhile (mu is held, or
// recovery is running).
func (q *Queue) readList(r *recordReader, list int64) ([]listRecord, error) {
	l := q.disk.peek(list)
	recs, _, err := q.readChain(r, list, l.head, l.first, 0, 0, l.n, q.damaged)
	return recs, err
}

// listTries bounds the reads of a list made without mu, each catching up on the records added
// during the one before.
const listTries = 3

// lockList reads the records of the list of slot list from position lo on, newest first, as the
// loader, Cancel and compaction need them, holding mu as little as it can: it reads what the list
// holds without mu, then takes mu and reads the records added meanwhile, without mu again while
// there were many. It returns with mu held and the records complete as of that moment, or with ok
// false (and mu held) as soon as keep, called under mu each time mu is taken, returns false: the
// list is no longer the caller's to read (it was loaded, say). Reading under mu never waits for the
// log's writer: records not yet written are read from memory.
func (q *Queue) lockList(r *recordReader, list int64, lo wal.Pos, keep func() bool) (recs []listRecord, ok bool, err error) {
	var seen wal.Pos // the head recs was read from
	q.mu.Lock()
	for try := 0; ; try++ {
		if !keep() {
			return nil, false, nil
		}
		l := q.disk.peek(list)
		head := l.head
		if head == seen {
			return recs, true, nil
		}
		if try == listTries {
			// Catch up under mu: the part added since the last read is small by now.
			part, reached, err := q.readChain(r, list, head, l.first, seen, lo, 0, q.damaged)
			if err != nil {
				return nil, true, err
			}
			return joinParts(part, recs, reached), true, nil
		}
		// The whole list is read once, without mu; what comes after is what was added meanwhile.
		var size int64
		if seen == 0 && lo == 0 {
			size = l.n
		}
		hook := q.afterListRead
		q.mu.Unlock()
		var damage []error
		part, reached, err := q.readChain(r, list, head, l.first, seen, lo, size, func(err error) { damage = append(damage, err) })
		if hook != nil {
			hook()
		}
		q.mu.Lock()
		if keep() {
			for _, d := range damage {
				q.damaged(d)
			}
		}
		if err != nil {
			if !keep() {
				// The error may come from the change that ended the read: a loaded list's
				// segments can be deleted.
				return nil, false, nil
			}
			if q.disk.peek(list).head != head {
				seen, recs = 0, nil // changed under the read: read it again
				continue
			}
			return nil, true, err
		}
		recs, seen = joinParts(part, recs, reached), head
	}
}

// joinParts puts part, read from a newer head down to the head older was read from, before older;
// when part did not reach older's head, the list was replaced and part is all of it.
func joinParts(part, older []listRecord, reached bool) []listRecord {
	if !reached {
		return part
	}
	return append(part, older...)
}

// A listView tells, walking a list's records newest first, which of its Puts are pending: a Put is
// cancelled by a newer Cancel of its ID or Purge of its topic in the list, and all but the newest
// copy of a message (a roll repeated after a crash) are left out. It is the one place that says
// what a list holds.
type listView struct {
	cancelled map[string]bool
	purged    map[string]bool
	// copies holds the origins of the copies seen; copies are rare, so only they are remembered.
	copies map[wal.Pos]bool
}

// live reports whether rec, the next record of the list newest first, is a Put that no newer
// Cancel or Purge took, and notes what a Cancel or Purge takes. Copies of one message are each
// live: the wheel's counts count each (see diskWheel).
func (v *listView) live(rec *listRec) bool {
	switch rec.Kind {
	case format.KindCancel:
		if v.cancelled == nil {
			v.cancelled = make(map[string]bool)
		}
		v.cancelled[rec.ID] = true
		return false
	case format.KindPurge:
		if v.purged == nil {
			v.purged = make(map[string]bool)
		}
		v.purged[rec.Topic] = true
		return false
	case format.KindPut:
		return !v.cancelled[rec.ID] && !v.purged[rec.Topic]
	}
	return false
}

// pending reports whether rec, at pos, the next record of the list newest first, is a pending
// Put: live, and the newest copy of its message.
func (v *listView) pending(pos wal.Pos, rec *listRec) bool {
	if !v.live(rec) {
		return false
	}
	origin := originOf(rec.Origin, pos)
	if v.copies[origin] {
		return false
	}
	if rec.Origin != 0 {
		if v.copies == nil {
			v.copies = make(map[wal.Pos]bool)
		}
		v.copies[origin] = true
	}
	return true
}

// countDue counts the live Puts of list's records, newest first, that are due in list's own slot,
// as the wheel keeps slotList.due. Recovery uses it to rebuild the counts of a checkpoint that
// lacks them; tests check the counts against it.
func (w *diskWheel) countDue(list int64, recs []listRecord) int64 {
	var n int64
	var v listView
	for _, lr := range recs {
		if v.live(&lr.rec) && w.slotOf(lr.rec.DeliverAt) == list {
			n++
		}
	}
	return n
}
