package delayq

import "github.com/tockwheel/tock/delayq/internal/wal"

// Retention: a segment can be deleted once no record in it is needed. Queue.pins counts, per
// segment, the records still needed: those of disk-wheel lists not yet loaded (a list is followed
// through every segment it touches) and the current records of messages in memory (their payloads
// are read from there after a restart). Everything at or after the checkpoint's replay position is
// needed by recovery. So after each checkpoint, every older segment without pins goes.
//
// "Without pins" must hold both now and in the checkpoint just written: a crash makes recovery
// start from that checkpoint, which reads the records it pinned (the lists it names, and the
// messages it holds in memory) even if they were released after it was taken, by a load, an ack or
// a compaction. (Records appended since are at or after the replay position, so an older segment
// pinned now was pinned in the checkpoint too; checking both costs nothing.)

// retain deletes the segments before the checkpoint's replay position that hold no needed record,
// now or in the checkpoint's pins.
func (q *Queue) retain(replay wal.Pos, ckPins pins) error {
	segs, _ := q.log.Segments()
	for _, seg := range segs {
		if seg >= replay.Segment() {
			break
		}
		q.mu.Lock()
		pinned := q.pins[seg] > 0
		q.mu.Unlock()
		if pinned || ckPins[seg] > 0 {
			continue
		}
		if err := q.log.Remove(seg); err != nil {
			return err
		}
	}
	return nil
}
