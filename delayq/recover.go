package delayq

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"math"
	"slices"
	"time"

	"github.com/tockwheel/tock/delayq/internal/format"
	"github.com/tockwheel/tock/delayq/internal/wal"
)

// recover opens the log and rebuilds the state: from the checkpoint and the log written after it,
// or, when there is no readable checkpoint, from every segment there is. It holds mu throughout:
// messages are armed as they are put in memory, and their timers may fire meanwhile.
func (q *Queue) recover() error {
	ck, rebuild, err := q.readCheckpoint()
	if err != nil {
		return err
	}
	var covered wal.Pos
	if ck != nil {
		// Before anything on disk changes.
		if err := q.cfg.checkStored(q.dir, ck.slotNs, ck.slots); err != nil {
			return err
		}
		covered = ck.replay
		q.accountFor(ck.damage)
	}
	q.log, err = wal.Open(q.dir, wal.Options{SegmentSize: q.cfg.segmentSize, NoSync: q.cfg.noSync, Logger: q.cfg.logger,
		Covered: covered, Verify: format.Verify, ReadOnly: q.checking, BeforeWrite: q.cfg.beforeWrite, Files: q.cfg.files})
	if err != nil {
		return err
	}
	for _, d := range q.log.OpenDamage() {
		q.damaged(d)
	}
	segs, _ := q.log.Segments()
	if ck == nil && (len(segs) > 1 || q.log.End().Offset() > wal.SegmentHeader) {
		rebuild = true
	}
	first := wal.MakePos(1, wal.SegmentHeader)
	if len(segs) > 0 {
		first = wal.MakePos(segs[0], wal.SegmentHeader)
	}

	q.mu.Lock()
	replay, err := q.restore(ck, rebuild, first)
	if err == nil {
		err = q.replay(replay, rebuild)
	}
	if err == nil && !q.checking {
		// Copies of rolled or relocated messages that a crash kept out of the log.
		err = q.payMovingLocked()
	}
	q.ckptPos = replay
	q.mu.Unlock()
	if err != nil || q.checking {
		return err
	}
	if ck != nil && ck.version == format.CheckpointVersion {
		return q.ckpt.open(q.dir, ck)
	}
	// A new queue, a rebuilt or a migrated one: write the whole state as the first edit of a new
	// checkpoint file, recording the slot and horizon before anything depends on them.
	return q.checkpoint()
}

// readCheckpoint reads the checkpoint: nil if there is none, or if it is damaged, when rebuild is
// set.
func (q *Queue) readCheckpoint() (ck *checkpoint, rebuild bool, err error) {
	ck, err = readCheckpoint(q.dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, false, nil
	case errors.Is(err, ErrCorrupt):
		q.damaged(err)
		q.cfg.logger.Warn("delayq: checkpoint unreadable; rebuilding from the log", "dir", q.dir)
		return nil, true, nil
	case err != nil:
		return nil, false, fmt.Errorf("delayq: %w", err)
	}
	return ck, false, nil
}

// restore sets the state from ck, or to an empty wheel when ck is nil, and returns where replay
// begins: ck's position, or first, the start of the oldest segment.
func (q *Queue) restore(ck *checkpoint, rebuild bool, first wal.Pos) (wal.Pos, error) {
	if ck == nil {
		q.disk = newDiskWheel(int64(q.cfg.slot), int(q.cfg.horizon/q.cfg.slot), q.mem.topics)
		q.disk.loaded = q.disk.slotOf(time.Now().UnixNano()) - 1
		if rebuild {
			q.cfg.logger.Warn("delayq: no checkpoint; rebuilding from the log", "dir", q.dir, "first_segment", first.Segment())
			q.disk.loaded = math.MinInt64 / 4
		}
		return first, nil
	}
	w := newDiskWheel(ck.slotNs, ck.slots, q.mem.topics)
	w.loaded, w.pending = ck.loaded, ck.pending
	w.lists, w.ids = ck.lists, ck.ids
	for i, lts := range ck.topics {
		l := &w.lists[i]
		for _, c := range lts {
			lt := l.topic(w.topics.get(c.name))
			lt.n, lt.due, lt.last, lt.taken = c.n, c.due, c.last, c.taken
			lt.t.disk += c.n
		}
	}
	for _, name := range ck.paused {
		w.topics.get(name).paused = true
	}
	for _, l := range ck.limits {
		w.topics.get(l.Topic).setLimit(limitOf(l))
	}
	q.disk = w
	q.pins = ck.pins
	q.sched.restore(ck.schedules, ck.fires, ck.misfires)
	if ck.version < 5 { // before lists counted their messages by topic (version 6 added only limits and reasons)
		if err := q.migrate(!ck.hasDue, ck.version <= 3); err != nil {
			return 0, err
		}
	}
	dropped, err := q.loadEntries(ck.entries)
	if err != nil {
		return 0, err
	}
	// The checkpoint holds all of this: journal only what replay changes, and the entries lost to
	// damage, which the next checkpoint forgets (their damage reported once).
	clear(q.disk.dirty)
	q.disk.idOps = nil
	q.mem.takeOps()
	for _, origin := range dropped {
		q.mem.forget(origin)
	}
	if len(dropped) > 0 {
		q.markDamageDirty()
	}
	q.sched.takeChanged()
	return ck.replay, nil
}

