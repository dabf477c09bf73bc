package delayq

import (
	"github.com/tockwheel/tock/delayq/internal/format"
	"github.com/tockwheel/tock/delayq/internal/wal"
)

// The disk wheel holds the messages that are not due soon: one list per slot of the horizon,
// threaded backwards through the log (each record holds the position of the list's previous
// record), so the wheel costs a few words per slot however many messages wait in it. The loader
// moves each slot's list into memory (the delivery index) a preload ahead of the slot's start;
// messages due beyond the horizon are written again into a later list when their list is loaded
// (rolled).
//
// Invariants, which checkState verifies in tests:
//   - lists[i] is empty (head 0), or holds the list of the one slot s in (loaded, loaded+n] with
//     s ≡ i (mod n), n = len(lists);
//   - a list's records are Put, Cancel and Purge records threaded into it (ListSlot == s), each
//     with a Prev before itself, ending at 0;
//   - a Put in the list of slot s is due in s, or a whole number of horizons after s;
//   - n counts the list's Puts less its Cancels and the Puts its Purges took (a Cancel cancels one
//     Put of its list, a Purge every pending Put of its topic); pending is the sum of every list's
//     n; due counts those of them due in s itself;
//   - topics holds, for each topic with messages in the list or taken from it by a Cancel or
//     Purge, how many (n) and how many due in s (due), as n and due do for all topics, a bound on
//     the latest slot they are due in, and whether some were taken;
//     a Cancel written before Cancels named their topic is taken off only when its list leaves
//     the wheel, so a topic's n can count it until then;
//   - ids maps the chosen ID of every message in a list to the slot it is due in and the position
//     of its Put record (0 when not known, in an entry restored from an older checkpoint).
type diskWheel struct {
	slotNs int64 // slot length in nanoseconds
	// loaded is the newest slot whose list has been moved to memory. Messages due in slots up to
	// loaded are in the delivery index; later ones are in lists.
	loaded int64
	lists  []slotList
	// pending counts the messages in the lists.
	pending int64
	// topics is the queue's set of topics, which lists count their messages by.
	topics topicSet
	// ids maps the chosen ID of each message in the lists to where it is, for Cancel and for
	// telling a retried Put from a duplicate.
	ids map[string]idLoc

	// The changes since the last checkpoint (see checkpoint.go): the lists changed, by index, and
	// the changes to ids, in order.
	dirty []uint64
	idOps []idOp
}

// An idOp is a change to diskWheel.ids: a set, or a delete when del.
type idOp struct {
	id  string
	loc idLoc
	del bool
}

func (w *diskWheel) setID(id string, loc idLoc) {
	w.ids[id] = loc
	w.idOps = append(w.idOps, idOp{id: id, loc: loc})
}

func (w *diskWheel) deleteID(id string) {
	if _, ok := w.ids[id]; ok {
		delete(w.ids, id)
		w.idOps = append(w.idOps, idOp{id: id, del: true})
	}
}

// touch records that the list at index i changed.
func (w *diskWheel) touch(i int) { w.dirty[i/64] |= 1 << (i % 64) }

// A slotList is the list of one slot of the disk wheel.
type slotList struct {
	slot int64   // absolute slot; meaningful only while head != 0
	head wal.Pos // its newest record; 0: the list is empty
	// first is the position of its oldest record (0 when not known, in a list restored from an
	// older checkpoint): every record threaded into slot from first to head is in the list, which
	// is how the rest of a list whose chain is broken by damage is found (see readChain).
	first wal.Pos
	// due counts the list's messages due in slot itself, less those cancelled: the forecast of
	// DueCounts. Messages the list only holds until they roll are not counted until they are
	// rolled into their own slot's list.
	due int64
	// n counts the list's messages, those it holds until they roll included.
	n int64
	// topics counts them by topic.
	topics []listTopic
}

// A listTopic is what a list holds of one topic.
type listTopic struct {
	t *topicState
	// n counts the topic's messages in the list; due, those of them due in the list's own slot.
	n, due int64
	// last is at or after the slot the topic's latest message in the list is due in: messages
	// after the list's own slot are found in it only up to there.
	last int64
	// taken: a Cancel or Purge in the list took messages of the topic. Damage to one of them loses
	// what it took: the message is in the list after all, which counts cannot tell, so readers
	// that go by counts (the listing, see pageDisk) read the list whatever they say. The counts
	// of a topic taken stay in the list, at zero when nothing is left.
	taken bool
}

