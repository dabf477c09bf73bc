package delayq

import (
	"time"

	"github.com/tockwheel/tock"
	"github.com/tockwheel/tock/delayq/internal/wal"
)

// The delivery index holds the messages in memory: those of loaded slots, and those put due
// within the near window. Each waits for its time on the tock wheel, then waits in its topic's
// ready list for Receive, then is leased to a consumer until acked or its lease runs out.
//
// Invariants, which checkState verifies in tests:
//   - byOrigin holds every entry under its origin; byID holds every entry with a chosen ID;
//   - a waiting entry is in the bucket of the millisecond it is due in, a leased one in the bucket
//     its lease ends in, a ready one in its topic's ready list and no bucket;
//   - ready and leased count the entries in those states; a bucket's waiting counts its waiting
//     entries; the counts of topics are as topic.go says.
type deliveryIndex struct {
	wheel *tock.Wheel
	fire  func(*bucket) // a bucket's timer callback
	// wheelFailed is called when a timer cannot be set on the wheel, which is stopped.
	wheelFailed func(error)

	byOrigin map[wal.Pos]*entry // by their first record
	byID     map[string]*entry  // those with chosen IDs (the latest, for duplicates)
	buckets  map[int64]*bucket  // timer buckets by millisecond
	topics   topicSet
	ready    int
	leased   int
	lateness latenessRing // of messages coming due for the first time
	seq      uint64       // the number of the last entry put at a ready list's tail (see makeReady)

	// ops are the changes to the entries since the last checkpoint (see checkpoint.go): one op per
	// entry, kept up to date in place, and none for an entry added and removed in between, so that
	// a burst of messages loaded and acked between two checkpoints costs them nothing. epoch
	// numbers the journals: an entry's jop is its op's index while its jepoch is epoch.
	ops   []entryOp
	epoch uint32
	// removedOps are the origins of the entries the last checkpoint holds that were removed since,
	// and had no op in ops: a removal is all their op would say, in a tenth of its size. A burst
	// acked after the checkpoint that followed its load removes an entry with each ack; as ops of
	// 80 bytes, growing the journal to 100,000 of them was 6% of tockd's CPU in the burst.
	removedOps []wal.Pos
}

// takeOps returns the journal of entry changes and starts the next: the ops, and the origins of
// the entries removed that have none.
func (x *deliveryIndex) takeOps() ([]entryOp, []wal.Pos) {
	ops, removed := x.ops, x.removedOps
	x.ops, x.removedOps = nil, nil
	x.epoch++
	return ops, removed
}

// An entryOp is a change to the entries a checkpoint holds: e, as it is now, or its removal, or
// nothing (skip). added says that the entry was added since the last checkpoint, which does not
// hold it: the op replaces nothing.
type entryOp struct {
	ce    ckEntry
	del   bool
	skip  bool
	added bool
}

// changed records that e was added (added set) or its checkpointed fields changed.
func (x *deliveryIndex) changed(e *entry, added bool) {
	ce := ckEntry{pos: e.pos, origin: e.origin, deliverAt: e.deliverAt, attempt: e.attempt, failure: e.failure, failedAt: e.failedAt, reason: e.reason}
	if e.dead() {
		ce.topic = e.t.name
	}
	if e.jepoch == x.epoch && e.jop >= 0 {
		x.ops[e.jop].ce = ce
		return
	}
	e.jepoch, e.jop, e.jnew = x.epoch, int32(len(x.ops)), added
	x.ops = append(x.ops, entryOp{ce: ce, added: added})
}

// forget records that the entry of origin, which the last checkpoint holds but memory does not
// (its record was lost to damage), is gone.
func (x *deliveryIndex) forget(origin wal.Pos) {
	x.removedOps = append(x.removedOps, origin)
}

// removed records that e was removed.
func (x *deliveryIndex) removed(e *entry) {
	if e.jepoch == x.epoch && e.jop >= 0 {
		if e.jnew {
			// Added since the last checkpoint, which does not hold it: nothing to record.
			x.ops[e.jop] = entryOp{skip: true}
			return
		}
		x.ops[e.jop] = entryOp{ce: ckEntry{origin: e.origin}, del: true}
		return
	}
	x.removedOps = append(x.removedOps, e.origin)
}

