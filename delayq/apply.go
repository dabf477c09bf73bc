package delayq

import (
	"fmt"
	"maps"
	"slices"

	"github.com/tockwheel/tock/delayq/internal/format"
	"github.com/tockwheel/tock/delayq/internal/wal"
	"github.com/tockwheel/tock/queue"
)

// One state machine: every change to the durable state is a record, and apply is the one place
// where a record changes the state. The live queue appends a record and applies it (commitLocked);
// recovery applies the records the log holds after the checkpoint, in the same order, through the
// same function, so what a crash rebuilds is what the live queue had. Decisions that depend on the
// moment (the slot a message goes into, the list it is threaded behind, whether a delivery is dead)
// are taken when a record is built, and written into it.
//
// Records that take a slot list out of the disk wheel (Advance, Relocate) come with the list's
// records, read by their caller: live, by the loader or the compactor before appending; in replay,
// from the log. The messages of such a list that must be written again (rolled beyond the
// horizon, or relocated) are owed copies (Queue.moving) until a Put record with their origin is
// applied: live, the caller appends the copies at once; in replay, the copies follow in the log,
// and those a crash kept out of it are appended at the end of recovery.

// commitLocked appends rec and applies it. list is the list rec takes out of the wheel, for
// Advance and Relocate records. A failure to append stops the queue: the error returned is the
// queue's failure, which matches ErrUnavailable.
func (q *Queue) commitLocked(rec *format.Record, list []listRecord) (end wal.Pos, err error) {
	return q.commitGroupLocked(rec, false, list)
}

// commitGroupLocked is commitLocked for a record of an atomic group: more says that more records
// of the group follow (see wal's frame.go).
func (q *Queue) commitGroupLocked(rec *format.Record, more bool, list []listRecord) (end wal.Pos, err error) {
	pos, end, err := q.appendLocked(rec, more)
	if err == nil {
		err = q.apply(pos, rec, list)
	}
	if err != nil {
		q.failLocked(err)
		return 0, q.err
	}
	return end, nil
}

// apply changes the state as rec, the record at pos, says.
func (q *Queue) apply(pos wal.Pos, rec *format.Record, list []listRecord) error {
	switch rec.Kind {
	case format.KindPut:
		q.applyPut(pos, rec)
	case format.KindCancel:
		if rec.Threaded {
			if rec.Topic == "" {
				// Written before Cancels named their topic (or of a Put lost to damage): the
				// topic is that of the Put it cancels in the list.
				rec = withTopic(rec, list)
			}
			q.disk.raiseLoaded(rec.ListSlot - q.disk.horizon())
			q.disk.push(pos, rec)
			q.pins.add(pos)
		} else if e := q.mem.lookup(rec.ID); e != nil {
			q.drop(e)
		}
	case format.KindAck:
		if e := q.mem.byOrigin[rec.Target]; e != nil {
			q.drop(e)
		}
	case format.KindUpdate:
		if e := q.mem.byOrigin[rec.Target]; e != nil {
			q.applyUpdate(e, rec)
		}
	case format.KindAdvance:
		if rec.Slot <= q.disk.loaded {
			q.damaged(q.corruptAt(pos, fmt.Sprintf("advance to slot %d after slot %d was loaded", rec.Slot, q.disk.loaded)))
			return nil
		}
		q.takeList(rec.Slot, list, true)
	case format.KindRelocate:
		q.takeList(rec.Slot, list, false)
	case format.KindPause:
		t := q.mem.topics.get(rec.Topic)
		t.paused = rec.Paused
		if !t.paused && t.ready > 0 {
			t.wake()
		}
		q.mem.topics.release(t)
	case format.KindLimit:
		t := q.mem.topics.get(rec.Topic)
		t.setLimit(queue.Limit{Rate: rec.Rate, Burst: int(rec.Burst), Concurrency: int(rec.Concurrency)})
		q.mem.topics.release(t)
	case format.KindPurge:
		q.disk.raiseLoaded(rec.ListSlot - q.disk.horizon())
		q.forgetPurged(rec, list)
		q.disk.push(pos, rec)
		q.pins.add(pos)
	case format.KindSchedule, format.KindFire, format.KindUnschedule:
		q.sched.apply(rec)
	}
	return nil
}

// withTopic returns a copy of the Cancel record rec naming the topic of the Put it cancels in
// list, the records before it (newest first), if there is one.
func withTopic(rec *format.Record, list []listRecord) *format.Record {
	var v listView
	for _, lr := range list {
		if v.live(&lr.rec) && lr.rec.ID == rec.ID {
			c := *rec
			c.Topic = lr.rec.Topic
			return &c
		}
	}
	return rec
}

// applyUpdate applies an Update record to e: a failed delivery, or an operator's action.
func (q *Queue) applyUpdate(e *entry, rec *format.Record) {
	q.mem.detach(e)
	e.deliverAt, e.attempt = rec.DeliverAt, rec.Attempt
	if rec.Topic != "" {
		t := q.mem.topics.get(rec.Topic)
		if t == e.home {
			e.lease, e.diedAfter = 0, 0 // a requeued dead letter: its receipts are stale
		}
		q.mem.move(e, t)
	}
	switch rec.Failure {
	case format.FailureUnchanged:
	case format.FailureNone:
		e.failure, e.failedAt, e.reason = 0, 0, ""
	default:
		e.failure, e.failedAt, e.reason = rec.Failure, rec.FailedAt, rec.Reason
	}
	q.mem.changed(e, false)
	q.mem.arm(e)
}