// topic returns the counts of t in l, adding them (empty) when l has none.
func (l *slotList) topic(t *topicState) *listTopic {
	for i := range l.topics {
		if l.topics[i].t == t {
			return &l.topics[i]
		}
	}
	t.hold()
	t.lists++
	l.topics = append(l.topics, listTopic{t: t, last: l.slot})
	return &l.topics[len(l.topics)-1]
}

// find returns the counts of t in l, or nil.
func (l *slotList) find(t *topicState) *listTopic {
	for i := range l.topics {
		if l.topics[i].t == t {
			return &l.topics[i]
		}
	}
	return nil
}

// dropTopic takes the counts of the topic at index i out of l, adding them back to nothing: the
// caller has taken them off the topic.
func (w *diskWheel) dropTopic(l *slotList, i int) {
	t := l.topics[i].t
	l.topics = append(l.topics[:i], l.topics[i+1:]...)
	t.lists--
	w.topics.drop(t)
}

func newDiskWheel(slotNs int64, slots int, topics topicSet) diskWheel {
	return diskWheel{slotNs: slotNs, lists: make([]slotList, slots), ids: make(map[string]idLoc), dirty: make([]uint64, (slots+63)/64),
		topics: topics}
}

// An idLoc is where the message with a chosen ID waits in the disk wheel.
type idLoc struct {
	slot int64   // the slot it is due in
	pos  wal.Pos // its Put record; 0 when not known
}

// horizon returns the number of slots the wheel reaches ahead of loaded.
func (w *diskWheel) horizon() int64 { return int64(len(w.lists)) }

// slotOf returns the slot of a time in Unix nanoseconds.
func (w *diskWheel) slotOf(ns int64) int64 {
	q := ns / w.slotNs
	if ns%w.slotNs < 0 {
		q--
	}
	return q
}

// slotStart returns the start of slot in Unix nanoseconds.
func (w *diskWheel) slotStart(slot int64) int64 { return slot * w.slotNs }

// duePassed counts the messages of the lists of slots that ended by now (Unix nanoseconds) and
// that the loader has not loaded yet, due in their own slot: due, yet in the wheel, after a
// restart or while the loader catches up. A list's messages held until they roll are not due.
// It walks the slots from loaded on, none once the loader has caught up.
func (w *diskWheel) duePassed(now int64) int64 {
	var n int64
	w.passed(now, func(l *slotList) { n += l.due })
	return n
}

// duePassedByTopic is duePassed by topic; nil when none.
func (w *diskWheel) duePassedByTopic(now int64) map[*topicState]int64 {
	var by map[*topicState]int64
	w.passed(now, func(l *slotList) {
		for _, lt := range l.topics {
			if lt.due > 0 {
				if by == nil {
					by = make(map[*topicState]int64)
				}
				by[lt.t] += lt.due
			}
		}
	})
	return by
}

// passed calls f with each list of a slot that ended by now and is not loaded yet.
func (w *diskWheel) passed(now int64, f func(*slotList)) {
	for s := w.loaded + 1; s < min(w.slotOf(now), w.loaded+1+w.horizon()); s++ {
		if l := &w.lists[w.index(s)]; l.head != 0 && l.slot == s {
			f(l)
		}
	}
}

// listFor returns the list a message of a slot after loaded goes into: its own slot within the
// horizon, otherwise the last slot within the horizon that shares its wheel index, where it will
// be rolled forward when loaded.
func (w *diskWheel) listFor(slot int64) int64 {
	n := w.horizon()
	limit := w.loaded + n
	if slot <= limit {
		return slot
	}
	laps := (slot - limit + n - 1) / n
	return slot - laps*n
}

// index returns the wheel index of slot.
func (w *diskWheel) index(slot int64) int {
	n := w.horizon()
	return int(((slot % n) + n) % n)
}

// peek returns the list of slot list, which is empty if its wheel index holds another lap's list.
func (w *diskWheel) peek(list int64) slotList {
	if l := w.lists[w.index(list)]; l.slot == list && l.head != 0 {
		return l
	}
	return slotList{}
}

// at returns the list of slot list for updating, emptied first if its index held another lap's
// list. It must only be called for a list in (loaded, loaded+horizon], where the index holds no
// other live list.
func (w *diskWheel) at(list int64) *slotList {
	i := w.index(list)
	w.touch(i)
	l := &w.lists[i]
	if l.slot != list || l.head == 0 {
		*l = slotList{slot: list}
	}
	return l
}

