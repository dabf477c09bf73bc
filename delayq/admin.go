package delayq

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/tockwheel/tock/delayq/internal/format"
	"github.com/tockwheel/tock/delayq/internal/wal"
	"github.com/tockwheel/tock/queue"
)

// The operator's side of the queue: queue.Admin. Reading (Topics, Messages, Message) changes
// nothing; every action is records appended and applied as any other change (see apply.go), and
// returns once they are durable, as Put does.

var _ queue.Admin = (*Queue)(nil)

// adminChunk bounds the records an action appends under one hold of the lock, so that purging or
// requeueing a million messages does not stop the queue while it runs.
const adminChunk = 1024

// Topics lists every topic that holds a message in any state, or is paused, with its counts, in
// the order of their names. The counts are kept as messages move, so Topics reads nothing and
// costs time in the number of topics only. Puts, Deliveries, Acks and Nacks count since Open (and start
// again from zero for a topic that held no message for a while); the other counts survive
// restarts. A delivery, ack or nack counts on the topic the message was delivered from (a dead letter's,
// on its dead-letter topic).
func (q *Queue) Topics(ctx context.Context) ([]queue.TopicInfo, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("delayq: %w", err)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if err := q.usableLocked(); err != nil {
		return nil, err
	}
	out := make([]queue.TopicInfo, 0, len(q.mem.topics))
	passed := q.disk.duePassedByTopic(time.Now().UnixNano()) // due, not yet loaded: counted as due
	for _, t := range q.mem.topics {
		if !t.listed() {
			continue
		}
		ti := queue.TopicInfo{Topic: t.name, Scheduled: int64(t.scheduled) + max(t.disk-passed[t], 0), Due: int64(t.ready) + passed[t],
			Leased: int64(t.leased), Dead: int64(t.deadWaiting), Paused: t.paused,
			Puts: t.puts, Deliveries: t.deliveries, Acks: t.acks, Nacks: t.nacks, CountsSince: t.since}
		if t.head != nil {
			ti.OldestDue = time.Unix(0, t.head.deliverAt)
		}
		out = append(out, ti)
	}
	slices.SortFunc(out, func(a, b queue.TopicInfo) int { return cmp.Compare(a.Topic, b.Topic) })
	return out, nil
}

// Pause stops deliveries of topic: Receive on it waits, as on an empty topic, until Resume. Puts
// go on, messages fall due, and leases already given run their course. The pause is a record in
// the log, durable when Pause returns, and lasts across restarts. Pausing a paused topic does
// nothing. An empty topic, or one longer than 65535 bytes, is refused with ErrInvalid.
func (q *Queue) Pause(ctx context.Context, topic string) error {
	return q.setPaused(ctx, topic, true)
}

// Resume ends a pause of topic: Receive calls waiting on it are served at once. Resuming a topic
// that is not paused does nothing. It is durable as Pause is.
func (q *Queue) Resume(ctx context.Context, topic string) error {
	return q.setPaused(ctx, topic, false)
}

func (q *Queue) setPaused(ctx context.Context, topic string, paused bool) error {
	if err := checkTopic(topic); err != nil {
		return err
	}
	if err := q.lockToWrite(ctx); err != nil {
		return err
	}
	var end wal.Pos
	var err error
	if t := q.mem.topics[topic]; (t != nil && t.paused) == paused {
		end = q.log.End() // as it is already, durably once the log is here
	} else {
		end, err = q.commitLocked(&format.Record{Kind: format.KindPause, Topic: topic, Paused: paused}, nil)
	}
	q.mu.Unlock()
	return q.waitFor(end, err)
}

func checkTopic(topic string) error {
	if topic == "" || len(topic) > format.MaxName {
		return fmt.Errorf("delayq: topic of %d bytes: %w", len(topic), ErrInvalid)
	}
	return nil
}

