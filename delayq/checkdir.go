package delayq

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
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
	Pending    int64 // messages the lists and the checkpoint hold, less those cancelled
	// Damage lists every damaged place, in the segments and the checkpoint, in file order.
	Damage []Damage
	// TornTail is a write cut short at the end of the log, which Open would cut: not damage.
	TornTail *Damage
}

// A Damage is one damaged place of a queue directory.
type Damage struct {
	File   string
	Offset int64
	Size   int64 // damaged bytes, up to the next valid record or the end of the file; 0 if not known
	Reason string
	// Held says what the damaged bytes held, as far as can be told: what the bytes themselves seem
	// to be (unverified), the list or message of the checkpoint that refers to them.
	Held []string
}

// Check verifies the queue directory dir without opening it for use, as a `bbolt check` does: it
// reads every segment and the checkpoint, walks every list of the disk wheel and reads every
// record the checkpoint names. It changes nothing. Damage is reported in the [CheckReport] (and is
// what Open would skip, each place costing the messages it held); the error is for what kept
// Check from looking ([ErrLocked] while a Queue has the directory open).
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
	c := &checker{dir: dir, rep: &CheckReport{Segments: len(segs)}, at: make(map[string]int)}
	ck := c.checkpoint()
	var covered wal.Pos
	if ck != nil {
		covered = ck.replay
	}
	for i, seg := range segs {
		err := wal.ScanFile(dir, seg, format.Verify, func(wal.Pos, wal.Frame) error {
			c.rep.Records++
			return nil
		}, func(ce *wal.CorruptError) error {
			if i == len(segs)-1 && wal.IsTornTail(ce) && wal.MakePos(seg, uint32(ce.Offset)) >= covered {
				c.rep.TornTail = &Damage{File: ce.File, Offset: ce.Offset, Size: ce.Size, Reason: ce.Reason}
				return nil
			}
			d := c.damage(ce)
			if s := c.describe(ce); s != "" {
				d.Held = append(d.Held, "what the bytes seem to hold (unverified): "+s)
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	if ck != nil {
		c.walk(ck)
	}
	slices.SortFunc(c.rep.Damage, func(a, b Damage) int {
		if a.File != b.File {
			if a.File < b.File {
				return -1
			}
			return 1
		}
		return int(a.Offset - b.Offset)
	})
	return c.rep, nil
}

type checker struct {
	dir string
	rep *CheckReport
	at  map[string]int // index in rep.Damage by file and offset
}

// damage returns the report's entry of the damage ce describes, adding it the first time.
func (c *checker) damage(ce *wal.CorruptError) *Damage {
	key := fmt.Sprintf("%s:%d", ce.File, ce.Offset)
	if i, ok := c.at[key]; ok {
		return &c.rep.Damage[i]
	}
	c.at[key] = len(c.rep.Damage)
	c.rep.Damage = append(c.rep.Damage, Damage{File: ce.File, Offset: ce.Offset, Size: ce.Size, Reason: ce.Reason})
	return &c.rep.Damage[len(c.rep.Damage)-1]
}

// describe reads the damaged frame ce starts and says what it seems to hold.
func (c *checker) describe(ce *wal.CorruptError) string {
	f, err := os.Open(ce.File)
	if err != nil {
		return ""
	}
	defer f.Close()
	hdr := make([]byte, wal.HeaderSize)
	if _, err := f.ReadAt(hdr, ce.Offset); err != nil {
		return ""
	}
	n := int64(binary.LittleEndian.Uint32(hdr[4:]))
	if n == 0 || n > wal.MaxBody+1 || (ce.Size > 0 && n+wal.HeaderSize > ce.Size) {
		return ""
	}
	b := make([]byte, wal.HeaderSize+n)
	if _, err := f.ReadAt(b, ce.Offset); err != nil {
		return ""
	}
	frame, ok := wal.UncheckedFrame(b)
	if !ok {
		return ""
	}
	return format.Describe(format.Kind(frame.Type), frame.Body)
}

// checkpoint reads the checkpoint, noting what it is.
func (c *checker) checkpoint() *checkpoint {
	ck, err := readCheckpoint(c.dir)
	var ce *wal.CorruptError
	switch {
	case errors.Is(err, fs.ErrNotExist):
		c.rep.Checkpoint = "none"
	case errors.As(err, &ce):
		c.rep.Checkpoint = "unusable: " + ce.Reason
		c.damage(ce).Held = append(c.damage(ce).Held, "the checkpoint: Open would rebuild the state from the log")
	case err != nil:
		c.rep.Checkpoint = "unreadable: " + err.Error()
	default:
		c.rep.Checkpoint = fmt.Sprintf("version %d, replay from %v, slot %v, %d slots", ck.version, ck.replay, time.Duration(ck.slotNs), ck.slots)
		return ck
	}
	return nil
}

// walk follows every list the checkpoint names and reads every message it holds in memory.
func (c *checker) walk(ck *checkpoint) {
	log := wal.OpenReadOnly(c.dir, format.Verify)
	defer log.Close()
	r := newRecordReader(log)
	slotNs := ck.slotNs
	due := func(slot int64) string { return time.Unix(0, slot*slotNs).UTC().Format(time.RFC3339) }
	for _, l := range ck.lists {
		if l.head == 0 {
			continue
		}
		c.rep.Lists++
		var v listView
		count := func(pos wal.Pos, rec *format.Record) {
			if v.pending(pos, rec) {
				c.rep.Pending++
			}
		}
		p := l.head
		for p != 0 && p >= l.first {
			rec, err := r.ReadAt(p)
			if err == nil && (!rec.Kind.Threads() || !rec.Threaded || rec.ListSlot != l.slot || rec.Prev >= p) {
				err = &wal.CorruptError{File: filepath.Join(c.dir, wal.SegmentName(p.Segment())), Offset: int64(p.Offset()), Reason: fmt.Sprintf("a %v record in the list of slot %d", rec.Kind, l.slot)}
			}
			if ce := c.asDamage(err, p); ce != nil {
				found := c.scanList(l.slot, l.first, p, count)
				d := c.damage(ce)
				d.Held = append(d.Held, fmt.Sprintf("a record of the list of slot %d (due %s); %d older records of the list found by scanning", l.slot, due(l.slot), found))
				break
			}
			if err != nil {
				c.rep.Checkpoint += "; reading: " + err.Error()
				break
			}
			count(p, &rec)
			p = rec.Prev
		}
	}
	for _, e := range ck.entries {
		rec, err := r.ReadAt(e.pos)
		if err == nil && rec.Kind != format.KindPut {
			err = &wal.CorruptError{File: filepath.Join(c.dir, wal.SegmentName(e.pos.Segment())), Offset: int64(e.pos.Offset()), Reason: fmt.Sprintf("a %v record held as a message", rec.Kind)}
		}
		if ce := c.asDamage(err, e.pos); ce != nil {
			d := c.damage(ce)
			d.Held = append(d.Held, fmt.Sprintf("a message in memory, first put at %v, due %s", e.origin, time.Unix(0, e.deliverAt).UTC().Format(time.RFC3339Nano)))
			continue
		}
		c.rep.Pending++
	}
}

// asDamage returns err, met reading the record at p, as damage, or nil if it is not damage.
func (c *checker) asDamage(err error, p wal.Pos) *wal.CorruptError {
	var ce *wal.CorruptError
	switch {
	case errors.As(err, &ce):
		return ce
	case errors.Is(err, wal.ErrMissing):
		return &wal.CorruptError{File: filepath.Join(c.dir, wal.SegmentName(p.Segment())), Offset: int64(p.Offset()), Reason: "segment file missing"}
	}
	return nil
}

// scanList counts the records of the list of slot older than to (from its first record on) by
// scanning the segments, as the queue does past a break in a list, and returns how many it found.
func (c *checker) scanList(slot int64, first, to wal.Pos, count func(wal.Pos, *format.Record)) int {
	segs, _ := wal.ListSegments(c.dir)
	var recs []listRecord
	for _, seg := range segs {
		if seg < first.Segment() || seg > to.Segment() {
			continue
		}
		wal.ScanFile(c.dir, seg, format.Verify, func(p wal.Pos, f wal.Frame) error {
			rec, err := decodeRecord(c.dir, p, f)
			if err == nil && p >= first && p < to && rec.Threaded && rec.ListSlot == slot && rec.Kind.Threads() {
				recs = append(recs, listRecord{p, rec})
			}
			return nil
		}, func(*wal.CorruptError) error { return nil })
	}
	for i := len(recs) - 1; i >= 0; i-- {
		count(recs[i].pos, &recs[i].rec)
	}
	return len(recs)
}