// push threads rec, a Put, Cancel or Purge record at pos, into its list. A Purge takes off the
// counts of its topic; the caller forgets the chosen IDs of the messages it purged. A Cancel or
// Purge marks its topic taken in the list.
func (w *diskWheel) push(pos wal.Pos, rec *format.Record) {
	l := w.at(rec.ListSlot)
	if l.head == 0 {
		l.first = pos
	}
	l.head = pos
	switch rec.Kind {
	case format.KindCancel:
		due := w.dueIn(rec.ID, rec.ListSlot)
		w.pending--
		l.n--
		if due {
			l.due--
		}
		if rec.Topic != "" {
			w.takeOff(l, w.topics.get(rec.Topic), 1, due)
		}
		w.deleteID(rec.ID)
	case format.KindPurge:
		lt := l.topic(w.topics.get(rec.Topic))
		w.pending -= lt.n
		l.n -= lt.n
		l.due -= lt.due
		lt.t.disk -= lt.n
		lt.n, lt.due, lt.taken = 0, 0, true
	case format.KindPut:
		w.pending++
		l.n++
		slot := w.slotOf(rec.DeliverAt)
		lt := l.topic(w.topics.get(rec.Topic))
		lt.n++
		lt.t.disk++
		lt.last = max(lt.last, slot)
		if slot == rec.ListSlot {
			l.due++
			lt.due++
		}
		if !isGenerated(rec.ID, originOf(rec.Origin, pos)) {
			w.setID(rec.ID, idLoc{slot: slot, pos: pos})
		}
	}
}

// takeOff takes n messages of t off l's counts of it, due ones among them when due, and notes
// that the list took messages of t.
func (w *diskWheel) takeOff(l *slotList, t *topicState, n int64, due bool) {
	lt := l.topic(t)
	lt.n -= n
	t.disk -= n
	if due {
		lt.due -= min(n, lt.due)
	}
	if lt.n < 0 {
		t.disk -= lt.n // a count the list could not match (a Put lost to damage)
		lt.n = 0
	}
	lt.taken = true
}

// dueIn reports whether the message with a Cancel of id threaded into list is due in the list's
// own slot. It must be called before id leaves ids. It decides from the wheel alone, so replaying
// the Cancel record decides the same.
func (w *diskWheel) dueIn(id string, list int64) bool {
	slot, _, ok := w.findSlot(id)
	return ok && slot == list
}

// detach empties the list of slot list, which is taken out of the wheel whole (loaded or
// relocated), and takes its messages off the counts.
func (w *diskWheel) detach(list int64) {
	i := w.index(list)
	l := &w.lists[i]
	if l.slot != list {
		return
	}
	w.pending -= l.n
	for len(l.topics) > 0 {
		l.topics[0].t.disk -= l.topics[0].n
		w.dropTopic(l, 0)
	}
	*l = slotList{}
	w.touch(i)
}

// findSlot returns the slot of a message not loaded yet, and the position of its first record
// when the ID tells it (0 otherwise).
func (w *diskWheel) findSlot(id string) (slot int64, origin wal.Pos, ok bool) {
	if loc, ok := w.ids[id]; ok {
		return loc.slot, 0, true
	}
	at, origin, ok := parseID(id)
	if !ok {
		return 0, 0, false
	}
	return w.slotOf(at), origin, true
}

// raiseLoaded moves loaded up to slot b during replay. The loader passes empty slots without
// writing records, so the log shows how far it had gone only indirectly: a Put straight into
// memory was due in a loaded slot, and a record threaded into list L was written when every slot
// up to L minus the horizon was loaded. Every non-empty list up to there has had its Advance
// record replayed already, since that record came first in the log; loaded stops short of any
// list still present all the same, so nothing is skipped. Live, it never moves loaded: records are
// written for slots after it.
func (w *diskWheel) raiseLoaded(b int64) {
	if b-w.loaded > w.horizon() {
		for _, l := range w.lists {
			if l.head != 0 && l.slot > w.loaded && l.slot <= b {
				b = l.slot - 1
			}
		}
		w.loaded = max(w.loaded, b)
		return
	}
	for w.loaded < b {
		if l := w.lists[w.index(w.loaded+1)]; l.head != 0 && l.slot == w.loaded+1 {
			return
		}
		w.loaded++
	}
}
