package delayq

import (
	"context"

	"github.com/tockwheel/tock/delayq/internal/format"
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
	if err := q.waitRoom(ctx); err != nil {
		return false, err
	}
	var end wal.Pos
	var err error
	found, ferr := q.findWaiting(ctx, id, func(*entry) {
		end, err = q.commitLocked(&format.Record{Kind: format.KindCancel, ID: id}, nil)
		q.cancelledLocked(err)
	}, func(rec *listRec, _ wal.Pos, slot int64) error {
		// The record tells the topic the Cancel names, for the disk wheel's counts by topic.
		end, err = q.cancelThreadedLocked(id, rec.Topic, slot)
		return nil
	})
	if ferr != nil || !found {
		return false, ferr
	}
	return err == nil, q.waitFor(end, err)
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
	rec := format.Record{Kind: format.KindCancel, ID: id, Topic: topic, Threaded: true, ListSlot: list, Prev: q.disk.peek(list).head}
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
