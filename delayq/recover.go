package delayq

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/tockwheel/tock/delayq/internal/wal"
)

// recover opens the log and rebuilds the state: from the checkpoint and the log written after it,
// or, when there is no readable checkpoint, from every segment there is.
func (q *Queue) recover() error {
	ck, err := readCheckpoint(q.dir)
	rebuild := false
	switch {
	case errors.Is(err, fs.ErrNotExist):
		ck = nil
	case errors.Is(err, ErrCorrupt):
		q.cfg.logger.Warn("delayq: checkpoint unreadable; rebuilding from the log", "err", err)
		ck, rebuild = nil, true
	case err != nil:
		return fmt.Errorf("delayq: %w", err)
	}
	var covered wal.Pos
	if ck != nil {
		covered = ck.replay
	}
	q.log, err = wal.Open(q.dir, wal.Options{SegmentSize: q.cfg.segmentSize, NoSync: q.cfg.noSync, Logger: q.cfg.logger, Covered: covered})
	if err != nil {
		return err
	}
	if d := q.log.OpenDamage(); len(d) > 0 {
		return d[0]
	}
	segs, _ := q.log.Segments()
	if ck == nil && (len(segs) > 1 || q.log.End().Offset() > wal.SegmentHeader) {
		rebuild = true
	}

	s := &q.state
	s.pins = make(map[uint32]int64)
	s.userIDs = make(map[string]int64)
	s.byOrigin = make(map[wal.Pos]*entry)
	s.byID = make(map[string]*entry)
	s.buckets = make(map[int64]*bucket)
	s.leaseSeq = rand.Uint64() >> 1
	s.topics = make(map[string]*topicQueue)
	replay := wal.MakePos(segs[0], wal.SegmentHeader)
	if ck != nil {
		if ck.slotNs != int64(q.cfg.slot) || ck.slots != int(q.cfg.horizon/q.cfg.slot) {
			q.cfg.logger.Info("delayq: using the slot and horizon the queue was created with",
				"slot", time.Duration(ck.slotNs), "horizon", time.Duration(ck.slotNs)*time.Duration(ck.slots))
		}
		s.slotNs, s.heads, s.slotDue = ck.slotNs, make([]listHead, ck.slots), make([]int64, ck.slots)
		s.loaded, s.diskPending = ck.loaded, ck.diskPending
		for i, h := range ck.heads {
			*s.head(h.slot) = h
			if ck.slotDue != nil {
				s.slotDue[s.index(h.slot)] = ck.slotDue[i]
			}
		}
		if ck.version < checkpointVersion {
			if err := q.recountLists(ck.slotDue == nil); err != nil {
				return err
			}
		}
		s.pins, s.userIDs = ck.pins, ck.userIDs
		replay = ck.replay
		if err := q.loadEntries(ck.entries); err != nil {
			return err
		}
	} else {
		s.slotNs, s.heads = int64(q.cfg.slot), make([]listHead, q.cfg.horizon/q.cfg.slot)
		s.slotDue = make([]int64, len(s.heads))
		s.loaded = s.slotOf(time.Now().UnixNano()) - 1
		if rebuild {
			q.cfg.logger.Warn("delayq: no checkpoint; rebuilding from the log", "dir", q.dir, "first_segment", segs[0])
			s.loaded = math.MinInt64 / 4
		}
	}

	rp := replayer{q: q, r: q.log.NewReader(), tolerant: rebuild, rolls: make(map[wal.Pos]*entry)}
	if err := q.log.Scan(replay, 0, rp.apply, nil); err != nil {
		return err
	}
	if s.loaded == math.MinInt64/4 {
		// A rebuild that met no Advance record: start at the oldest list, or now.
		s.loaded = s.slotOf(time.Now().UnixNano()) - 1
		for _, h := range s.heads {
			if h.head != 0 {
				s.loaded = min(s.loaded, h.slot-1)
			}
		}
	}

	q.mu.Lock()
	defer q.mu.Unlock()
	// Copies of rolled or relocated messages that a crash kept out of the log.
	for _, origin := range slices.Sorted(mapKeys(rp.rolls)) {
		e := rp.rolls[origin]
		if _, _, err := q.putLocked(e.id, e.topic, e.payload, e.deliverAt, e.attempt, e.origin); err != nil {
			return err
		}
	}
	// Leases did not survive: every message in memory waits for its time again.
	for _, e := range s.byOrigin {
		q.armLocked(e)
	}
	if ck == nil {
		// Record the slot and horizon the queue is created with before anything depends on them.
		q.mu.Unlock()
		err := q.checkpoint()
		q.mu.Lock()
		return err
	}
	q.ckptPos = replay
	return nil
}

// loadEntries reads the records of the messages the checkpoint says were in memory.
func (q *Queue) loadEntries(ces []ckEntry) error {
	slices.SortFunc(ces, func(a, b ckEntry) int { return cmpPos(a.pos, b.pos) })
	r := q.log.NewReader()
	for _, ce := range ces {
		rec, err := r.ReadAt(ce.pos)
		if err != nil {
			return fmt.Errorf("delayq: reading message the checkpoint holds: %w", err)
		}
		if rec.Kind != wal.KindPut {
			return fmt.Errorf("%w: checkpoint names a %v record at %v as a message", ErrCorrupt, rec.Kind, ce.pos)
		}
		e := &entry{pos: ce.pos, origin: ce.origin, id: rec.ID, topic: rec.Topic, payload: rec.Payload, deliverAt: ce.deliverAt, attempt: ce.attempt}
		if ce.topic != "" {
			e.topic, e.topicChanged = ce.topic, true
		}
		if !q.insertLocked(e) {
			return fmt.Errorf("%w: checkpoint holds message %v twice", ErrCorrupt, ce.origin)
		}
	}
	return nil
}

