package delayq

import (
	"errors"
	"fmt"

	"github.com/tockwheel/tock/delayq/internal/wal"
)

// Damage: bytes of the log or the checkpoint that are there and wrong (a flipped bit, a record
// that fails its checksum, a segment gone) cost only the messages they held. Open does not refuse
// the queue, nothing on disk is cut or rewritten, and the queue goes on: replay skips a damaged
// record, and a slot list whose chain of records is broken is read past the break by scanning the
// log (readChain). Each damaged place is logged once, at Error, with its file and offset, and
// counted in Stats.CorruptRecords. A write cut short by a crash (a torn write at the end of the
// log, beyond what the checkpoint covers) is not damage: Open cuts it.
//
// What a damaged record costs: a Put, its message; a Cancel, the cancel (the message is delivered
// after all); an Ack, the ack (the message is delivered again); an Update, the retry's due time or
// dead-lettering; an Advance or Relocate, nothing lost but the list may be read twice (its
// messages are deduplicated by their first record). The bookkeeping of a damaged record may keep
// its segment from being deleted.

// damaged reports the damage err describes, once per place.
func (q *Queue) damaged(err error) {
	key := err.Error()
	var ce *wal.CorruptError
	if errors.As(err, &ce) {
		key = fmt.Sprintf("%s:%d", ce.File, ce.Offset)
	}
	q.damageMu.Lock()
	if _, ok := q.damageSeen[key]; ok {
		q.damageMu.Unlock()
		return
	}
	if q.damageSeen == nil {
		q.damageSeen = make(map[string]struct{})
	}
	q.damageSeen[key] = struct{}{}
	q.corrupt++
	q.damageMu.Unlock()
	q.cfg.logger.Error("delayq: damaged data skipped; it costs the messages it held", "dir", q.dir, "err", err)
}

// corruptRecords returns the number of damaged places found since Open.
func (q *Queue) corruptRecords() uint64 {
	q.damageMu.Lock()
	defer q.damageMu.Unlock()
	return q.corrupt
}

// corruptAt returns the damage of the record at p.
func (q *Queue) corruptAt(p wal.Pos, reason string) *wal.CorruptError {
	return corruptAt(q.dir, p, reason)
}
