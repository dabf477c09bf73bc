package delayq

import (
	"context"
	"fmt"

	"github.com/tockwheel/tock/delayq/internal/wal"
)

// Cancel cancels the pending message with the given ID and reports whether it did: false means no
// message with the ID is pending (never put, already acked, cancelled or dead, or the ID is
// malformed). A message already leased to a consumer is cancelled too; its receipt becomes stale.
// A true return is durable like Put. Cancel of a message with a chosen ID costs no read; Cancel of
// a message with a generated ID in the disk wheel reads the records of its slot written after it.
// Cancel keeps nothing in memory, however many messages are cancelled.
func (q *Queue) Cancel(ctx context.Context, id string) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, fmt.Errorf("delayq: %w", err)
	}
	if err := q.waitRoom(); err != nil {
		return false, err
	}
	r := q.log.NewReader()
	for {
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
			// A chosen ID is unique among pending messages, and ids holds it only while its
			// message is in the wheel: no need to read the list.
			if loc.slot <= q.disk.loaded {
				q.mu.Unlock()
				return false, nil // left by damage: the message was lost
			}
			list := q.disk.listFor(loc.slot)
			end, err := q.commitLocked(&wal.Record{Kind: wal.KindCancel, ID: id, Threaded: true, ListSlot: list, Prev: q.disk.peek(list).head}, nil)
			q.cancelledLocked(err)
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

		// The message is in list, if it is pending: the newest record with its ID is a Put.
		recs, ok, err := q.lockList(r, list, origin, func() bool { return q.usableLocked() == nil && q.disk.loaded < list })
		if !ok {
			q.mu.Unlock()
			continue // loaded meanwhile: it is in memory now, if anywhere
		}
		if err != nil {
			q.mu.Unlock()
			return false, err
		}
		pending := false
		for _, lr := range recs {
			if lr.rec.ID == id {
				pending = lr.rec.Kind == wal.KindPut
				break
			}
		}
		if !pending {
			q.mu.Unlock()
			return false, nil
		}
		rec := wal.Record{Kind: wal.KindCancel, ID: id, Threaded: true, ListSlot: list, Prev: q.disk.peek(list).head}
		end, err := q.commitLocked(&rec, nil)
		q.cancelledLocked(err)
		q.mu.Unlock()
		return err == nil, q.waitFor(end, err)
	}
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