// Message returns the waiting message id, its payload whole, or an error matching ErrNotFound
// when no message with that ID is waiting. A message in the disk wheel costs a read of its record
// (chosen ID) or of its slot's records written after it (generated ID), made without holding the
// queue's lock. What is known of it is as [Queue.Messages] says.
func (q *Queue) Message(ctx context.Context, id string) (queue.MessageInfo, error) {
	var info queue.MessageInfo
	found, err := q.findWaiting(ctx, id, func(e *entry) {
		info = q.infoLocked(e, q.stateOf(e), false)
	}, func(rec *listRec, pos wal.Pos, slot int64) error {
		info = diskInfo(rec, pos, false)
		return nil
	})
	if err == nil && !found {
		err = fmt.Errorf("delayq: message %q: %w", id, ErrNotFound)
	}
	return info, err
}

// DeliverNow makes the scheduled message id due at once, without counting an attempt, and reports
// whether it did: false when no message with that ID is scheduled (it is due, leased, a dead
// letter, or not waiting at all). It is durable when it returns. A message in the disk wheel is
// taken out of its slot's list and written again due now, in one atomic group of records.
func (q *Queue) DeliverNow(ctx context.Context, id string) (bool, error) {
	if err := q.waitRoom(ctx); err != nil {
		return false, err
	}
	done := false
	var end wal.Pos
	var err error
	_, ferr := q.findWaiting(ctx, id, func(e *entry) {
		if e.st != waiting || e.dead() {
			return
		}
		rec := format.Record{Kind: format.KindUpdate, Target: e.origin, DeliverAt: time.Now().UnixNano(), Attempt: e.attempt}
		end, err = q.commitLocked(&rec, nil)
		done = err == nil
	}, func(rec *listRec, pos wal.Pos, slot int64) error {
		end, err = q.deliverNowLocked(rec, pos, slot)
		done = err == nil
		return err
	})
	if done {
		q.mu.Lock()
		q.stats.deliveredNow++
		q.mu.Unlock()
	}
	if ferr != nil {
		return false, ferr
	}
	return done, q.waitFor(end, err)
}

// deliverNowLocked takes the message whose Put record rec (at pos) waits in the list of slot out of
// the disk wheel, and puts it again due now, keeping its ID and origin: a Cancel threaded into its
// list and a copy of its Put, as one atomic group.
func (q *Queue) deliverNowLocked(rec *listRec, pos wal.Pos, slot int64) (wal.Pos, error) {
	list := q.disk.listFor(slot)
	cancel := format.Record{Kind: format.KindCancel, ID: rec.ID, Topic: rec.Topic, Threaded: true, ListSlot: list,
		Prev: q.disk.peek(list).head}
	put := format.Record{Kind: format.KindPut, ID: rec.ID, Topic: rec.Topic, Payload: rec.Payload, Headers: rec.Headers}
	q.log.Reserve(frameSize(&cancel) + frameSize(&put))
	if _, err := q.commitGroupLocked(&cancel, true, nil); err != nil {
		return 0, err
	}
	_, end, err := q.putLocked(rec.ID, rec.Topic, rec.Payload, rec.Headers, time.Now().UnixNano(), rec.Attempt, originOf(rec.Origin, pos), false)
	return end, err
}

