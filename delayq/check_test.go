package delayq

import (
	"fmt"
	"maps"
	"testing"

	"github.com/tockwheel/tock/delayq/internal/wal"
)

// check walks the disk wheel and the messages in memory and verifies every invariant of the state:
// lists are threaded strictly backwards within their slot, each sits at its slot's index within
// the horizon, diskPending counts their Puts less their Cancels, and pins count exactly the records that are needed.
func check(t testing.TB, q *Queue) {
	t.Helper()
	if err := q.checkState(); err != nil {
		t.Fatal(err)
	}
}

func (q *Queue) checkState() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	s := &q.state
	n := int64(len(s.heads))
	pins := make(map[uint32]int64)
	var puts int64
	r := q.log.NewReader()
	for i, h := range s.heads {
		if h.head == 0 {
			if s.slotDue[i] != 0 {
				return fmt.Errorf("empty list at index %d counts %d messages due", i, s.slotDue[i])
			}
			continue
		}
		if h.slot <= s.loaded || h.slot > s.loaded+n || ((h.slot%n)+n)%n != int64(i) {
			return fmt.Errorf("list of slot %d at index %d, loaded %d, horizon %d", h.slot, i, s.loaded, n)
		}
		recs, err := q.readList(r, h.head, 0)
		if err != nil {
			return err
		}
		if n := s.countDue(h.slot, recs); n != s.slotDue[i] {
			return fmt.Errorf("list of slot %d counts %d messages due in it, holds %d", h.slot, s.slotDue[i], n)
		}
		for _, lr := range recs {
			if lr.rec.ListSlot != h.slot {
				return fmt.Errorf("record at %v of list %d claims list %d", lr.pos, h.slot, lr.rec.ListSlot)
			}
			if lr.rec.Kind == wal.KindCancel {
				puts-- // each threaded Cancel cancels one Put of its list
			}
			if lr.rec.Kind == wal.KindPut {
				puts++
				if slot := s.slotOf(lr.rec.DeliverAt); slot < h.slot || (slot-h.slot)%n != 0 {
					return fmt.Errorf("message of slot %d in list %d", slot, h.slot)
				}
			}
			pins[lr.pos.Segment()]++
		}
	}
	if puts != s.diskPending {
		return fmt.Errorf("diskPending %d, lists hold %d puts not cancelled", s.diskPending, puts)
	}
	var nready, nleased int
	var nwaiting int
	for o, e := range s.byOrigin {
		if e.origin != o {
			return fmt.Errorf("entry of origin %v filed under %v", e.origin, o)
		}
		if e.userID != (s.byID[e.id] == e) {
			return fmt.Errorf("entry %s: user ID %v, in byID %v", e.id, e.userID, s.byID[e.id] == e)
		}
		if (e.bucket != nil) != (e.st == waiting || e.st == leased) {
			return fmt.Errorf("entry %s in state %d has bucket %v", e.id, e.st, e.bucket)
		}
		if e.st == waiting {
			nwaiting++
		}
		pins[e.pos.Segment()]++
		switch e.st {
		case ready:
			nready++
		case leased:
			nleased++
		}
	}
	var listed int
	for name, tq := range s.topics {
		c := 0
		for e := tq.head; e != nil; e = e.next {
			if e.st != ready || e.topic != name || s.byOrigin[e.origin] != e {
				return fmt.Errorf("topic %q lists entry %v in state %d of topic %q", name, e.pos, e.st, e.topic)
			}
			c++
		}
		if c != tq.n {
			return fmt.Errorf("topic %q counts %d, lists %d", name, tq.n, c)
		}
		listed += c
	}
	if nready != s.ready || listed != s.ready || nleased != s.leased {
		return fmt.Errorf("ready %d/%d/%d, leased %d/%d", nready, listed, s.ready, nleased, s.leased)
	}
	inBuckets := 0
	for key, b := range s.buckets {
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
	if !maps.Equal(pins, s.pins) {
		return fmt.Errorf("pins %v, want %v", s.pins, pins)
	}
	return nil
}
