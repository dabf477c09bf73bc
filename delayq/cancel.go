package delayq

import (
	"context"
	"fmt"

	"github.com/tockwheel/tock/delayq/internal/wal"
)

// Cancel cancels the waiting message with the given ID and reports whether it did: false means
// no message with the ID is waiting (never put, already acked or cancelled, lost to damage, or the
// ID is malformed). A message already leased to a consumer is cancelled too; an ack of its receipt
// then succeeds, the message being done. A dead letter can be cancelled. A true return is durable
// like Put. Cancel of a message in the disk wheel reads its record (chosen ID) or the records of
// its slot written after it (generated ID), without holding the queue's lock. Cancel keeps nothing
// in memory, however many messages are cancelled.
func (q *Queue) Cancel(ctx context.Context, id string) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, fmt.Errorf("delayq: %w", err)
	}
	if err := q.waitRoom(); err != nil {
		return false, err
	}
	r := q.log.NewReader()
	var read map[string]readRecord
	for try := 0; ; try++ {
		q.mu.Lock()
		if err := q.usableLocked(); err != nil {
			q.mu.Unlock()
			return false, err
		}
		if e := q.mem.lookup(id); e != nil {
			end, err := q.commitLocked(&wal.Record{Kind: wal.KindCancel, ID: id}, nil)
			q.cancelledLocked(err)
			q.mu.Unlock()
			return err == nil, q.waitFor(end, err)
		}
		if loc, ok := q.disk.ids[id]; ok {
			// A chosen ID is unique among waiting messages, and ids holds it only while its
			// message is in the wheel: its record tells the topic the Cancel names.
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
				read = q.readRecords(r, need) // under mu at last; from memory or the page cache
			}
			rec := read[id].rec
			if rec == nil {
				q.mu.Unlock()
				return false, nil // lost to damage
			}
			end, err := q.cancelThreadedLocked(id, rec.Topic, loc.slot)
			q.mu.Unlock()
			return err == nil, q.waitFor(end, err)
		}
		at, origin, ok := parseID(id)
		if !ok || q.disk.slotOf(at) <= q.disk.loaded {
			q.mu.Unlock()
			return false, nil
		}
		list := q.disk.listFor(q.disk.slotOf(at))
		q.mu.Unlock()

		// The message is in list, if it is waiting: a live Put with its ID.
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
		end, err := q.cancelThreadedLocked(id, put.rec.Topic, q.disk.slotOf(at))
		q.mu.Unlock()
		return err == nil, q.waitFor(end, err)
	}
}

// findPut returns the live Put with the given ID among the records of a list, newest first, or nil.
func findPut(recs []listRecord, id string) *listRecord {
	var v listView
	for i := range recs {
		if v.live(&recs[i].rec) && recs[i].rec.ID == id {
			return &recs[i]
		}
	}
	return nil
}

// cancelThreadedLocked appends and applies the Cancel of the message id of topic due in slot,
// which waits in the disk wheel.
func (q *Queue) cancelThreadedLocked(id, topic string, slot int64) (wal.Pos, error) {
	list := q.disk.listFor(slot)
	rec := wal.Record{Kind: wal.KindCancel, ID: id, Topic: topic, Threaded: true, ListSlot: list, Prev: q.disk.peek(list).head}
	end, err := q.commitLocked(&rec, nil)
	q.cancelledLocked(err)
	return end, err
}

func (q *Queue) cancelledLocked(err error) {
	if err == nil {
		q.stats.cancelled++
	}
}

// waitFor returns err, or waits for the record ending at end to be durable.
func (q *Queue) waitFor(end wal.Pos, err error) error {
	if err != nil {
		return err
	}
	return q.waitDurable(end)
}