// findWaiting finds the waiting message id and calls mem with mu held if it is in memory, or disk
// with mu held and its Put record, the record's position and the slot it is due in if it waits in
// the disk wheel. found is false when no message with the ID is waiting. The records of the disk
// wheel are read without mu.
func (q *Queue) findWaiting(ctx context.Context, id string, mem func(*entry),
	disk func(rec *listRec, pos wal.Pos, slot int64) error) (found bool, err error) {
	if err := ctx.Err(); err != nil {
		return false, fmt.Errorf("delayq: %w", err)
	}
	r := newRecordReader(q.log)
	var read map[string]readRecord
	for try := 0; ; try++ {
		q.mu.Lock()
		if err := q.usableLocked(); err != nil {
			q.mu.Unlock()
			return false, err
		}
		if e := q.mem.lookup(id); e != nil {
			mem(e)
			q.mu.Unlock()
			return true, nil
		}
		if loc, ok := q.disk.ids[id]; ok {
			if loc.slot <= q.disk.loaded {
				q.mu.Unlock()
				return false, nil // left by damage: the message was lost
			}
			need := map[string]idLoc{id: loc}
			if rr, ok := read[id]; !ok || rr.loc != loc {
				if try < listTries {
					q.mu.Unlock()
					read = q.readRecords(r, need)
					continue
				}
				read = q.readRecords(r, need)
			}
			rec := read[id].rec
			if rec == nil {
				q.mu.Unlock()
				return false, nil // lost to damage
			}
			lr := listRecOf(rec)
			err := disk(&lr, loc.pos, loc.slot)
			q.mu.Unlock()
			return true, err
		}
		at, origin, ok := parseID(id)
		if !ok || q.disk.slotOf(at) <= q.disk.loaded {
			q.mu.Unlock()
			return false, nil
		}
		slot := q.disk.slotOf(at)
		list := q.disk.listFor(slot)
		q.mu.Unlock()

		recs, ok, err := q.lockList(r, list, origin, func() bool { return q.usableLocked() == nil && q.disk.loaded < list })
		if !ok {
			q.mu.Unlock()
			continue // loaded meanwhile: it is in memory now, if anywhere
		}
		if err != nil {
			q.mu.Unlock()
			return false, err
		}
		put := findPut(recs, id)
		if put == nil {
			q.mu.Unlock()
			return false, nil
		}
		err = disk(&put.rec, put.pos, slot)
		q.mu.Unlock()
		return true, err
	}
}

// Requeue moves dead letters that died on topic back onto it, due at once, with their attempts
// counted from zero again and their last failure forgotten, and returns how many it moved: those
// with the given IDs, or every dead letter of the topic when ids is empty. An ID that names no dead
// letter of topic is skipped. A dead letter leased by a consumer of the dead-letter topic is moved
// too; its receipt becomes stale. The moves are durable when Requeue returns.
func (q *Queue) Requeue(ctx context.Context, topic string, ids ...string) (int, error) {
	if err := checkTopic(topic); err != nil {
		return 0, err
	}
	all := len(ids) == 0
	pick := func(t *topicState) []*entry {
		var es []*entry
		if all {
			for e := range t.dead {
				if es = append(es, e); len(es) == adminChunk {
					break
				}
			}
			return es
		}
		for len(ids) > 0 && len(es) < adminChunk {
			if e := q.mem.lookup(ids[0]); e != nil && e.home == t && e.dead() && !slices.Contains(es, e) {
				es = append(es, e)
			}
			ids = ids[1:]
		}
		return es
	}
	return q.act(ctx, topic, pick, func(e *entry) *format.Record {
		q.stats.requeued++
		return &format.Record{Kind: format.KindUpdate, Target: e.origin, DeliverAt: time.Now().UnixNano(), Topic: e.home.name,
			Failure: format.FailureNone}
	})
}

// act appends, a chunk at a time, the record rec returns for each entry pick returns of the topic
// named topic, until pick returns none, and waits for them to be durable. It returns how many it
// appended. pick is called with mu held; it must make progress (an entry it returned is changed by
// its record, or it moves on).
func (q *Queue) act(ctx context.Context, topic string, pick func(*topicState) []*entry, rec func(*entry) *format.Record) (int, error) {
	n := 0
	var end wal.Pos
	for {
		if err := q.lockToWrite(ctx); err != nil {
			return n, err
		}
		t := q.mem.topics[topic]
		var es []*entry
		if t != nil {
			es = pick(t)
		}
		for _, e := range es {
			var err error
			if end, err = q.commitLocked(rec(e), nil); err != nil {
				q.mu.Unlock()
				return n, err
			}
			n++
		}
		q.mu.Unlock()
		if len(es) == 0 {
			break
		}
	}
	if end == 0 {
		return n, nil
	}
	return n, q.waitDurable(end)
}

