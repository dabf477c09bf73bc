package wal

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"slices"
)

// A scanner reads the frames of one segment file in order. Damage does not stop it: it reports
// the damaged bytes and goes on at the next offset where a valid frame starts, so one damaged
// frame costs only what it held.
type scanner struct {
	path   string
	seg    uint32
	f      *os.File
	verify Verifier
	limit  int64 // the scan ends here: the file's size, or the log's written end in it
	br     *bufio.Reader
	off    int64 // offset of the next frame
	buf    []byte
}

// openScanner opens the segment file at path for a scan from offset from (SegmentHeader or the
// start of a frame) up to limit (-1: the file's size). A header that is damaged is returned as the
// first damage; the scan then starts at from all the same.
func openScanner(path string, seg uint32, verify Verifier, from, limit int64) (*scanner, *CorruptError, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil, &CorruptError{File: path, Reason: "segment file missing", missing: true}
	}
	if err != nil {
		return nil, nil, fmt.Errorf("delayq: %w", err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("delayq: %w", err)
	}
	if limit < 0 || limit > fi.Size() {
		limit = fi.Size()
	}
	hdr := make([]byte, SegmentHeader)
	n, err := f.ReadAt(hdr, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		f.Close()
		return nil, nil, fmt.Errorf("delayq: reading %s: %w", path, err)
	}
	s := &scanner{path: path, seg: seg, f: f, verify: verify, limit: limit, off: max(from, SegmentHeader)}
	s.br = bufio.NewReaderSize(io.NewSectionReader(f, s.off, max(limit-s.off, 0)), 1<<20)
	bad := checkHeader(path, seg, hdr[:n])
	if bad != nil {
		bad.Size = min(SegmentHeader, limit) - bad.Offset
		if !bad.torn {
			// A header of zeros: the first write to the segment, lost (see frame.go).
			lost, err := s.zeroSector(0, SegmentHeader)
			if err != nil {
				f.Close()
				return nil, nil, err
			}
			bad.lost = lost
		}
	}
	return s, bad, nil
}

func (s *scanner) close() { s.f.Close() }

// next returns the next valid frame and its offset, io.EOF at the limit, or the damage met on the
// way as a *CorruptError; after damage, the next call goes on where valid frames resume. Other
// errors (reading the file) end the scan. The frame's body is valid until the next call.
func (s *scanner) next() (int64, Frame, error) {
	if s.off >= s.limit {
		return 0, Frame{}, io.EOF
	}
	off := s.off
	h, err := s.br.Peek(HeaderSize)
	if err != nil && !errors.Is(err, io.EOF) {
		return 0, Frame{}, fmt.Errorf("delayq: reading %s: %w", s.path, err)
	}
	size, ferr := frameLen(h)
	if ferr == nil && off+int64(size) > s.limit {
		ferr = &frameError{msg: fmt.Sprintf("frame of %d bytes cut short at %d", size, s.limit-off), truncated: true}
	}
	if ferr == nil {
		s.buf = slices.Grow(s.buf[:0], size)[:size]
		if _, err := io.ReadFull(s.br, s.buf); err != nil {
			return 0, Frame{}, fmt.Errorf("delayq: reading %s: %w", s.path, err)
		}
		var f Frame
		if f, ferr = checkFrame(s.buf, s.verify); ferr == nil {
			s.off += int64(size)
			return off, f, nil
		}
	}
	// Damage at off: find where valid frames resume.
	fe := ferr.(*frameError)
	next, err := s.resync(off + 1)
	if err != nil {
		return 0, Frame{}, err
	}
	complete := size > 0 && off+int64(size) <= s.limit
	// Whether a write lost by a power loss explains the damage (see "The end of the log" in
	// frame.go): the file ends inside the frame with nothing valid after it, or a sector the
	// frame reaches into reads as zeros, as a sector written over zeros and lost does.
	end := off + HeaderSize
	if size > 0 {
		end = off + int64(size)
	}
	lost, err := s.zeroSector(off, min(end, next))
	if err != nil {
		return 0, Frame{}, err
	}
	if complete && !lost && end < next && next == s.limit {
		// A complete frame, corrupt, with nothing valid after it: when only zeros follow it
		// (those written ahead of the frames, or a later write lost), they are not its damage
		// but the end of the log after it, met next as after any last frame.
		if zero, err := s.allZero(end, next); err == nil && zero {
			next = end
		}
	}
	ce := &CorruptError{File: s.path, Offset: off, Reason: fe.msg, Size: next - off}
	if zero, err := s.allZero(off, next); err == nil && zero {
		ce.Reason = "zero bytes"
		if next == s.limit {
			ce.Reason = "zero bytes to the end of the segment"
		}
	}
	ce.lost = lost || next == s.limit && !complete
	ce.torn = ce.lost && next == s.limit
	s.off = next
	s.br.Reset(io.NewSectionReader(s.f, next, s.limit-next))
	return 0, Frame{}, ce
}

// resync returns the first offset at or after from where a valid frame lies wholly before the
// limit, or the limit. It reads the rest of the segment, which only damage makes it do.
func (s *scanner) resync(from int64) (int64, error) {
	if from >= s.limit {
		return s.limit, nil
	}
	rest := make([]byte, s.limit-from)
	if _, err := s.f.ReadAt(rest, from); err != nil && !errors.Is(err, io.EOF) {
		return 0, fmt.Errorf("delayq: reading %s: %w", s.path, err)
	}
	for i := 0; i+HeaderSize < len(rest); i++ {
		n := sizeAt(rest[i:])
		if n == 0 || i+n > len(rest) {
			continue
		}
		typ := rest[i+8] &^ moreBit
		if typ == 0 || s.verify != nil && s.verify(typ, rest[i+HeaderSize+1:i+n]) != nil {
			continue
		}
		if binary.LittleEndian.Uint32(rest[i:]) == crc32.Checksum(rest[i+4:i+n], castagnoli) {
			return from + int64(i), nil
		}
	}
	return s.limit, nil
}

