package delayq

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/tockwheel/tock/delayq/internal/format"
	"github.com/tockwheel/tock/delayq/internal/wal"
)

// Damage: bytes of the log or the checkpoint that are there and wrong (a flipped bit, a record
// that fails its checksum, a segment gone) cost only the messages they held. Open does not refuse
// the queue, nothing on disk is cut or rewritten, and the queue goes on: replay skips a damaged
// record, and a slot list whose chain of records is broken is read past the break by scanning the
// log (walkChain). A write cut short by a crash (a torn write at the end of the log, beyond what
// the checkpoint covers) is not damage: Open cuts it.
//
// What a damaged record costs: a Put, its message; a Cancel, the cancel (the message is delivered
// after all); an Ack, the ack (the message is delivered again); an Update, the retry's due time or
// dead-lettering; an Advance or Relocate, nothing lost but the list may be read twice (its
// messages are deduplicated by their first record).
//
// Each damaged place is reported once, loudly: logged at Error with its file and offset, what the
// reader knew it held and what the bytes seem to hold (IDs and topics, when a copy of them says),
// and counted in Snapshot.CorruptRecords. The next checkpoint then records it as accounted for
// (the damage section of an edit): Opens after that meet it again (every Open checks the last
// segment, compaction reads closed segments, a list not yet loaded is read again), and say and
// count nothing more of it. A place in a segment that retention deleted is forgotten. Damage to
// the checkpoint or the secret is met once: the file is written anew (a checkpoint too damaged to
// use takes with it the record of what was accounted for, so the rebuild from the log reports the
// log's damage again, once). Check lists the places accounted for apart from new damage.

// damage is what the queue knows of damaged places; it is guarded by Queue.damageMu.
type damage struct {
	// seen holds the places met since Open: each is reported, or passed over, once.
	seen map[damagePlace]bool
	// accounted holds the places of the log reported, by this Open or before (from the
	// checkpoint), by position; dirty says it changed since the last checkpoint.
	accounted map[wal.Pos]bool
	dirty     bool
	// corrupt counts the places reported since Open.
	corrupt uint64
	// found lists the places met, in order, for Check.
	found []Damage
}

// A damagePlace is a damaged place: a file and the offset of its first damaged byte.
type damagePlace struct {
	file   string
	offset int64
}

// damaged reports the damage err describes, once per place (see above).
func (q *Queue) damaged(err error) {
	pl := damagePlace{file: err.Error()}
	var ce *wal.CorruptError
	if errors.As(err, &ce) {
		pl = damagePlace{ce.File, ce.Offset}
	}
	var held string
	var he *heldError
	if errors.As(err, &he) {
		held = he.held
	}
	seems := describeDamage(ce)
	pos, inLog := q.logPlace(ce)
	q.damageMu.Lock()
	d := &q.dmg
	if d.seen[pl] {
		q.damageMu.Unlock()
		return
	}
	if d.seen == nil {
		d.seen = make(map[damagePlace]bool)
	}
	d.seen[pl] = true
	accounted := inLog && d.accounted[pos]
	if !accounted {
		d.corrupt++
		if inLog {
			if d.accounted == nil {
				d.accounted = make(map[wal.Pos]bool)
			}
			d.accounted[pos], d.dirty = true, true
		}
	}
	dm := Damage{File: pl.file, Offset: pl.offset, Reason: err.Error()}
	if ce != nil {
		dm.Size, dm.Reason = ce.Size, ce.Reason
	}
	for _, h := range []string{held, seems} {
		if h != "" {
			dm.Held = append(dm.Held, h)
		}
	}
	dm.accounted = accounted
	d.found = append(d.found, dm)
	q.damageMu.Unlock()
	if accounted {
		q.cfg.logger.Debug("delayq: damaged data met again, accounted for before", "dir", q.dir, "file", pl.file, "offset", pl.offset)
		return
	}
	q.cfg.logger.Error("delayq: damaged data skipped; it costs the messages it held", "dir", q.dir, "file", pl.file, "offset", pl.offset,
		"reason", dm.Reason, "held", held, "seems", seems)
}