// Purge removes the messages of topic in state, which must be Scheduled, Due or Dead (ErrInvalid
// otherwise), and returns how many it removed: every message of topic that is in state when Purge
// begins and still is when Purge reaches it, wherever it moves meanwhile (a scheduled message
// loaded into memory, or rolled into a later slot's list, while Purge runs is purged all the
// same); messages put while it runs may or may not be. Removed messages are done as if cancelled:
// an ack of a receipt of one succeeds. Messages in memory are acked, each by a record; the
// scheduled messages of the disk wheel take one Purge record per slot list that holds any,
// whatever their number, after a read of the list. The purge is durable when it returns.
func (q *Queue) Purge(ctx context.Context, topic string, state queue.State) (int, error) {
	if err := checkTopic(topic); err != nil {
		return 0, err
	}
	var want func(e *entry) bool
	switch state {
	case queue.Scheduled:
		want = func(e *entry) bool { return e.st == waiting }
	case queue.Due:
		want = func(e *entry) bool { return e.st == ready }
	case queue.Dead:
		want = func(e *entry) bool { return e.st != leased }
	default:
		return 0, fmt.Errorf("delayq: purge of %q messages: only scheduled, due and dead ones can be: %w", state, ErrInvalid)
	}
	if err := q.lockToWrite(ctx); err != nil {
		return 0, err
	}
	// The messages there when Purge begins are those first written before here: their origins,
	// which their copies keep, come before it.
	start := q.log.End()
	q.mu.Unlock()
	n, end := 0, wal.Pos(0)
	if state == queue.Scheduled {
		// The disk wheel first: a list loaded while it is read puts its messages in memory, where
		// the sweep below finds them.
		var err error
		if n, end, err = q.purgeDisk(ctx, topic); err != nil {
			return n, err
		}
	}
	// In memory: a chunk at a time from the topic's lists, which the acks shrink.
	pick := func(t *topicState) []*entry {
		var es []*entry
		add := func(e *entry) bool {
			if len(es) == adminChunk {
				return false
			}
			if want(e) && e.origin < start {
				es = append(es, e)
			}
			return true
		}
		switch state {
		case queue.Scheduled:
			for e := t.timed; e != nil && add(e); e = e.tnext {
			}
		case queue.Due:
			for e := t.head; e != nil && add(e); e = e.next {
			}
		case queue.Dead:
			for e := range t.dead {
				if !add(e) {
					break
				}
			}
		}
		return es
	}
	m, err := q.act(ctx, topic, pick, func(e *entry) *format.Record {
		q.stats.purged++
		return &format.Record{Kind: format.KindAck, Target: e.origin}
	})
	n += m
	if err != nil || m > 0 || end == 0 {
		return n, err // act waited for its records, after the disk wheel's in the log
	}
	return n, q.waitDurable(end)
}

