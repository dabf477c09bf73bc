package delayq

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"path/filepath"
	"slices"
	"time"

	"github.com/tockwheel/tock/delayq/internal/format"
	"github.com/tockwheel/tock/delayq/internal/wal"
)

// A CheckReport is what Check found in a queue directory.
type CheckReport struct {
	Segments int   // segment files read
	Records  int64 // valid records in them
	// Checkpoint says what the checkpoint is: its version and replay position, "none", or why it
	// cannot be used (then it is also in Damage).
	Checkpoint string
	Lists      int   // slot lists of the disk wheel walked
	Pending    int64 // messages waiting, in the disk wheel and in memory, as Open would find them
	// Damage lists every damaged place Open has not reported yet, in the segments, the
	// checkpoint and the receipt secret, in file order: what Open would report, each place
	// costing the messages it held.
	Damage []Damage
	// Schedules counts the schedules, as Open would restore them; Unplannable names those whose
	// spec this program cannot read (a time zone its database lacks), which Open keeps but cannot
	// fire here.
	Schedules   int
	Unplannable []string
	// Accounted lists the damaged places that an Open reported before, and recorded as accounted
	// for: Open says nothing more of them. They are still damage (tock check -strict fails on
	// them); the messages they held are lost already.
	Accounted []Damage
	// TornTail is a write cut short at the end of the log, which Open would cut: not damage.
	TornTail *Damage
	// Unneeded lists damaged places in segments that hold nothing the queue needs (they are
	// deleted at Open's next checkpoint, unread): harmless, and not reported by Open.
	Unneeded []Damage
}

// A Damage is one damaged place of a queue directory.
type Damage struct {
	File   string
	Offset int64
	Size   int64 // damaged bytes, up to the next valid record or the end of the file; 0 if not known
	Reason string
	// Held says what the damaged bytes held, as far as can be told: the list or message of the
	// checkpoint that refers to them, and what the bytes themselves seem to be (unverified).
	Held []string

	accounted bool
}

// Check verifies the queue directory dir without opening it for use, as a `bbolt check` does. It
// reads every file Open reads, with the code Open reads them with, changing nothing: the receipt
// secret, the checkpoint, the end of the log and the log written after the checkpoint (as
// recovery replays it, or all of it when the checkpoint is unusable), the records of the messages
// the checkpoint holds in memory; and then what the queue would read later: every list of the disk
// wheel, as the loader will, and every segment that holds something needed, as compaction does
// (damage in the others is harmless: Unneeded). So it reports exactly the damage Open would report
// over the queue's life, and which of it an Open has reported before (Accounted). Without a checkpoint, the log is read as Open without options would read it (with
// the default slot and horizon). The error is for what kept Check from looking ([ErrLocked] while
// a Queue has the directory open).
func Check(dir string) (*CheckReport, error) {
	lock, err := shareDir(filepath.Join(dir, "LOCK"))
	if err != nil {
		return nil, err
	}
	if lock != nil {
		defer lock.Close()
	}
	segs, err := wal.ListSegments(dir)
	if err != nil {
		return nil, err
	}
	q, err := openChecking(dir)
	if err != nil {
		return nil, err
	}
	defer q.closeChecking()
	rep := &CheckReport{Segments: len(segs)}
	rep.Checkpoint = describeCheckpoint(dir)
	if t := q.log.TornTail(); t != nil {
		rep.TornTail = &Damage{File: t.File, Offset: t.Offset, Size: t.Size, Reason: t.Reason}
	}
	// The lists, as the loader will read them.
	r := newRecordReader(q.log)
	q.mu.Lock()
	for _, l := range q.disk.lists {
		if l.head == 0 {
			continue
		}
		rep.Lists++
		recs, err := q.readList(r, l.slot)
		if err != nil {
			q.mu.Unlock()
			return nil, err
		}
		var v listView
		for _, lr := range recs {
			if v.pending(lr.pos, &lr.rec) {
				rep.Pending++
			}
		}
	}
	rep.Pending += int64(len(q.mem.byOrigin) + len(q.moving))
	// The schedules, as Open restores them; those it cannot plan here (set by a process whose time
	// zone database has a zone this one lacks) it keeps, but cannot fire.
	q.sched.byName.Ascend(func(s *sched) bool {
		rep.Schedules++
		if _, err := q.sched.specOf(s); err != nil {
			rep.Unplannable = append(rep.Unplannable, s.name)
		}
		return true
	})
	q.mu.Unlock()
	// Every segment: those that hold something needed, and the last, as compaction and Open read
	// them; the others for the records they hold, their damage being harmless.
	for i, seg := range segs {
		count := func(wal.Pos, *format.Record) { rep.Records++ }
		q.mu.Lock()
		needed := q.pins[seg] > 0 || i == len(segs)-1
		q.mu.Unlock()
		var err error
		if needed {
			err = q.scanSegment(seg, count)
		} else {
			err = scanRecords(q.log, wal.MakePos(seg, wal.SegmentHeader), wal.MakePos(seg+1, 0), func(p wal.Pos, rec *format.Record) error {
				if p.Segment() == seg {
					count(p, rec)
				}
				return nil
			}, func(ce *wal.CorruptError) error {
				if ce.File == filepath.Join(dir, wal.SegmentName(seg)) && !q.metDamage(ce) {
					rep.Unneeded = append(rep.Unneeded, Damage{File: ce.File, Offset: ce.Offset, Size: ce.Size, Reason: ce.Reason,
						Held: nonEmpty(describeDamage(ce))})
				}
				return nil
			})
		}
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
	}
	q.damageMu.Lock()
	for _, d := range q.dmg.found {
		if d.accounted {
			rep.Accounted = append(rep.Accounted, d)
		} else {
			rep.Damage = append(rep.Damage, d)
		}
	}
	q.damageMu.Unlock()
	for _, ds := range [][]Damage{rep.Damage, rep.Accounted} {
		slices.SortFunc(ds, func(a, b Damage) int {
			if a.File != b.File {
				if a.File < b.File {
					return -1
				}
				return 1
			}
			return int(a.Offset - b.Offset)
		})
	}
	return rep, nil
}

// openChecking opens dir as Open does, but changing nothing (see Check): a Queue whose log is
// read-only, whose damage is noted rather than logged, and which writes no secret, no checkpoint
// and no owed copies. Only Check uses it, and closes it with closeChecking.
func openChecking(dir string) (*Queue, error) {
	cfg := defaultConfig()
	cfg.logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	q := newQueue(dir, cfg)
	q.checking = true
	err := q.loadSecret()
	if err == nil {
		err = q.recover()
	}
	if err != nil {
		q.closeChecking()
		return nil, err
	}
	return q, nil
}

func (q *Queue) closeChecking() {
	close(q.closed)
	q.wheel.Stop()
	if q.log != nil {
		q.log.Close()
	}
}

// nonEmpty returns s as a list, empty for "".
func nonEmpty(s string) []string {
	if s == "" {
		return nil
	}
	return []string{s}
}

// describeCheckpoint says what dir's checkpoint is, for a report.
func describeCheckpoint(dir string) string {
	ck, err := readCheckpoint(dir)
	var ce *wal.CorruptError
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "none"
	case errors.As(err, &ce):
		return "unusable: " + ce.Reason + "; Open rebuilds the state from the log"
	case err != nil:
		return "unreadable: " + err.Error()
	}
	return fmt.Sprintf("version %d, replay from %v, slot %v, %d slots", ck.version, ck.replay, time.Duration(ck.slotNs), ck.slots)
}