func newDeliveryIndex(wheel *tock.Wheel, fire func(*bucket), wheelFailed func(error)) deliveryIndex {
	return deliveryIndex{
		wheel:       wheel,
		fire:        fire,
		wheelFailed: wheelFailed,
		byOrigin:    make(map[wal.Pos]*entry),
		byID:        make(map[string]*entry),
		buckets:     make(map[int64]*bucket),
		topics:      make(topicSet),
		epoch:       1, // a new entry's jepoch, 0, is no journal's
	}
}

// An entry is a message in memory. Its fields are guarded by Queue.mu.
type entry struct {
	pos    wal.Pos // its current Put record
	origin wal.Pos // its first Put record (equal to pos unless copied); names it in memory

	id string
	// t is the topic the entry is on, home the one it was put on: they differ for a dead letter,
	// whose t is a dead-letter topic (not the one in the record at pos).
	t, home   *topicState
	payload   []byte
	headers   map[string]string // nil for none
	deliverAt int64             // Unix nanoseconds
	attempt   uint32            // failed deliveries so far
	// failure says why the last delivery failed (format.FailureNacked, FailureExpired or
	// FailureDeadLettered), and
	// failedAt when; failure is 0 for an entry that has not failed, or whose cause is not known
	// (written by an older version).
	failure  uint8
	failedAt int64
	// reason is the reason the Nack of the last failure gave (queue.WithReason), or "".
	reason string
	// diedAfter is the deliveries a dead letter failed on its topic before it died, when known
	// (in memory only, like reason: a restart counts the maximum attempts).
	diedAfter uint32
	// userID: id was chosen by the producer, so the entry is in byID.
	userID bool

	st    entryState
	lease uint64 // number of the current or last lease; receipts carry it
	seq   uint64 // its place in its topic's ready list, while ready (see makeReady)

	// The entry's op in the checkpoint journal (see deliveryIndex.ops): valid while jepoch is the
	// journal's epoch; jnew: the op adds the entry.
	jop    int32
	jepoch uint32
	jnew   bool

	// bucket is the timer bucket the entry waits in (waiting: until due; leased: until the lease
	// ends), or nil. prev and next link it into its bucket, or into its topic's ready list; tprev
	// and tnext into its topic's timed list while it is in a bucket.
	bucket       *bucket
	prev, next   *entry
	tprev, tnext *entry
}

// dead reports whether e is a dead letter: on the dead-letter topic of the topic it was put on.
func (e *entry) dead() bool { return e.t != e.home }

// newEntry returns the entry of the Put record rec at pos.
func (x *deliveryIndex) newEntry(pos wal.Pos, rec *listRec) *entry {
	t := x.topics.get(rec.Topic)
	return &entry{pos: pos, origin: originOf(rec.Origin, pos), id: rec.ID, t: t, home: t, payload: rec.Payload,
		headers: rec.Headers, deliverAt: rec.DeliverAt, attempt: rec.Attempt}
}

// originOf returns the first record of a message whose Put record at pos names origin.
func originOf(origin, pos wal.Pos) wal.Pos {
	if origin != 0 {
		return origin
	}
	return pos
}

// entryState is where an entry is in delivery.
type entryState uint8

const (
	// waiting: deliverAt is in the future; its bucket's timer makes it ready.
	waiting entryState = iota
	// ready: due, in its topic's ready list, waiting for Receive.
	ready
	// leased: handed to a consumer by Receive; its bucket's timer ends the lease.
	leased
)

// A bucket holds the entries whose timer ends in one millisecond, so that a million messages due
// in one second cost a thousand timers on the wheel, not a million, and each callback moves a
// whole bucket under one lock. A bucket fires at the end of its millisecond: never early.
type bucket struct {
	key  int64 // Unix milliseconds, rounded up: the bucket fires at key ms
	head *entry
	n    int
	// waiting counts the entries that become due when the bucket fires (the others are leases
	// running out), for DueCounts. An entry's state does not change while it is in a bucket.
	waiting int
	timer   tock.Timer
}

const bucketNs = int64(time.Millisecond)

