package delayq

import (
	"cmp"
	"errors"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/tockwheel/tock/delayq/internal/format"
	"github.com/tockwheel/tock/delayq/internal/wal"
)

// The checkpoint holds the state the log alone would take long to rebuild: the disk wheel's lists
// with their counts per topic, the segment pins, the messages in memory (by position: their
// payloads stay in the log), the chosen IDs of messages in the disk wheel, and the paused topics.
// It describes exactly the records before its replay position; recovery loads it and replays the
// log from there. Its bytes are format's (edit.go, checkpoint.go); the file is checkpointfile.go's.
//
// What goes into an edit, and when. Its cost follows what changed: the file is a log of edits,
// and each checkpoint appends one edit holding what changed since the one before (the lists
// touched, the entries and chosen IDs added or removed, all the pins and paused topics, which are
// few) and syncs it. The queue's lock is held only to take the changes, which the queue journals as
// they happen (diskWheel.dirty and idOps, deliveryIndex.ops); they are turned into an edit, and
// encoded, without it. A checkpoint is written every checkpoint interval (WithCheckpointInterval)
// when the log has moved, at Close, after Open, and after a compaction round that moved
// something; an edit is written only after everything before its replay position is durable.

// An edit is what one checkpoint writes, as taken under the queue's lock: the full state, or the
// changes since the last checkpoint, with the journals of entries and chosen IDs taken whole.
// toFormat makes it the edit the file holds, without the lock.
type edit struct {
	full bool
	// empty: the state after the edit holds no entries and no chosen IDs (see needsRewrite).
	empty   bool
	replay  wal.Pos
	slotNs  int64
	slots   int
	loaded  int64
	pending int64
	lists   []indexedList
	paused  []string
	limits  []format.Limit
	pins    pins
	entries []entryOp
	// removedEntries are the origins of entries removed beside those of entries' ops.
	removedEntries []wal.Pos
	ids            []idOp
	// damage holds the damaged places of the log accounted for (see damage.go).
	damage []wal.Pos
	// schedules are those changed (all, in a full edit), removed those deleted; fires and
	// misfires the schedules' counts.
	schedules       []format.Schedule
	removed         []string
	fires, misfires uint64
}

type indexedList struct {
	i      int
	l      slotList // its topics nil: they are in topics
	topics []ckListTopic
}

// indexed returns the list at wheel index i as an edit holds it: a copy, its topics by name.
func indexed(i int, l slotList) indexedList {
	il := indexedList{i: i, l: l}
	il.l.topics = nil
	for _, lt := range l.topics {
		il.topics = append(il.topics, ckListTopic{name: lt.t.name, n: lt.n, due: lt.due, last: lt.last, taken: lt.taken})
	}
	return il
}

// onlyAdds reports whether all ed does to the entries and chosen IDs is add: it removes none and
// replaces none, and removes no schedule (the lists and schedules it holds, one each, the pins
// and the other small sections it holds whole do not count).
func (ed *edit) onlyAdds() bool {
	if ed.full || len(ed.removed) > 0 || len(ed.removedEntries) > 0 {
		return false
	}
	for _, op := range ed.entries {
		if !op.skip && (op.del || !op.added) {
			return false
		}
	}
	for _, op := range ed.ids {
		if op.del {
			return false
		}
	}
	return true
}

// onlyRemoves reports whether all ed does is remove entries and chosen IDs, at least one: it adds
// and replaces none, touches no list, and sets no schedule (the pins and the other small sections
// it holds whole do not count). A burst being acked makes such edits.
func (ed *edit) onlyRemoves() bool {
	if ed.full || len(ed.lists) > 0 || len(ed.schedules) > 0 {
		return false
	}
	removes := len(ed.removed) > 0 || len(ed.removedEntries) > 0
	for _, op := range ed.entries {
		if !op.skip && !op.del {
			return false
		}
		removes = removes || op.del
	}
	for _, op := range ed.ids {
		if !op.del {
			return false
		}
		removes = true
	}
	return removes
}