func cmpPos(a, b wal.Pos) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// A replayer applies log records written after the checkpoint to the state, as the live queue
// did when it appended them.
type replayer struct {
	q        *Queue
	r        *wal.Reader
	tolerant bool // rebuilding without a checkpoint: lists may run into deleted segments
	// rolls holds, by origin, messages an Advance record's list rolled, or a Relocate record's
	// list held, whose copies have not been met in the log yet.
	rolls map[wal.Pos]*entry
}

func (rp *replayer) apply(pos wal.Pos, rec wal.Record) error {
	q, s := rp.q, &rp.q.state
	switch rec.Kind {
	case wal.KindPut:
		s.pins[pos.Segment()]++
		if rec.Origin != 0 {
			delete(rp.rolls, rec.Origin)
		}
		if rec.Threaded {
			s.raiseLoaded(rec.ListSlot - int64(len(s.heads)))
			*s.head(rec.ListSlot) = listHead{slot: rec.ListSlot, head: pos}
			s.diskPending++
			if s.slotOf(rec.DeliverAt) == rec.ListSlot {
				s.slotDue[s.index(rec.ListSlot)]++
			}
			if !isGenerated(rec.ID, originOf(rec.Origin, pos)) {
				s.userIDs[rec.ID] = s.slotOf(rec.DeliverAt)
			}
			return nil
		}
		s.raiseLoaded(s.slotOf(rec.DeliverAt))
		if !q.insertLocked(&entry{pos: pos, origin: originOf(rec.Origin, pos), id: rec.ID, topic: rec.Topic, payload: rec.Payload, deliverAt: rec.DeliverAt, attempt: rec.Attempt}) {
			q.unpinLocked(pos)
		}
	case wal.KindCancel:
		if rec.Threaded {
			s.raiseLoaded(rec.ListSlot - int64(len(s.heads)))
			s.pins[pos.Segment()]++
			*s.head(rec.ListSlot) = listHead{slot: rec.ListSlot, head: pos}
			s.cancelDueLocked(rec.ID, rec.ListSlot)
			s.diskPending--
			delete(s.userIDs, rec.ID)
			return nil
		}
		if e := q.lookupLocked(rec.ID); e != nil {
			q.removeLocked(e)
		}
	case wal.KindAck:
		if e := s.byOrigin[rec.Target]; e != nil {
			q.removeLocked(e)
		}
	case wal.KindUpdate:
		if e := s.byOrigin[rec.Target]; e != nil {
			e.deliverAt, e.attempt = rec.DeliverAt, rec.Attempt
			if rec.Topic != "" {
				e.topic, e.topicChanged = rec.Topic, true
			}
		}
	case wal.KindAdvance:
		if rec.Slot <= s.loaded {
			return fmt.Errorf("%w: advance to slot %d at %v after slot %d was loaded", ErrCorrupt, rec.Slot, pos, s.loaded)
		}
		h := s.peek(rec.Slot)
		recs, err := q.readList(rp.r, h.head, 0)
		if err != nil && !(rp.tolerant && errors.Is(err, wal.ErrMissing)) {
			return err
		}
		if err := q.advanceLocked(rec.Slot, false); err != nil {
			return err
		}
		rolls, err := q.applyListLocked(rec.Slot, recs, false)
		if err != nil {
			return err
		}
		for _, e := range rolls {
			rp.rolls[e.origin] = e
		}
	case wal.KindRelocate:
		return rp.replayRelocate(pos, rec.Slot)
	}
	return nil
}

// raiseLoaded moves loaded up to slot b during replay. The loader advances past empty slots
// without writing Advance records, so the log shows how far it had gone only indirectly: a Put
// straight into memory was due in a loaded slot, and a record threaded into list L was written
// when every slot up to L minus the horizon was loaded. Every non-empty list up to there has had
// its Advance record replayed already, since that record came first in the log; loaded stops
// short of any list still present all the same, so nothing is skipped.
func (s *state) raiseLoaded(b int64) {
	if b-s.loaded > int64(len(s.heads)) {
		for _, h := range s.heads {
			if h.head != 0 && h.slot > s.loaded && h.slot <= b {
				b = h.slot - 1
			}
		}
		s.loaded = max(s.loaded, b)
		return
	}
	for s.loaded < b {
		if h := s.heads[s.index(s.loaded+1)]; h.head != 0 && h.slot == s.loaded+1 {
			return
		}
		s.loaded++
	}
}

// recountLists counts the messages in the disk wheel, and when due is set the messages due in
// each list's own slot, by reading the lists, for a checkpoint written before the counts were kept
// as they are now (versions 1 and 2). It reads every message in the disk wheel, once.
func (q *Queue) recountLists(due bool) error {
	s := &q.state
	r := q.log.NewReader()
	s.diskPending = 0
	for i, h := range s.heads {
		if h.head == 0 {
			continue
		}
		recs, err := q.readList(r, h.head, 0)
		if err != nil {
			return err
		}
		for _, lr := range recs {
			switch lr.rec.Kind {
			case wal.KindPut:
				s.diskPending++
			case wal.KindCancel:
				s.diskPending--
			}
		}
		if due {
			s.slotDue[i] = s.countDue(h.slot, recs)
		}
	}
	return nil
}