// insert adds e, detached, and reports whether it did: false means a message with the same origin
// is in memory already (a duplicate copy), and e was dropped. The caller arms e.
func (x *deliveryIndex) insert(e *entry) bool {
	if x.byOrigin[e.origin] != nil {
		return false
	}
	x.byOrigin[e.origin] = e
	if !isGenerated(e.id, e.origin) {
		e.userID = true
		x.byID[e.id] = e
	}
	e.t.hold()
	e.home.hold()
	if e.dead() {
		x.addDead(e)
	}
	x.changed(e, true)
	return true
}

// lookup returns the entry with the given ID, or nil.
func (x *deliveryIndex) lookup(id string) *entry {
	if e := x.byID[id]; e != nil {
		return e
	}
	if _, origin, ok := parseID(id); ok {
		if e := x.byOrigin[origin]; e != nil && e.id == id {
			return e
		}
	}
	return nil
}

// remove forgets e: acked, cancelled or found done.
func (x *deliveryIndex) remove(e *entry) {
	x.detach(e)
	delete(x.byOrigin, e.origin)
	x.removed(e)
	if e.userID && x.byID[e.id] == e {
		delete(x.byID, e.id)
	}
	if e.dead() {
		delete(e.home.dead, e)
	}
	x.topics.drop(e.t)
	x.topics.drop(e.home)
}

// move puts e, detached, on topic t: a dead-letter topic, or its home again (requeued).
func (x *deliveryIndex) move(e *entry, t *topicState) {
	if e.dead() {
		delete(e.home.dead, e)
	}
	t.hold()
	x.topics.drop(e.t)
	e.t = t
	if e.dead() {
		x.addDead(e)
	}
}

func (x *deliveryIndex) addDead(e *entry) {
	if e.home.dead == nil {
		e.home.dead = make(map[*entry]struct{})
	}
	e.home.dead[e] = struct{}{}
}

// count adds e to the counts of its state (d = 1) or takes it off them (d = -1), as it enters or
// leaves a bucket or a ready list.
func (x *deliveryIndex) count(e *entry, d int) {
	switch e.st {
	case waiting:
		e.t.scheduled += d
	case ready:
		e.t.ready += d
		x.ready += d
	case leased:
		e.t.leased += d
		x.leased += d
		if d < 0 && e.t.limit != nil && e.t.limit.Concurrency > 0 && e.t.ready > 0 {
			e.t.wake() // a place under the topic's concurrency is free
		}
	}
	if e.dead() && e.st != leased {
		e.home.deadWaiting += d
	}
}

// detach takes e out of its bucket or its topic's ready list, whichever holds it.
func (x *deliveryIndex) detach(e *entry) {
	x.unschedule(e)
	if e.st == ready {
		x.unlinkReady(e)
	}
	e.st = waiting
}

// arm makes e, which is detached, ready at its deliverAt: now if that has passed, else when its
// bucket fires.
func (x *deliveryIndex) arm(e *entry) {
	e.st = waiting
	if e.deliverAt <= time.Now().UnixNano() {
		x.makeReady(e)
		return
	}
	x.schedule(e, e.deliverAt)
}

// schedule puts e, waiting or leased, in the bucket of the millisecond that ends at or after at.
func (x *deliveryIndex) schedule(e *entry, at int64) {
	key := at / bucketNs
	if at%bucketNs > 0 {
		key++
	}
	b := x.buckets[key]
	if b == nil {
		b = &bucket{key: key}
		t, err := x.wheel.AtFunc(time.UnixMilli(key), func() { x.fire(b) })
		if err != nil {
			// The wheel is stopped: the queue is closing (the message is handled after Open), or
			// the owner of a wheel given to it stopped it.
			x.wheelFailed(err)
			return
		}
		b.timer = t
		x.buckets[key] = b
	}
	e.bucket, e.prev, e.next = b, nil, b.head
	if b.head != nil {
		b.head.prev = e
	}
	b.head = e
	b.n++
	if e.st == waiting {
		b.waiting++
	}
	e.tprev, e.tnext = nil, e.t.timed
	if e.t.timed != nil {
		e.t.timed.tprev = e
	}
	e.t.timed = e
	x.count(e, 1)
}

