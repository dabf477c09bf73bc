package wal

import (
	"errors"
	"fmt"
	"io"
	"os"
)

// repair finds the segments of the log and makes the end of the last one ready to append to:
//
//   - A torn write is cut: from the first damage in the last segment, at or after covered, from
//     which on a write lost by a power loss explains all the damage (see "The end of the log" in
//     frame.go: a frame cut short by the end of the file, or zeros where a frame's sector was),
//     to the end of the file, valid frames after it included; and a group of frames whose last
//     frame is missing. Only what lies at or after covered is ever cut. When the segment's header
//     was lost, the whole file goes.
//   - Any other damage (bytes present and wrong, such as a complete frame that fails its checksum
//     with no sector of zeros in it, or damage before covered) is corruption: it is left as it is
//     and reported by OpenDamage, and scans and reads go past it. When the last segment ends
//     before covered, appends go to a new segment, so that no position the checkpoint names is
//     ever given to another frame.
func (l *Log) repair(covered Pos) error {
	segs, err := ListSegments(l.dir)
	if err != nil {
		return err
	}
	for _, s := range segs {
		fi, err := os.Stat(segmentPath(l.dir, s))
		if err != nil {
			return fmt.Errorf("delayq: %w", err)
		}
		l.sizes[s] = fi.Size()
	}
	var last uint32
	if len(segs) > 0 {
		last = segs[len(segs)-1]
	}
	switch {
	case covered.Segment() > last:
		// The segment the checkpoint ends in is gone: go on after it. (Segments between may have
		// been deleted by retention.)
		l.openDamage = append(l.openDamage, missingSegment(l.dir, covered.Segment()))
		l.startFresh(covered.Segment() + 1)
		return nil
	case len(segs) == 0:
		if !l.readOnly {
			l.startSegmentLocked(1)
		}
		return nil
	}
	return l.openLast(last, covered)
}

// startFresh makes seg, a new segment, the one appends go to, with everything before it written.
// Read-only, it only marks everything before seg written.
func (l *Log) startFresh(seg uint32) {
	if !l.readOnly {
		l.startSegmentLocked(seg)
	}
	l.written, l.durable = MakePos(seg, 0), MakePos(seg, 0)
}

// endAt makes the log end at offset size of segment seg, everything before it written, as a
// read-only log does where a writable one would go on appending.
func (l *Log) endAt(seg uint32, size int64) {
	l.end = MakePos(seg, uint32(size))
	l.written, l.durable = l.end, l.end
}