// loadEntries puts the messages the checkpoint says were in memory back there, reading their
// records. It returns the origins of those whose record is damaged: they are lost.
func (q *Queue) loadEntries(m map[wal.Pos]ckEntry) ([]wal.Pos, error) {
	ces := slices.SortedFunc(maps.Values(m), func(a, b ckEntry) int { return cmpPos(a.pos, b.pos) })
	r := newRecordReader(q.log)
	var dropped []wal.Pos
	for _, ce := range ces {
		rec, err := r.ReadAt(ce.pos)
		if err == nil && rec.Kind != format.KindPut {
			err = q.corruptAt(ce.pos, fmt.Sprintf("the checkpoint holds a %v record as a message", rec.Kind))
		}
		if errors.Is(err, ErrCorrupt) {
			q.damaged(&heldError{err, q.entryHeld(r, ce)})
			q.pins.remove(ce.pos) // the message is lost; the checkpoint counted its record
			dropped = append(dropped, ce.origin)
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("delayq: reading a message the checkpoint holds: %w", err)
		}
		lr := listRecOf(&rec)
		e := q.mem.newEntry(ce.pos, &lr)
		e.origin, e.deliverAt, e.attempt, e.failure, e.failedAt, e.reason = ce.origin, ce.deliverAt, ce.attempt, ce.failure, ce.failedAt, ce.reason
		if ce.topic != "" {
			e.t = q.mem.topics.get(ce.topic)
		}
		if !q.mem.insert(e) {
			q.damaged(q.corruptAt(ce.pos, "the checkpoint holds the message twice"))
			q.pins.remove(ce.pos)
			q.mem.topics.release(e.t)
			q.mem.topics.release(e.home)
			continue
		}
		q.mem.arm(e)
	}
	return dropped, nil
}

// entryHeld says what the message of a checkpoint entry whose record is damaged was: when it
// was due, and its ID and topic when its first record, a copy of it, can be read.
func (q *Queue) entryHeld(r *recordReader, ce ckEntry) string {
	s := fmt.Sprintf("a message in memory, first put at %v, due %s", ce.origin, time.Unix(0, ce.deliverAt).UTC().Format(time.RFC3339Nano))
	if ce.origin != ce.pos {
		if rec, err := r.ReadAt(ce.origin); err == nil && rec.Kind == format.KindPut {
			s += fmt.Sprintf(": %q on topic %q (from its first copy)", rec.ID, rec.Topic)
		}
	}
	return s
}

// replay applies the records of the log from position from on, as the live queue did when it
// appended them. The lists that Advance and Relocate records take are read from the log; when
// tolerant (rebuilding without a checkpoint), a list may run into deleted segments.
func (q *Queue) replay(from wal.Pos, tolerant bool) error {
	r := newRecordReader(q.log)
	err := scanRecords(q.log, from, 0, func(pos wal.Pos, rec *format.Record) error {
		var list []listRecord
		if slot, ok := takesList(rec); ok {
			var err error
			if list, err = q.readList(r, slot); err != nil && !(tolerant && errors.Is(err, wal.ErrMissing)) {
				return fmt.Errorf("delayq: replaying %v at %v: %w", rec.Kind, pos, err)
			}
		}
		return q.apply(pos, rec, list)
	}, func(ce *wal.CorruptError) error {
		q.damaged(ce)
		return nil
	})
	if err != nil {
		return err
	}
	if q.disk.loaded == math.MinInt64/4 {
		// A rebuild that met no Advance record: start at the oldest list, or now.
		w := &q.disk
		w.loaded = w.slotOf(time.Now().UnixNano()) - 1
		for _, l := range w.lists {
			if l.head != 0 {
				w.loaded = min(w.loaded, l.slot-1)
			}
		}
	}
	return nil
}

// takesList returns the slot of the list a record comes with (see apply), if it does.
func takesList(rec *format.Record) (int64, bool) {
	switch rec.Kind {
	case format.KindAdvance, format.KindRelocate:
		return rec.Slot, true
	case format.KindPurge:
		return rec.ListSlot, true
	case format.KindCancel:
		// One written before Cancels named their topic: the list tells it.
		return rec.ListSlot, rec.Threaded && rec.Topic == ""
	}
	return 0, false
}

// migrate learns from the lists what a checkpoint of an older version lacks, reading every message
// in the disk wheel once: the counts of each list, in all and by topic (versions up to 4), the
// first record of each list and the record of each chosen ID (versions up to 3), and the lists'
// due counts when due is set (version 1). The count of messages in the wheel is made the sum of
// the lists' (versions 1 and 2 counted cancelled messages among them).
func (q *Queue) migrate(due, locate bool) error {
	w := &q.disk
	r := newRecordReader(q.log)
	w.pending = 0
	for i, l := range w.lists {
		if l.head == 0 {
			continue
		}
		recs, err := q.readList(r, l.slot)
		if err != nil {
			return err
		}
		var v listView
		list := &w.lists[i]
		for _, lr := range recs {
			rec := &lr.rec
			if !v.live(rec) {
				continue
			}
			list.n++
			slot := w.slotOf(rec.DeliverAt)
			lt := list.topic(w.topics.get(rec.Topic))
			lt.n++
			lt.t.disk++
			lt.last = max(lt.last, slot)
			if slot == l.slot {
				lt.due++
			}
			if loc, ok := w.ids[rec.ID]; locate && ok && loc.pos == 0 {
				w.ids[rec.ID] = idLoc{slot: loc.slot, pos: lr.pos}
			}
		}
		w.pending += list.n
		if len(recs) > 0 {
			list.first = recs[len(recs)-1].pos
		}
		if due {
			list.due = w.countDue(l.slot, recs)
		}
	}
	return nil
}

func mapKeys[K comparable, V any](m map[K]V) func(func(K) bool) { return maps.Keys(m) }

// sortedKeys returns the keys of m in ascending order.
func sortedKeys[V any](m map[wal.Pos]V) []wal.Pos {
	return slices.Sorted(mapKeys(m))
}