// fullEditLocked returns the whole state as an edit with replay position end. It copies all of
// the state: only Open uses it, for a new or migrated queue, with nothing else running.
func (q *Queue) fullEditLocked(end wal.Pos) *edit {
	ed := q.editHeaderLocked(end)
	ed.full = true
	for i, l := range q.disk.lists {
		if l.head != 0 {
			ed.lists = append(ed.lists, indexed(i, l))
		}
	}
	q.mem.takeOps()
	for _, e := range q.mem.byOrigin {
		q.mem.changed(e, false)
	}
	ed.entries, _ = q.mem.takeOps()
	ed.ids = make([]idOp, 0, len(q.disk.ids))
	for id, loc := range q.disk.ids {
		ed.ids = append(ed.ids, idOp{id: id, loc: loc})
	}
	q.disk.idOps = nil
	clear(q.disk.dirty)
	q.sched.takeChanged()
	ed.schedules = make([]format.Schedule, 0, q.sched.byName.Len())
	q.sched.byName.Ascend(func(s *sched) bool {
		ed.schedules = append(ed.schedules, s.toFormat())
		return true
	})
	return ed
}

// changesLocked returns the changes since the last checkpoint as an edit with replay position end,
// and starts journaling the next. It copies the lists changed, the pins and the paused topics; the
// entries and IDs changed are taken whole from the journal.
func (q *Queue) changesLocked(end wal.Pos) *edit {
	ed := q.editHeaderLocked(end)
	w := &q.disk
	for wi, word := range w.dirty {
		for word != 0 {
			b := wi*64 + trailingZeros(word)
			word &= word - 1
			ed.lists = append(ed.lists, indexed(b, w.lists[b]))
		}
	}
	clear(w.dirty)
	ed.entries, ed.removedEntries = q.mem.takeOps()
	ed.ids, w.idOps = w.idOps, nil
	ed.empty = len(q.mem.byOrigin) == 0 && len(w.ids) == 0
	seen := make(map[string]bool)
	for _, name := range q.sched.takeChanged() {
		if seen[name] {
			continue
		}
		seen[name] = true
		if s := q.sched.get(name); s != nil {
			ed.schedules = append(ed.schedules, s.toFormat())
		} else {
			ed.removed = append(ed.removed, name)
		}
	}
	return ed
}

func (q *Queue) editHeaderLocked(end wal.Pos) *edit {
	w := &q.disk
	ed := &edit{replay: end, slotNs: w.slotNs, slots: len(w.lists), loaded: w.loaded, pending: w.pending, pins: maps.Clone(q.pins),
		fires: q.sched.fires, misfires: q.sched.misfires}
	for name, t := range q.mem.topics {
		if t.paused {
			ed.paused = append(ed.paused, name)
		}
		if t.limit != nil {
			ed.limits = append(ed.limits, t.limit.record(name))
		}
	}
	return ed
}

func trailingZeros(x uint64) int {
	n := 0
	for x&1 == 0 {
		x >>= 1
		n++
	}
	return n
}

// toFormat returns ed as the file holds it: paused topics and pins in order, the entries journal
// without its skipped ops, and the chosen IDs reduced to their last change each (the journal of
// entries holds one op per entry already). Its slices are made for what ed holds, at once: a
// checkpoint after a burst holds an entry for each of its messages, and growing them by appending
// copied them over and over.
func (ed *edit) toFormat() *format.Edit {
	fe := &format.Edit{Full: ed.full, Replay: ed.replay, SlotNs: ed.slotNs, Slots: ed.slots, Loaded: ed.loaded, Pending: ed.pending,
		Damage:    ed.damage,
		Schedules: ed.schedules, RemovedSchedules: ed.removed, Fires: ed.fires, Misfires: ed.misfires,
		Paused: slices.Sorted(slices.Values(ed.paused)),
		Limits: slices.SortedFunc(slices.Values(ed.limits), func(a, b format.Limit) int { return strings.Compare(a.Topic, b.Topic) })}
	if len(ed.lists) > 0 {
		fe.Lists = make([]format.List, 0, len(ed.lists))
	}
	entries, removed := 0, len(ed.removedEntries)
	for _, op := range ed.entries {
		switch {
		case op.skip:
		case op.del:
			removed++
		default:
			entries++
		}
	}
	if entries > 0 {
		fe.Entries = make([]format.Entry, 0, entries)
	}
	if removed > 0 {
		fe.RemovedEntries = make([]wal.Pos, 0, removed)
	}
	for _, il := range ed.lists {
		l := format.List{Index: il.i, Slot: il.l.slot, Head: il.l.head, First: il.l.first, Due: il.l.due, N: il.l.n}
		for _, lt := range il.topics {
			l.Topics = append(l.Topics, format.ListTopic{Name: lt.name, N: lt.n, Due: lt.due, Last: lt.last, Taken: lt.taken})
		}
		fe.Lists = append(fe.Lists, l)
	}
	for _, seg := range slices.Sorted(maps.Keys(ed.pins)) {
		fe.Pins = append(fe.Pins, format.Pin{Segment: seg, Count: ed.pins[seg]})
	}
	fe.RemovedEntries = append(fe.RemovedEntries, ed.removedEntries...)
	for _, op := range ed.entries {
		switch {
		case op.skip:
		case op.del:
			fe.RemovedEntries = append(fe.RemovedEntries, op.ce.origin)
		default:
			fe.Entries = append(fe.Entries, op.ce.toFormat())
		}
	}
	last := make(map[string]int, len(ed.ids))
	for i, op := range ed.ids {
		last[op.id] = i
	}
	for i, op := range ed.ids {
		switch {
		case last[op.id] != i:
		case op.del:
			fe.RemovedIDs = append(fe.RemovedIDs, op.id)
		default:
			fe.IDs = append(fe.IDs, format.ID{ID: op.id, Slot: op.loc.slot, Pos: op.loc.pos})
		}
	}
	return fe
}

