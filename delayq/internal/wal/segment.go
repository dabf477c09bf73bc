package wal

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// A segment file starts with a 16-byte header, then frames:
//
//	0  8  magic    "tockwal1"
//	8  4  number   the segment's number, which is also in its file name
//	12 4  reserved zero
//
// Segments are numbered from 1 upwards and never reused, so a position stays unambiguous after
// the segment it named is deleted.
const (
	segMagic       = "tockwal1"
	SegmentHeader  = 16
	segmentSuffix  = ".seg"
	segmentNameLen = 10
)

// A Pos is a record's position in the log: the segment number in the high 32 bits, the byte
// offset in the low 32. Positions of later records compare greater. The zero Pos names no record
// (offset 0 is the segment header), so it serves as "none" and ends a slot list.
type Pos uint64

// MakePos returns the position of offset off in segment seg.
func MakePos(seg uint32, off uint32) Pos { return Pos(uint64(seg)<<32 | uint64(off)) }

// Segment returns p's segment number.
func (p Pos) Segment() uint32 { return uint32(p >> 32) }

// Offset returns p's byte offset in its segment.
func (p Pos) Offset() uint32 { return uint32(p) }

func (p Pos) String() string { return fmt.Sprintf("%d:%d", p.Segment(), p.Offset()) }

// SegmentName returns the file name of segment seg.
func SegmentName(seg uint32) string {
	return fmt.Sprintf("%0*d%s", segmentNameLen, seg, segmentSuffix)
}

// ListSegments returns the numbers of the segment files in dir, in ascending order. Files that do
// not look like segments are ignored.
func ListSegments(dir string) ([]uint32, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("delayq: %w", err)
	}
	var segs []uint32
	for _, e := range ents {
		name := e.Name()
		if !strings.HasSuffix(name, segmentSuffix) || len(name) != segmentNameLen+len(segmentSuffix) {
			continue
		}
		n, err := strconv.ParseUint(strings.TrimSuffix(name, segmentSuffix), 10, 32)
		if err != nil || n == 0 {
			continue
		}
		segs = append(segs, uint32(n))
	}
	slices.Sort(segs)
	return segs, nil
}

func segmentHeader(seg uint32) []byte {
	b := make([]byte, SegmentHeader)
	copy(b, segMagic)
	binary.LittleEndian.PutUint32(b[8:], seg)
	return b
}

// checkHeader returns the damage of a segment header, or nil.
func checkHeader(path string, seg uint32, hdr []byte) *CorruptError {
	if len(hdr) < SegmentHeader {
		return &CorruptError{File: path, Offset: int64(len(hdr)), Reason: "segment header cut short", torn: true}
	}
	if string(hdr[:8]) != segMagic {
		return &CorruptError{File: path, Offset: 0, Reason: fmt.Sprintf("bad segment magic %q", hdr[:8])}
	}
	if n := binary.LittleEndian.Uint32(hdr[8:]); n != seg {
		return &CorruptError{File: path, Offset: 8, Reason: fmt.Sprintf("segment number %d in file named %d", n, seg)}
	}
	if binary.LittleEndian.Uint32(hdr[12:]) != 0 {
		return &CorruptError{File: path, Offset: 12, Reason: "nonzero reserved header field"}
	}
	return nil
}

// ErrCorrupt is matched (with errors.Is) by every error about damaged log or checkpoint data.
var ErrCorrupt = errors.New("delayq: corrupt data")

// A CorruptError says where damaged data was found. It matches ErrCorrupt.
type CorruptError struct {
	File   string
	Offset int64
	Reason string
	// Size is the number of damaged bytes: from Offset to the next valid record or the end of the
	// data. 0 when the damage was met reading one record by position.
	Size int64

	// torn: the bytes end before the frame at Offset does (a header cut short, a length that runs
	// past the end, zeros to the end), and no valid frame follows. At the end of the log, beyond
	// what a checkpoint covers, that is a write cut short by a crash, not corruption.
	torn bool
	// missing: the whole segment file is gone.
	missing bool
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("delayq: corrupt data in %s at offset %d: %s", e.File, e.Offset, e.Reason)
}

// Is reports whether target is ErrCorrupt, or ErrMissing for a segment file that is gone.
func (e *CorruptError) Is(target error) bool {
	return target == ErrCorrupt || e.missing && target == ErrMissing
}

func missingSegment(dir string, seg uint32) *CorruptError {
	return &CorruptError{File: segmentPath(dir, seg), Reason: "segment file missing", missing: true}
}

// IsTornTail reports whether err is about data that stopped before a record ended with nothing
// valid after it, rather than data that is present and wrong.
func IsTornTail(err error) bool {
	var ce *CorruptError
	return errors.As(err, &ce) && ce.torn
}

