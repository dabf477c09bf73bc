package delayq

import (
	"path/filepath"

	"github.com/tockwheel/tock/delayq/internal/format"
	"github.com/tockwheel/tock/delayq/internal/wal"
)

// The log's frames carry the records of package format, each a frame whose type is the record's
// kind: these are the queue's ways of appending one, and of reading them back by position or in
// order. The log checks every frame it reads with format.Verify, so a record that reaches the
// queue decodes; one that does not is damage at its position all the same.

// frameSize returns the size rec takes in the log.
func frameSize(rec *format.Record) int { return wal.FrameSize(rec.Size()) }

// appendLocked encodes rec and appends it to the log; more says that more records of the caller's
// atomic group follow. mu must be held: the encoding buffer is the queue's.
func (q *Queue) appendLocked(rec *format.Record, more bool) (pos, end wal.Pos, err error) {
	if q.encoded, err = rec.Append(q.encoded[:0]); err != nil {
		return 0, 0, err
	}
	if q.awaited {
		pos, end, err = q.log.AppendAwaited(byte(rec.Kind), more, q.encoded)
	} else {
		pos, end, err = q.log.Append(byte(rec.Kind), more, q.encoded)
	}
	if cap(q.encoded) > 1<<20 {
		q.encoded = nil // a large payload's buffer is not kept
	}
	return pos, end, err
}

// A recordReader reads records by position, through a wal.Reader's window.
type recordReader struct {
	r   *wal.Reader
	dir string
}

func newRecordReader(l *wal.Log) *recordReader { return &recordReader{r: l.NewReader(), dir: l.Dir()} }

// ReadAt reads the record at pos. Damage gives an error matching ErrCorrupt.
func (rr *recordReader) ReadAt(pos wal.Pos) (format.Record, error) {
	f, err := rr.r.ReadAt(pos)
	if err != nil {
		return format.Record{}, err
	}
	return decodeRecord(rr.dir, pos, f)
}

// decodeRecord decodes f, the frame at pos of the log in dir.
func decodeRecord(dir string, pos wal.Pos, f wal.Frame) (format.Record, error) {
	rec, err := format.DecodeRecord(format.Kind(f.Type), f.Body)
	if err != nil {
		return format.Record{}, corruptAt(dir, pos, err.Error())
	}
	return rec, nil
}

// scanRecords calls fn for every valid record of l in [from, to) in order, and damage for the
// damage met, as wal.Log.Scan does. The record fn is given is only valid during the call: copy
// it (*rec) to keep it.
func scanRecords(l *wal.Log, from, to wal.Pos, fn func(wal.Pos, *format.Record) error, damage func(*wal.CorruptError) error) error {
	dir := l.Dir()
	// One record is decoded into and handed to fn, for every frame: a record per frame would
	// escape to the heap, an allocation per record replayed. fn must not keep rec past its call;
	// the names and payload it holds are the decoder's own copies (format.DecodeRecord), which it
	// may keep.
	var rec format.Record
	return l.Scan(from, to, func(pos wal.Pos, f wal.Frame) error {
		var err error
		rec, err = decodeRecord(dir, pos, f)
		if err != nil {
			if damage == nil {
				return err
			}
			return damage(err.(*wal.CorruptError))
		}
		return fn(pos, &rec)
	}, damage)
}

// corruptAt returns the damage of the record at p of the log in dir.
func corruptAt(dir string, p wal.Pos, reason string) *wal.CorruptError {
	return wal.NewCorruptError(filepath.Join(dir, wal.SegmentName(p.Segment())), int64(p.Offset()), reason)
}
