package delayq

import (
	"fmt"
	"maps"
	"testing"

	"github.com/tockwheel/tock/delayq/internal/wal"
)

// check walks the disk wheel and the delivery index and verifies every invariant of the state (see
// diskwheel.go and index.go): lists are threaded strictly backwards within their slot, each sits at
// its slot's index within the horizon, the wheel's counts and chosen IDs match the lists, the index's
// entries are where their states say, and pins count exactly the records that are needed.
func check(t testing.TB, q *Queue) {
	t.Helper()
	if err := q.checkState(); err != nil {
		t.Fatal(err)
	}
}

func (q *Queue) checkState() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	pins := make(map[uint32]int64)
	if err := q.checkDisk(pins); err != nil {
		return err
	}
	if err := q.checkMem(pins); err != nil {
		return err
	}
	if len(q.moving) != 0 {
		return fmt.Errorf("%d copies owed", len(q.moving))
	}
	if !maps.Equal(pins, q.pins) {
		return fmt.Errorf("pins %v, want %v", q.pins, pins)
	}
	return nil
}

// checkDisk checks the disk wheel and adds the pins of its records to pins.
func (q *Queue) checkDisk(pins map[uint32]int64) error {
	w := &q.disk
	n := w.horizon()
	var puts int64
	ids := make(map[string]idLoc)
	r := q.log.NewReader()
	for i, l := range w.lists {
		if l.head == 0 {
			continue
		}
		if l.slot <= w.loaded || l.slot > w.loaded+n || ((l.slot%n)+n)%n != int64(i) {
			return fmt.Errorf("list of slot %d at index %d, loaded %d, horizon %d", l.slot, i, w.loaded, n)
		}
		recs, err := q.readList(r, l.slot)
		if err != nil {
			return err
		}
		if first := recs[len(recs)-1].pos; l.first != first {
			return fmt.Errorf("list of slot %d starts at %v, says %v", l.slot, first, l.first)
		}
		if due := w.countDue(l.slot, recs); due != l.due {
			return fmt.Errorf("list of slot %d counts %d messages due in it, holds %d", l.slot, l.due, due)
		}
		cancelled := make(map[string]bool)
		for _, lr := range recs {
			switch lr.rec.Kind {
			case wal.KindCancel:
				puts-- // each threaded Cancel cancels one Put of its list
				cancelled[lr.rec.ID] = true
			case wal.KindPut:
				puts++
				slot := w.slotOf(lr.rec.DeliverAt)
				if slot < l.slot || (slot-l.slot)%n != 0 {
					return fmt.Errorf("message of slot %d in list %d", slot, l.slot)
				}
				if _, seen := ids[lr.rec.ID]; !seen && !cancelled[lr.rec.ID] && !isGenerated(lr.rec.ID, originOf(lr.rec.Origin, lr.pos)) {
					ids[lr.rec.ID] = idLoc{slot: slot, pos: lr.pos}
				}
			}
			pins[lr.pos.Segment()]++
		}
	}
	if puts != w.pending {
		return fmt.Errorf("pending %d, lists hold %d puts not cancelled", w.pending, puts)
	}
	for id, loc := range w.ids {
		if want, ok := ids[id]; !ok || loc.slot != want.slot || loc.pos != 0 && loc.pos != want.pos {
			return fmt.Errorf("chosen ID %q in the wheel at %+v, lists hold it at %+v", id, loc, want)
		}
	}
	if len(ids) != len(w.ids) {
		return fmt.Errorf("%d chosen IDs in the wheel, lists hold %d", len(w.ids), len(ids))
	}
	return nil
}

// checkMem checks the delivery index and adds the pins of its entries to pins.
func (q *Queue) checkMem(pins map[uint32]int64) error {
	x := &q.mem
	var nready, nleased, nwaiting int
	for o, e := range x.byOrigin {
		if e.origin != o {
			return fmt.Errorf("entry of origin %v filed under %v", e.origin, o)
		}
		if e.userID != (x.byID[e.id] == e) {
			return fmt.Errorf("entry %s: user ID %v, in byID %v", e.id, e.userID, x.byID[e.id] == e)
		}
		if (e.bucket != nil) != (e.st == waiting || e.st == leased) {
			return fmt.Errorf("entry %s in state %d has bucket %v", e.id, e.st, e.bucket)
		}
		pins[e.pos.Segment()]++
		switch e.st {
		case waiting:
			nwaiting++
		case ready:
			nready++
		case leased:
			nleased++
		}
	}
	var listed int
	for name, tq := range x.topics {
		c := 0
		for e := tq.head; e != nil; e = e.next {
			if e.st != ready || e.topic != name || x.byOrigin[e.origin] != e {
				return fmt.Errorf("topic %q lists entry %v in state %d of topic %q", name, e.pos, e.st, e.topic)
			}
			c++
		}
		if c != tq.n {
			return fmt.Errorf("topic %q counts %d, lists %d", name, tq.n, c)
		}
		listed += c
	}
	if nready != x.ready || listed != x.ready || nleased != x.leased {
		return fmt.Errorf("ready %d/%d/%d, leased %d/%d", nready, listed, x.ready, nleased, x.leased)
	}
	inBuckets := 0
	for key, b := range x.buckets {
		c, w := 0, 0
		for e := b.head; e != nil; e = e.next {
			if e.bucket != b {
				return fmt.Errorf("bucket %d lists entry %s of bucket %v", key, e.id, e.bucket)
			}
			c++
			if e.st == waiting {
				w++
			}
		}
		if c != b.n || b.key != key || c == 0 || w != b.waiting {
			return fmt.Errorf("bucket %d (key %d) counts %d (%d waiting), lists %d (%d waiting)", key, b.key, b.n, b.waiting, c, w)
		}
		inBuckets += c
	}
	if inBuckets != nwaiting+nleased {
		return fmt.Errorf("%d entries in buckets, %d waiting and %d leased", inBuckets, nwaiting, nleased)
	}
	return nil
}