func corruptAt(path string, off int64, err error) error {
	var fe *frameError
	if errors.As(err, &fe) {
		return &CorruptError{File: path, Offset: off, Reason: fe.msg, torn: fe.truncated}
	}
	return fmt.Errorf("delayq: reading %s at offset %d: %w", path, off, err)
}

// A scanner reads the records of one segment file in order. Damage does not stop it: it reports
// the damaged bytes and goes on at the next offset where a valid frame starts, so one damaged
// record costs only what it held.
type scanner struct {
	path  string
	seg   uint32
	f     *os.File
	limit int64 // the scan ends here: the file's size, or the log's written end in it
	br    *bufio.Reader
	off   int64 // offset of the next frame
	buf   []byte
	// check: validate frames without decoding them (next returns a zero Record).
	check bool
}

// openScanner opens the segment file at path for a scan from offset from (SegmentHeader or the
// start of a frame) up to limit (-1: the file's size). A header that is damaged is returned as the
// first damage; the scan then starts at from all the same.
func openScanner(path string, seg uint32, from, limit int64) (*scanner, *CorruptError, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil, &missingError{path}
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
	s := &scanner{path: path, seg: seg, f: f, limit: limit, off: max(from, SegmentHeader)}
	s.br = bufio.NewReaderSize(io.NewSectionReader(f, s.off, max(limit-s.off, 0)), 1<<20)
	bad := checkHeader(path, seg, hdr[:n])
	if bad != nil {
		bad.Size = min(SegmentHeader, limit) - bad.Offset
	}
	return s, bad, nil
}

func (s *scanner) close() { s.f.Close() }

// next returns the next valid record and its offset, io.EOF at the limit, or the damage met on
// the way as a *CorruptError; after damage, the next call goes on where valid frames resume. Other
// errors (reading the file) end the scan.
func (s *scanner) next() (int64, Record, error) {
	if s.off >= s.limit {
		return 0, Record{}, io.EOF
	}
	off := s.off
	h, err := s.br.Peek(HeaderSize)
	if err != nil && !errors.Is(err, io.EOF) {
		return 0, Record{}, fmt.Errorf("delayq: reading %s: %w", s.path, err)
	}
	size, ferr := frameLen(h)
	if ferr == nil && off+int64(size) > s.limit {
		ferr = &frameError{msg: fmt.Sprintf("frame of %d bytes cut short at %d", size, s.limit-off), truncated: true}
	}
	if ferr == nil {
		s.buf = slices.Grow(s.buf[:0], size)[:size]
		if _, err := io.ReadFull(s.br, s.buf); err != nil {
			return 0, Record{}, fmt.Errorf("delayq: reading %s: %w", s.path, err)
		}
		var rec Record
		if s.check {
			if binary.LittleEndian.Uint32(s.buf) != crc32.Checksum(s.buf[4:], castagnoli) {
				ferr = &frameError{msg: "checksum mismatch"}
			} else if !validBody(Kind(s.buf[8]&^kindMore), s.buf[9:]) {
				ferr = &frameError{msg: fmt.Sprintf("malformed %v record", Kind(s.buf[8]&^kindMore))}
			} else {
				rec.More = s.buf[8]&kindMore != 0
			}
		} else {
			rec, ferr = decodeFrame(s.buf)
		}
		if ferr == nil {
			s.off += int64(size)
			return off, rec, nil
		}
	}
	// Damage at off: find where valid frames resume.
	fe := ferr.(*frameError)
	next, err := s.resync(off + 1)
	if err != nil {
		return 0, Record{}, err
	}
	complete := size > 0 && off+int64(size) <= s.limit
	ce := &CorruptError{File: s.path, Offset: off, Reason: fe.msg, Size: next - off, torn: next == s.limit && !complete}
	if zero, err := s.allZero(off, next); err == nil && zero {
		ce.Reason = "zero bytes"
		if next == s.limit {
			ce.Reason = "zero bytes to the end of the segment"
		}
		ce.torn = next == s.limit
	}
	s.off = next
	s.br.Reset(io.NewSectionReader(s.f, next, s.limit-next))
	return 0, Record{}, ce
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
		n, err := frameLen(rest[i:])
		if err != nil || i+n > len(rest) || !validBody(Kind(rest[i+8]&^kindMore), rest[i+9:i+n]) {
			continue
		}
		if binary.LittleEndian.Uint32(rest[i:]) == crc32.Checksum(rest[i+4:i+n], castagnoli) {
			return from + int64(i), nil
		}
	}
	return s.limit, nil
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

func segmentPath(dir string, seg uint32) string { return filepath.Join(dir, SegmentName(seg)) }
