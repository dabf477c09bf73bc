package delayq

import "github.com/tockwheel/tock/delayq/internal/wal"

// Retention: a segment can be deleted once no record in it is needed. state.pins counts, per
// segment, the records still needed: those of disk-wheel lists not yet loaded (a list is followed
// through every segment it touches) and the current records of messages in memory (their payloads
// are read from there after a restart). Everything at or after the checkpoint's replay position is
// needed by recovery. So after each checkpoint, every older segment without pins goes.

// retain deletes the segments before the checkpoint's replay position that hold no needed record.
func (q *Queue) retain(replay wal.Pos) error {
	segs, _ := q.log.Segments()
	for _, seg := range segs {
		if seg >= replay.Segment() {
			break
		}
		q.mu.Lock()
		pinned := q.state.pins[seg] > 0
		q.mu.Unlock()
		if pinned {
			continue
		}
		if err := q.log.Remove(seg); err != nil {
			return err
		}
	}
	return nil
}