// purgeDisk purges topic's messages from the disk wheel: a Purge record in each list that holds
// any. It returns how many it purged and the end of its last record (0 if none). A list the loader
// takes while it is read is passed over: its messages due in its slot are in memory by then, where
// Purge's sweep finds them, and those it rolled are in the next list of the same wheel index,
// which is purged in its turn.
func (q *Queue) purgeDisk(ctx context.Context, topic string) (int, wal.Pos, error) {
	r := newRecordReader(q.log)
	n := 0
	var end wal.Pos
	var indexes []int // nil: every list; else the wheel indexes to look at again
	for {
		q.mu.Lock()
		var lists []int64
		if t := q.mem.topics[topic]; t != nil && t.lists > 0 {
			look := func(i int) {
				if l := q.disk.lists[i]; l.head != 0 && l.find(t) != nil {
					lists = append(lists, l.slot)
				}
			}
			if indexes == nil {
				for i := range q.disk.lists {
					look(i)
				}
			}
			for _, i := range indexes {
				look(i)
			}
		}
		q.mu.Unlock()
		var again []int
		for _, list := range lists {
			if err := q.waitRoom(ctx); err != nil {
				return n, end, err
			}
			recs, ok, err := q.lockList(r, list, 0, func() bool { return q.usableLocked() == nil && q.disk.peek(list).head != 0 })
			if !ok {
				err := q.usableLocked()
				again = append(again, q.disk.index(list))
				q.mu.Unlock()
				if err != nil {
					return n, end, err
				}
				continue
			}
			if err != nil {
				q.mu.Unlock()
				return n, end, err
			}
			var lt *listTopic
			if t := q.mem.topics[topic]; t != nil {
				lt = q.disk.lists[q.disk.index(list)].find(t)
			}
			if lt == nil || lt.n <= 0 {
				q.mu.Unlock()
				continue
			}
			count := int(lt.n)
			rec := format.Record{Kind: format.KindPurge, Topic: topic, Threaded: true, ListSlot: list, Prev: q.disk.peek(list).head}
			end, err = q.commitLocked(&rec, recs)
			if err == nil {
				q.stats.purged += uint64(count)
			}
			q.mu.Unlock()
			if err != nil {
				return n, end, err
			}
			n += count
		}
		if len(again) == 0 {
			return n, end, nil
		}
		indexes = again
	}
}

// stateOf returns the state of the message e as the contract names it.
func (q *Queue) stateOf(e *entry) queue.State {
	switch {
	case e.st == leased:
		return queue.Leased
	case e.dead():
		return queue.Dead
	case e.st == ready:
		return queue.Due
	}
	return queue.Scheduled
}

// infoLocked returns what is known of e, in the given state, its payload whole or previewed.
//
// Attempts counts deliveries: the failed ones, and the current one of a leased message; a dead
// letter's count goes on from the deliveries it failed on its topic (the maximum). The last
// failure is known for every message in memory that failed (a message in the disk wheel has not,
// or has failed only before it was written again by a version of delayq that did not keep it).
func (q *Queue) infoLocked(e *entry, state queue.State, preview bool) queue.MessageInfo {
	m := queue.MessageInfo{ID: e.id, Topic: e.home.name, State: state, DeliverAt: time.Unix(0, e.deliverAt),
		Attempts: int(e.attempt), Payload: e.payload, Size: len(e.payload), Headers: maps.Clone(e.headers)}
	if e.st == leased {
		m.Attempts++
		if e.bucket != nil {
			m.LeaseDeadline = time.UnixMilli(e.bucket.key)
		}
	}
	switch {
	case e.dead() && e.diedAfter > 0:
		m.Attempts += int(e.diedAfter)
	case e.dead() && q.cfg.maxAttempts > 0:
		m.Attempts += q.cfg.maxAttempts
	}
	switch {
	case e.failure == format.FailureDeadLettered:
		m.LastFailure, m.FailedAt = "dead-lettered", time.Unix(0, e.failedAt)
	case e.failure == format.FailureNacked:
		m.LastFailure, m.FailedAt = "nacked", time.Unix(0, e.failedAt)
	case e.failure == format.FailureExpired:
		m.LastFailure, m.FailedAt = "lease expired", time.Unix(0, e.failedAt)
	}
	m.Reason = e.reason
	m.Payload = clip(m.Payload, preview)
	return m
}

// diskInfo returns what is known of the scheduled message whose Put record rec is at pos.
func diskInfo(rec *listRec, pos wal.Pos, preview bool) queue.MessageInfo {
	return queue.MessageInfo{ID: rec.ID, Topic: rec.Topic, State: queue.Scheduled, DeliverAt: time.Unix(0, rec.DeliverAt),
		Attempts: int(rec.Attempt), Payload: clip(rec.Payload, preview), Size: len(rec.Payload), Headers: rec.Headers}
}

// clip returns a copy of p, cut to queue.PreviewLen bytes when preview is set.
func clip(p []byte, preview bool) []byte {
	if preview && len(p) > queue.PreviewLen {
		p = p[:queue.PreviewLen]
	}
	return append([]byte{}, p...)
}
