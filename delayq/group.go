package delayq

import (
	"github.com/tockwheel/tock/delayq/internal/format"
	"github.com/tockwheel/tock/delayq/internal/wal"
)

// commitAllLocked appends recs as one atomic group of the log (see wal's frame.go), applying each
// as it is appended, and returns the end of the last. A crash leaves the log with all of them or
// none. recs are completed here, where the state they are threaded into is known: a Put goes into
// the disk wheel's list of the slot it is due in when that slot is not loaded, and into memory
// otherwise, as putLocked decides; a threaded Cancel holds in ListSlot the slot its message is due
// in, and is threaded into the list that message waits in. Every ID must be chosen: a generated
// ID is its record's position, which putLocked alone works out.
func (q *Queue) commitAllLocked(recs []format.Record) (wal.Pos, error) {
	if len(recs) > 1 {
		total := 0
		for i := range recs {
			total += frameSize(&recs[i]) // threading changes no record's size
		}
		q.log.Reserve(total)
	}
	w := &q.disk
	var end wal.Pos
	for i := range recs {
		rec := &recs[i]
		switch {
		case rec.Kind == format.KindPut:
			if slot := w.slotOf(rec.DeliverAt); slot > w.loaded {
				list := w.listFor(slot)
				rec.Threaded, rec.ListSlot, rec.Prev = true, list, w.peek(list).head
			}
		case rec.Kind == format.KindCancel && rec.Threaded:
			list := w.listFor(rec.ListSlot)
			rec.ListSlot, rec.Prev = list, w.peek(list).head
		}
		var err error
		if end, err = q.commitGroupLocked(rec, i < len(recs)-1, nil); err != nil {
			return 0, err
		}
	}
	return end, nil
}

// waitingLocked reports whether a message with the chosen ID id waits (scheduled, due or leased;
// a dead letter included).
func (q *Queue) waitingLocked(id string) bool {
	if q.mem.lookup(id) != nil {
		return true
	}
	loc, ok := q.disk.ids[id]
	return ok && loc.slot > q.disk.loaded
}