// untime takes e, which was in a bucket, out of its topic's timed list and counts.
func (x *deliveryIndex) untime(e *entry) {
	if e.tprev != nil {
		e.tprev.tnext = e.tnext
	} else {
		e.t.timed = e.tnext
	}
	if e.tnext != nil {
		e.tnext.tprev = e.tprev
	}
	e.tprev, e.tnext = nil, nil
	x.count(e, -1)
}

// unschedule takes e out of its bucket, if any, stopping the bucket's timer when it empties.
func (x *deliveryIndex) unschedule(e *entry) {
	b := e.bucket
	if b == nil {
		return
	}
	if e.prev != nil {
		e.prev.next = e.next
	} else {
		b.head = e.next
	}
	if e.next != nil {
		e.next.prev = e.prev
	}
	e.bucket, e.prev, e.next = nil, nil, nil
	if e.st == waiting {
		b.waiting--
	}
	x.untime(e)
	if b.n--; b.n == 0 {
		b.timer.Stop()
		delete(x.buckets, b.key)
	}
}

// take takes the bucket b, whose timer fired, out of the index, and returns its entries, each
// taken out of the bucket in turn (still waiting or leased), by calling fn. It returns false if b
// was emptied and replaced meanwhile.
func (x *deliveryIndex) take(b *bucket, fn func(*entry)) bool {
	if x.buckets[b.key] != b {
		return false
	}
	delete(x.buckets, b.key)
	for e := b.head; e != nil; {
		next := e.next
		e.bucket, e.prev, e.next = nil, nil, nil
		x.untime(e)
		fn(e)
		e = next
	}
	return true
}

// Ready lists are in due order. Buckets usually fire in order, so an entry becoming ready goes at
// the tail; but the timers of two buckets a millisecond apart may fire the other way round on a
// loaded machine (a wheel's shards run apart), so makeReady looks back from the tail, at most
// readyReorder entries, for the entry's place. Entries are numbered (seq) in list order for paging;
// numbers are readyGap apart at the tail, and an entry placed between two takes the number halfway.
// Where there is no place within reach, or no number left between, it goes at the tail: order then
// is the order of becoming ready, never anything worse.
const (
	readyReorder = 64
	readyGap     = 1 << 16
)

// makeReady moves e to its topic's ready list and wakes a Receive waiting on the topic, unless the
// topic is paused.
func (x *deliveryIndex) makeReady(e *entry) {
	e.st = ready
	t := e.t
	prev := t.tail
	for n := 0; prev != nil && prev.deliverAt > e.deliverAt && n < readyReorder; n++ {
		prev = prev.prev
	}
	var next *entry
	switch {
	case prev == t.tail:
	case prev == nil:
		next = t.head
	default:
		next = prev.next
	}
	if next != nil {
		lo := uint64(0)
		if prev != nil {
			lo = prev.seq
		}
		if prev != nil && prev.deliverAt > e.deliverAt || next.seq-lo < 2 {
			prev, next = t.tail, nil // out of reach, or no number left: at the tail
		} else {
			e.seq = lo + (next.seq-lo)/2
		}
	}
	if next == nil {
		x.seq += readyGap
		e.seq = x.seq
	}
	e.prev, e.next = prev, next
	if prev != nil {
		prev.next = e
	} else {
		t.head = e
	}
	if next != nil {
		next.prev = e
	} else {
		t.tail = e
	}
	x.count(e, 1)
	if e.attempt == 0 {
		x.lateness.add(time.Duration(time.Now().UnixNano() - e.deliverAt))
	}
	if !t.paused {
		t.wake()
	}
}

// wake wakes the Receive calls waiting on t.
func (t *topicState) wake() {
	if t.signal != nil {
		close(t.signal)
		t.signal = nil
	}
}

func (x *deliveryIndex) unlinkReady(e *entry) {
	t := e.t
	if e.prev != nil {
		e.prev.next = e.next
	} else {
		t.head = e.next
	}
	if e.next != nil {
		e.next.prev = e.prev
	} else {
		t.tail = e.prev
	}
	e.prev, e.next = nil, nil
	x.count(e, -1)
}

// lease hands e, the head of its topic's ready list, to a consumer until deadline (Unix ns) under
// lease number n.
func (x *deliveryIndex) lease(e *entry, n uint64, deadline int64) {
	x.unlinkReady(e)
	e.st = leased
	e.lease = n
	x.schedule(e, deadline)
}