// sectorSize is the unit a disk writes whole, or not at all, when the power fails: the smallest
// there is, so that no lost write is taken for damage on a disk whose unit is larger.
const sectorSize = 512

// zeroSector reports whether a sector (sectorSize bytes from a multiple of sectorSize) that
// [from, to) reaches into holds only zero bytes from from, or from its start, to its end or to
// the limit.
func (s *scanner) zeroSector(from, to int64) (bool, error) {
	hi := min((to+sectorSize-1)/sectorSize*sectorSize, s.limit)
	if to <= from || hi <= from {
		return false, nil
	}
	b := make([]byte, hi-from)
	n, err := s.f.ReadAt(b, from)
	if err != nil && !errors.Is(err, io.EOF) {
		return false, fmt.Errorf("delayq: reading %s: %w", s.path, err)
	}
	return zeroSector(b[:n], from, to), nil
}

// zeroSector reports whether b, the bytes of a file from offset base on, holds a sector piece of
// only zeros, as scanner.zeroSector does for [base, to): b ends at a sector's end or the file's.
func zeroSector(b []byte, base, to int64) bool {
	for p := base; p < to && p < base+int64(len(b)); {
		q := min((p/sectorSize+1)*sectorSize, base+int64(len(b)))
		if !slices.ContainsFunc(b[p-base:q-base], func(c byte) bool { return c != 0 }) {
			return true
		}
		p = q
	}
	return false
}

// allZero reports whether the file holds only zero bytes in [from, to).
func (s *scanner) allZero(from, to int64) (bool, error) {
	buf := make([]byte, min(to-from, 32<<10))
	for from < to {
		n, err := s.f.ReadAt(buf[:min(int64(len(buf)), to-from)], from)
		for _, c := range buf[:n] {
			if c != 0 {
				return false, nil
			}
		}
		if err != nil {
			return false, err
		}
		from += int64(n)
	}
	return true, nil
}

// Scan calls fn for every valid frame in [from, to), in order, up to the end of the log as it
// was written when Scan began; to <= 0 means no bound. from must be the start of a frame or the
// header of a segment. Segments before from's segment are not looked at; a segment missing from
// there on is damage (matching ErrMissing as well as ErrCorrupt). The frame's body is valid only
// during the call of fn.
//
// Damage does not stop the scan: it is passed to damage, and the scan goes on with the next valid
// frame. With damage nil, Scan returns the first damage instead, as a *CorruptError. Scan stops at
// the first error fn or damage returns, and returns it.
func (l *Log) Scan(from, to Pos, fn func(pos Pos, f Frame) error, damage func(*CorruptError) error) error {
	if damage == nil {
		damage = func(ce *CorruptError) error { return ce }
	}
	segs, _ := l.Segments()
	end := l.WrittenEnd()
	if to <= 0 || to > end {
		to = end
	}
	next := max(from.Segment(), 1) // the segment expected next
	for _, s := range segs {
		if s < from.Segment() {
			continue
		}
		if MakePos(s, SegmentHeader) >= to {
			break
		}
		for ; next < s; next++ {
			if err := damage(missingSegment(l.dir, next)); err != nil {
				return err
			}
		}
		next = s + 1
		start := int64(SegmentHeader)
		if s == from.Segment() {
			start = max(int64(from.Offset()), SegmentHeader)
		}
		limit := int64(-1)
		if s == to.Segment() {
			limit = int64(to.Offset())
		}
		if err := scanSegment(l.dir, s, l.verify, start, limit, fn, damage); err != nil {
			return err
		}
	}
	return nil
}

// scanSegment scans segment s of dir from start to limit (-1: its end), as Scan does.
func scanSegment(dir string, s uint32, verify Verifier, start, limit int64, fn func(Pos, Frame) error, damage func(*CorruptError) error) error {
	path := segmentPath(dir, s)
	sc, hdr, err := openScanner(path, s, verify, start, limit)
	if errors.Is(err, ErrMissing) {
		return nil // removed since the list of segments was taken: nothing in it is needed
	}
	if err != nil {
		return err
	}
	defer sc.close()
	if hdr != nil {
		if err := damage(hdr); err != nil {
			return err
		}
	}
	if limit >= 0 && sc.limit < limit {
		// The file ends before the log says it does.
		if err := damage(&CorruptError{File: path, Offset: sc.limit, Reason: fmt.Sprintf("segment ends at %d, before the log's end at %d", sc.limit, limit)}); err != nil {
			return err
		}
	}
	if start > sc.limit {
		return damage(&CorruptError{File: path, Offset: sc.limit, Reason: fmt.Sprintf("segment ends at %d, before position %d", sc.limit, start)})
	}
	for {
		off, f, err := sc.next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		var ce *CorruptError
		if errors.As(err, &ce) {
			if err := damage(ce); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			return err
		}
		if err := fn(MakePos(s, uint32(off)), f); err != nil {
			return err
		}
	}
}

// ScanFile calls fn for every valid frame of the segment file seg in dir, in order, and damage
// for the damage met (see Scan), without opening the log. A torn write at the end of the file is
// damage too; IsTornTail tells it apart. (Open cuts more of a last segment: a lost write followed
// by valid frames, see "The end of the log" in frame.go.)
func ScanFile(dir string, seg uint32, verify Verifier, fn func(Pos, Frame) error, damage func(*CorruptError) error) error {
	return scanSegment(dir, seg, verify, SegmentHeader, -1, fn, damage)
}
