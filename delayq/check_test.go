package delayq

import (
	"fmt"
	"maps"
	"testing"

	"github.com/tockwheel/tock/delayq/internal/format"
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
	if err := q.checkSchedules(); err != nil {
		return err
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
	var pending int64
	ids := make(map[string]idLoc)
	disk := make(map[*topicState]int64)
	lists := make(map[*topicState]int)
	r := newRecordReader(q.log)
	for i, l := range w.lists {
		if l.head == 0 {
			if l.n != 0 || len(l.topics) != 0 {
				return fmt.Errorf("empty list at index %d counts %d messages, %d topics", i, l.n, len(l.topics))
			}
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
		// The counts, in all and by topic: each live Put.
		var v listView
		var live int64
		type counts struct{ n, due, last int64 }
		byTopic := make(map[string]*counts)
		for _, lr := range recs {
			rec := &lr.rec
			pins[lr.pos.Segment()]++
			isLive := v.live(rec)
			if rec.Kind != format.KindPut {
				continue
			}
			slot := w.slotOf(rec.DeliverAt)
			if slot < l.slot || (slot-l.slot)%n != 0 {
				return fmt.Errorf("message of slot %d in list %d", slot, l.slot)
			}
			if isLive {
				live++
				if _, seen := ids[rec.ID]; !seen && !isGenerated(rec.ID, originOf(rec.Origin, lr.pos)) {
					ids[rec.ID] = idLoc{slot: slot, pos: lr.pos}
				}
			}
			if isLive {
				c := byTopic[rec.Topic]
				if c == nil {
					c = &counts{}
					byTopic[rec.Topic] = c
				}
				c.n++
				c.last = max(c.last, slot)
				if slot == l.slot {
					c.due++
				}
			}
		}
		if live != l.n {
			return fmt.Errorf("list of slot %d counts %d messages, holds %d", l.slot, l.n, live)
		}
		pending += l.n
		for _, lt := range l.topics {
			c := byTopic[lt.t.name]
			if c == nil {
				c = &counts{}
			}
			if lt.n != c.n || lt.due != c.due || lt.last < c.last || q.mem.topics[lt.t.name] != lt.t {
				return fmt.Errorf("list of slot %d counts %+v of topic %q, holds %+v", l.slot, lt, lt.t.name, *c)
			}
			delete(byTopic, lt.t.name)
			disk[lt.t] += lt.n
			lists[lt.t]++
		}
		for name, c := range byTopic {
			if c.n != 0 {
				return fmt.Errorf("list of slot %d holds %d messages of topic %q, counts none", l.slot, c.n, name)
			}
		}
	}
	if pending != w.pending {
		return fmt.Errorf("pending %d, lists count %d", w.pending, pending)
	}
	for _, t := range q.mem.topics {
		if t.disk != disk[t] || t.lists != lists[t] {
			return fmt.Errorf("topic %q counts %d messages in %d lists of the wheel, lists hold %d in %d", t.name, t.disk, t.lists, disk[t], lists[t])
		}
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

// checkMem checks the delivery index and its topics, and adds the pins of its entries to pins.
func (q *Queue) checkMem(pins map[uint32]int64) error {
	x := &q.mem
	var nready, nleased, nwaiting int
	type counts struct{ scheduled, ready, leased, deadWaiting, dead, refs int }
	want := make(map[*topicState]*counts)
	of := func(t *topicState) *counts {
		c := want[t]
		if c == nil {
			c = &counts{}
			want[t] = c
		}
		return c
	}
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
		if x.topics[e.t.name] != e.t || x.topics[e.home.name] != e.home {
			return fmt.Errorf("entry %s on topic %q put on %q, not the topics of the set", e.id, e.t.name, e.home.name)
		}
		pins[e.pos.Segment()]++
		of(e.t).refs++
		of(e.home).refs++
		switch e.st {
		case waiting:
			nwaiting++
			of(e.t).scheduled++
		case ready:
			nready++
			of(e.t).ready++
		case leased:
			nleased++
			of(e.t).leased++
		}
		if e.dead() {
			of(e.home).dead++
			if _, ok := e.home.dead[e]; !ok {
				return fmt.Errorf("dead letter %s not in the dead letters of %q", e.id, e.home.name)
			}
			if e.st != leased {
				of(e.home).deadWaiting++
			}
		}
	}
	for name, t := range x.topics {
		if t.name != name {
			return fmt.Errorf("topic %q filed under %q", t.name, name)
		}
		c := of(t)
		n := 0
		for e := t.head; e != nil; e = e.next {
			if e.st != ready || e.t != t || x.byOrigin[e.origin] != e {
				return fmt.Errorf("topic %q lists entry %v in state %d of topic %q", name, e.pos, e.st, e.t.name)
			}
			if e.prev != nil && e.prev.seq >= e.seq || e.seq > x.seq {
				return fmt.Errorf("topic %q: ready entry %v numbered %d after %d (last %d): paging would skip or repeat it", name, e.pos, e.seq, e.prev.seq, x.seq)
			}
			n++
		}
		timed := 0
		for e := t.timed; e != nil; e = e.tnext {
			if e.bucket == nil || e.t != t {
				return fmt.Errorf("topic %q times entry %s in no bucket, or of topic %q", name, e.id, e.t.name)
			}
			timed++
		}
		if n != t.ready || c.ready != t.ready || c.scheduled != t.scheduled || c.leased != t.leased || timed != t.scheduled+t.leased ||
			c.deadWaiting != t.deadWaiting || c.dead != len(t.dead) || c.refs+t.lists != t.refs {
			return fmt.Errorf("topic %q counts ready %d, scheduled %d, leased %d, dead %d of %d, refs %d; holds %d (%d listed), %d (%d timed), %d, %d of %d, %d refs and %d lists",
				name, t.ready, t.scheduled, t.leased, t.deadWaiting, len(t.dead), t.refs, c.ready, n, c.scheduled, timed, c.leased, c.deadWaiting, c.dead, c.refs, t.lists)
		}
		if t.refs == 0 && t.waiters == 0 && !t.paused {
			return fmt.Errorf("topic %q is kept with nothing holding it", name)
		}
	}
	if nready != x.ready || nleased != x.leased {
		return fmt.Errorf("ready %d/%d, leased %d/%d", nready, x.ready, nleased, x.leased)
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

// checkSchedules checks the schedules (see schedule.go): the heap holds exactly the running
// schedules with an act time, in heap order, each knowing its place; the paused are counted; and
// the timer waits for the earliest act time, while the queue is open.
func (q *Queue) checkSchedules() error {
	x := &q.sched
	paused, inHeap := 0, 0
	var err error
	x.byName.Ascend(func(s *sched) bool {
		if s.paused {
			paused++
		}
		want := !s.paused && s.act != 0
		switch {
		case want != (s.heap >= 0):
			err = fmt.Errorf("schedule %q (paused %v, act %d) at heap index %d", s.name, s.paused, s.act, s.heap)
		case want && (int(s.heap) >= len(x.due) || x.due[s.heap] != s):
			err = fmt.Errorf("schedule %q at heap index %d of %d, not there", s.name, s.heap, len(x.due))
		case s.misfire == 0 || s.overlap == 0:
			err = fmt.Errorf("schedule %q without its policies", s.name)
		}
		if want {
			inHeap++
		}
		return err == nil
	})
	if err != nil {
		return err
	}
	if inHeap != len(x.due) || paused != x.paused {
		return fmt.Errorf("%d schedules in a heap of %d, %d paused counted %d", inHeap, len(x.due), paused, x.paused)
	}
	for i := 1; i < len(x.due); i++ {
		if x.due[(i-1)/2].act > x.due[i].act {
			return fmt.Errorf("schedule heap out of order at %d", i)
		}
	}
	if x.live && x.timerAt != 0 && x.timerAt > x.earliest() && x.earliest() != 0 {
		return fmt.Errorf("schedule timer at %d, after the earliest act time %d", x.timerAt, x.earliest())
	}
	return nil
}