// forgetPurged forgets the chosen IDs of the messages a Purge record takes out of its list, whose
// records, list, are those before it (newest first, the whole list).
func (q *Queue) forgetPurged(rec *format.Record, list []listRecord) {
	w := &q.disk
	var v listView
	for _, lr := range list {
		if !v.pending(lr.pos, &lr.rec) || lr.rec.Topic != rec.Topic {
			continue
		}
		if loc, ok := w.ids[lr.rec.ID]; ok && (loc.pos == lr.pos || loc.pos == 0 && loc.slot == w.slotOf(lr.rec.DeliverAt)) {
			w.deleteID(lr.rec.ID)
		}
	}
}

// applyPut applies a Put record: the message goes into its slot's list when the record is
// threaded, else into memory.
func (q *Queue) applyPut(pos wal.Pos, rec *format.Record) {
	if rec.Origin != 0 {
		delete(q.moving, rec.Origin) // the copy of a moved message
	}
	if rec.Threaded {
		q.disk.raiseLoaded(rec.ListSlot - q.disk.horizon())
		q.disk.push(pos, rec)
		q.pins.add(pos)
		return
	}
	q.disk.raiseLoaded(q.disk.slotOf(rec.DeliverAt))
	lr := listRecOf(rec)
	if e := q.mem.newEntry(pos, &lr); q.mem.insert(e) {
		q.pins.add(pos)
		q.mem.arm(e)
	} else {
		q.mem.topics.release(e.t)
	}
}

// drop forgets e, acked or cancelled, and releases its record.
func (q *Queue) drop(e *entry) {
	q.mem.remove(e)
	q.pins.remove(e.pos)
}

// takeList takes the list of slot, whose records are recs (newest first, the whole list), out of
// the disk wheel. With advance, slot is loaded: its messages due in it go into memory; the others
// (put more than a horizon ahead) are owed copies in a later list. Without, the list is relocated:
// all its messages are owed copies. Cancelled and purged Puts and all but the newest copy of a
// message are left out. The messages go into memory oldest first, in the order of the log, as
// they would have had they been put there: those due already become ready in that order, so that
// makeReady places each among the ones put before it (messages put in due order append at the
// tail, and those due at one moment keep the order of their Puts, a schedule's catch-up fires
// among them).
func (q *Queue) takeList(slot int64, recs []listRecord, advance bool) {
	w := &q.disk
	// Hold the list's topics while its messages move, so that a topic whose only messages
	// they are is not forgotten in between, and its counters (Puts, Deliveries, ...) with it.
	var held []*topicState
	if l := &w.lists[w.index(slot)]; l.slot == slot {
		for _, lt := range l.topics {
			lt.t.hold()
			held = append(held, lt.t)
		}
	}
	defer func() {
		for _, t := range held {
			w.topics.drop(t)
		}
	}()
	w.detach(slot)
	if advance {
		w.loaded = slot
	}
	pending := q.pendingIn(recs)
	if advance {
		// The journal grows by an op for each message loaded: once, rather than doubling, and
		// copying 80 bytes an op, a dozen times over a slot of 100,000.
		q.mem.ops = slices.Grow(q.mem.ops, len(pending))
	}
	for _, e := range slices.Backward(pending) {
		if loc, ok := w.ids[e.id]; ok && (loc.pos == e.pos || loc.pos == 0 && loc.slot == w.slotOf(e.deliverAt)) {
			w.deleteID(e.id)
		}
		if !advance || w.slotOf(e.deliverAt) > slot {
			q.moving[e.origin] = e
			continue
		}
		if q.mem.insert(e) {
			q.pins.add(e.pos)
			q.mem.arm(e)
		} else {
			q.mem.topics.release(e.t)
		}
	}
}

// pendingIn releases the records of a list, recs (newest first, the whole list), and returns the
// messages still pending in it, newest first (see listView). The messages owed as copies are not
// in memory: their entries hold no reference to their topic.
func (q *Queue) pendingIn(recs []listRecord) []*entry {
	var v listView
	out := make([]*entry, 0, len(recs))
	for _, lr := range recs {
		q.pins.remove(lr.pos)
		if v.pending(lr.pos, &lr.rec) {
			out = append(out, q.mem.newEntry(lr.pos, &lr.rec))
		}
	}
	return out
}

// payMovingLocked appends the copies owed of messages taken out of lists, oldest first.
func (q *Queue) payMovingLocked() error {
	for _, origin := range sortedKeys(q.moving) {
		e := q.moving[origin]
		if _, _, err := q.putLocked(e.id, e.t.name, e.payload, e.headers, e.deliverAt, e.attempt, e.origin, false); err != nil {
			return err
		}
	}
	return nil
}

// pins counts, per segment, the records still needed: records of lists in the disk wheel, and
// the current records of messages in memory (see retention.go).
type pins map[uint32]int64

func (p pins) add(pos wal.Pos) { p[pos.Segment()]++ }

func (p pins) clone() pins { return maps.Clone(p) }

func (p pins) remove(pos wal.Pos) {
	seg := pos.Segment()
	if p[seg]--; p[seg] <= 0 {
		delete(p, seg)
	}
}