// logPlace returns the position of the damage ce describes, when it is in a segment of the log.
func (q *Queue) logPlace(ce *wal.CorruptError) (wal.Pos, bool) {
	if ce == nil || filepath.Dir(ce.File) != filepath.Clean(q.dir) || ce.Offset < 0 || ce.Offset > 1<<32-1 {
		return 0, false
	}
	var seg uint32
	if _, err := fmt.Sscanf(filepath.Base(ce.File), "%010d.seg", &seg); err != nil || wal.SegmentName(seg) != filepath.Base(ce.File) {
		return 0, false
	}
	return wal.MakePos(seg, uint32(ce.Offset)), true
}

// describeDamage says what the damaged bytes ce starts at seem to hold, read without trusting
// their checksum, or "" when they do not look like a record.
func describeDamage(ce *wal.CorruptError) string {
	if ce == nil {
		return ""
	}
	f, err := os.Open(ce.File)
	if err != nil {
		return ""
	}
	defer f.Close()
	n := ce.Size
	if n <= 0 || n > wal.HeaderSize+wal.MaxBody+1 {
		n = wal.HeaderSize + 1<<16
	}
	b := make([]byte, n)
	m, err := f.ReadAt(b, ce.Offset)
	if err != nil && !errors.Is(err, io.EOF) {
		return ""
	}
	frame, ok := wal.UncheckedFrame(b[:m])
	if !ok {
		return ""
	}
	if s := format.Describe(format.Kind(frame.Type), frame.Body); s != "" {
		return "what the bytes seem to hold (unverified): " + s
	}
	return ""
}

// metDamage reports whether the place of ce was met since Open.
func (q *Queue) metDamage(ce *wal.CorruptError) bool {
	q.damageMu.Lock()
	defer q.damageMu.Unlock()
	return q.dmg.seen[damagePlace{ce.File, ce.Offset}]
}

// corruptRecords returns the number of damaged places reported since Open.
func (q *Queue) corruptRecords() uint64 {
	q.damageMu.Lock()
	defer q.damageMu.Unlock()
	return q.dmg.corrupt
}

// accountFor notes the places the checkpoint says are accounted for.
func (q *Queue) accountFor(places []wal.Pos) {
	q.damageMu.Lock()
	defer q.damageMu.Unlock()
	if q.dmg.accounted == nil {
		q.dmg.accounted = make(map[wal.Pos]bool, len(places))
	}
	for _, p := range places {
		q.dmg.accounted[p] = true
	}
}

// damageForEdit returns the places accounted for, in order, for the next checkpoint edit (which
// holds all of them), and marks them written. It forgets those in segments retention deleted: gone,
// and pinned by nothing (a segment missing although something still refers to it, as after an
// operator deleted it, stays accounted for: the queue meets its absence again).
func (q *Queue) damageForEdit(segs []uint32, pins pins) []wal.Pos {
	q.damageMu.Lock()
	defer q.damageMu.Unlock()
	d := &q.dmg
	for p := range d.accounted {
		if _, ok := slices.BinarySearch(segs, p.Segment()); !ok && pins[p.Segment()] == 0 {
			delete(d.accounted, p)
		}
	}
	d.dirty = false
	return slices.Sorted(maps.Keys(d.accounted))
}

// markDamageDirty makes the next checkpoint write an edit although the log did not move: what it
// holds changed for damage (an entry dropped, a place accounted for).
func (q *Queue) markDamageDirty() {
	q.damageMu.Lock()
	q.dmg.dirty = true
	q.damageMu.Unlock()
}

// damageDirty reports whether the damage known changed since the last checkpoint.
func (q *Queue) damageDirty() bool {
	q.damageMu.Lock()
	defer q.damageMu.Unlock()
	return q.dmg.dirty
}

// corruptAt returns the damage of the record at p.
func (q *Queue) corruptAt(p wal.Pos, reason string) *wal.CorruptError {
	return corruptAt(q.dir, p, reason)
}

// slotTime returns the start of slot, for reports.
func (q *Queue) slotTime(slot int64) string {
	return time.Unix(0, slot*int64(q.cfg.slot)).UTC().Format(time.RFC3339)
}