func (e ckEntry) toFormat() format.Entry {
	return format.Entry{Origin: e.origin, Pos: e.pos, DeliverAt: e.deliverAt, Attempt: e.attempt, Failure: e.failure, FailedAt: e.failedAt, Topic: e.topic, Reason: e.reason}
}

// checkpoint writes a checkpoint edit, once the log it describes is durable, and then deletes the
// segments nothing needs any more.
func (q *Queue) checkpoint() error {
	q.ckptMu.Lock()
	defer q.ckptMu.Unlock()
	end, pins, err := q.writeCheckpoint()
	if err != nil {
		return q.fail(err) // the disk did not take the checkpoint or the log before it
	}
	if pins == nil {
		return nil
	}
	return q.retain(end, pins)
}

// writeCheckpoint writes a checkpoint edit if anything changed since the last, and returns its
// replay position and pins (nil if it wrote none). ckptMu must be held.
func (q *Queue) writeCheckpoint() (wal.Pos, pins, error) {
	q.mu.Lock()
	if q.err != nil {
		err := q.err
		q.mu.Unlock()
		return 0, nil, err
	}
	end := q.log.End()
	if end == q.ckptPos && q.ckpt.f != nil && !q.damageDirty() {
		q.mu.Unlock()
		return 0, nil, nil
	}
	var ed *edit
	if q.ckpt.f == nil {
		ed = q.fullEditLocked(end)
	} else {
		ed = q.changesLocked(end)
	}
	q.mu.Unlock()
	segs, _ := q.log.Segments()
	ed.damage = q.damageForEdit(segs, ed.pins)
	if err := q.log.WaitDurable(end); err != nil {
		return 0, nil, err
	}
	fe := ed.toFormat()
	var err error
	if ed.full {
		err = q.ckpt.writeFull(q.dir, fe)
	} else {
		err = q.ckpt.appendEdit(fe, ed.onlyAdds(), ed.onlyRemoves())
	}
	if err == nil && q.ckpt.needsRewrite(ed.empty) {
		err = q.ckpt.rewrite(q.dir)
	}
	if err != nil {
		return 0, nil, err
	}
	q.mu.Lock()
	q.ckptPos = end
	q.mu.Unlock()
	return end, ed.pins, nil
}

// every calls fn every interval until Close or until fn fails. A failure other than the queue or
// its log closing fails the queue, as a failed write does.
func (q *Queue) every(interval time.Duration, fn func() error) {
	defer q.bg.Done()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-q.closed:
			return
		case <-t.C:
		}
		if err := fn(); err != nil {
			if !errors.Is(err, ErrClosed) && !errors.Is(err, wal.ErrClosed) {
				q.mu.Lock()
				q.failLocked(err)
				q.mu.Unlock()
			}
			return
		}
	}
}

// cmpPos orders positions.
func cmpPos(a, b wal.Pos) int { return cmp.Compare(a, b) }