// openLast validates the last segment, cuts a torn write at its end, and opens it for appending.
func (l *Log) openLast(seg uint32, covered Pos) error {
	path := segmentPath(l.dir, seg)
	coveredOff := int64(0)
	switch {
	case covered.Segment() > seg:
		coveredOff = l.sizes[seg] + 1
	case covered.Segment() == seg:
		coveredOff = int64(covered.Offset())
	}
	sc, hdrDamage, err := openScanner(path, seg, l.verify, SegmentHeader, -1)
	if err != nil {
		return err
	}
	size := sc.limit
	if hdrDamage != nil && hdrDamage.torn {
		sc.close()
		if coveredOff > 0 {
			l.openDamage = append(l.openDamage, hdrDamage)
			l.startFresh(seg + 1)
			return nil
		}
		// The header itself never made it: drop the file and start it again.
		l.tornTail = hdrDamage
		return l.dropLast(seg, path, size)
	}
	var damage []*CorruptError
	// groupAt[i] is groupStart when damage[i] was met; framesAfter[i] counts the valid frames
	// between damage[i] and the next damage or the end.
	var groupAt []int64
	var framesAfter []int
	groupStart := int64(-1) // first frame of a group whose last frame has not been met
	if hdrDamage != nil {
		damage, groupAt, framesAfter = append(damage, hdrDamage), append(groupAt, -1), append(framesAfter, 0)
	}
	for {
		off, f, err := sc.next()
		if errors.Is(err, io.EOF) {
			break
		}
		var ce *CorruptError
		if errors.As(err, &ce) {
			damage, groupAt, framesAfter = append(damage, ce), append(groupAt, groupStart), append(framesAfter, 0)
			continue
		}
		if err != nil {
			sc.close()
			return err
		}
		if n := len(framesAfter); n > 0 {
			framesAfter[n-1]++
		}
		if f.More && groupStart < 0 {
			groupStart = off
		} else if !f.More {
			groupStart = -1
		}
	}
	sc.close()
	// The log ends at the first damage past what the checkpoint covers from which on a lost
	// write explains all the damage (see "The end of the log" in frame.go): frames after it are
	// of the same unsynced commit, none of them acknowledged.
	cut := int64(-1)
	i := len(damage)
	for i > 0 && damage[i-1].lost && damage[i-1].Offset >= coveredOff {
		i--
	}
	if i < len(damage) {
		cut, groupStart = damage[i].Offset, groupAt[i]
		t := *damage[i]
		t.Size, t.torn = size-cut, true
		if n := sumFrom(framesAfter, i); n > 0 {
			t.Reason += fmt.Sprintf(", then %d valid frames", n)
		}
		l.tornTail = &t
		damage = damage[:i]
	}
	if groupStart >= coveredOff && (cut < 0 || groupStart < cut) && !damageAfter(damage, groupStart) {
		cut = groupStart
		l.tornTail = &CorruptError{File: path, Offset: cut, Size: size - cut, Reason: "an atomic group without its last frame", lost: true, torn: true}
	}
	if cut == 0 {
		// The header's write was lost: so was every later one to the segment.
		return l.dropLast(seg, path, size)
	}
	if cut >= 0 && l.readOnly {
		size = cut
	} else if cut >= 0 {
		l.logger.Warn("delayq: cutting a torn write at the end of the log", "file", path, "offset", cut, "dropped_bytes", size-cut, "reason", l.tornTail.Reason)
		if err := os.Truncate(path, cut); err != nil {
			return fmt.Errorf("delayq: cutting a torn write: %w", err)
		}
		size = cut
		l.sizes[seg] = cut
	}
	l.openDamage = append(l.openDamage, damage...)
	if size < coveredOff {
		// The segment ends before the checkpoint does: appending to it would give positions the
		// checkpoint names to other frames.
		l.startFresh(seg + 1)
		return nil
	}
	if l.readOnly {
		l.endAt(seg, size)
		return nil
	}
	f, err := l.fs.Append(path)
	if err != nil {
		return fmt.Errorf("delayq: %w", err)
	}
	if err := f.Datasync(); err != nil {
		f.Close()
		return fmt.Errorf("delayq: %w", err)
	}
	l.cur, l.curSeg = f, seg
	l.end = MakePos(seg, uint32(size))
	l.written, l.durable = l.end, l.end
	return nil
}

// dropLast removes the last segment, seg, whose header's write was lost (l.tornTail says how),
// and starts it again. Read-only, it only makes the log end before it.
func (l *Log) dropLast(seg uint32, path string, size int64) error {
	if l.readOnly {
		l.endAt(seg, 0)
		return nil
	}
	l.logger.Warn("delayq: removing segment with torn header", "file", path, "bytes", size, "reason", l.tornTail.Reason)
	if err := os.Remove(path); err != nil {
		return fmt.Errorf("delayq: %w", err)
	}
	delete(l.sizes, seg)
	if err := SyncDir(l.dir); err != nil {
		return err
	}
	l.startFresh(seg)
	return nil
}

// sumFrom returns the sum of ns[i:].
func sumFrom(ns []int, i int) int {
	n := 0
	for _, v := range ns[i:] {
		n += v
	}
	return n
}

// damageAfter reports whether any of damage lies at or after off.
func damageAfter(damage []*CorruptError, off int64) bool {
	for _, d := range damage {
		if d.Offset >= off {
			return true
		}
	}
	return false
}
