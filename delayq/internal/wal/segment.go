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

// segmentName returns the file name of segment seg.
func segmentName(seg uint32) string {
	return fmt.Sprintf("%0*d%s", segmentNameLen, seg, segmentSuffix)
}

// listSegments returns the numbers of the segment files in dir, in ascending order. Files that do
// not look like segments are ignored.
func listSegments(dir string) ([]uint32, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("wal: %w", err)
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

func checkHeader(path string, seg uint32, hdr []byte) error {
	if len(hdr) < SegmentHeader {
		return &CorruptError{File: path, Offset: int64(len(hdr)), Reason: "segment header cut short", truncated: true}
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

	// truncated: the data ended before a frame did (a torn tail if it is the end of the log).
	truncated bool
	// frameEnd is the offset just after the bad frame when its length field was readable.
	frameEnd int64
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("delayq: corrupt data in %s at offset %d: %s", e.File, e.Offset, e.Reason)
}

// Is reports whether target is ErrCorrupt.
func (e *CorruptError) Is(target error) bool { return target == ErrCorrupt }

// IsTornTail reports whether err is about data that stopped before a record ended, rather than
// data that is present and wrong.
func IsTornTail(err error) bool {
	var ce *CorruptError
	return errors.As(err, &ce) && ce.truncated
}

func corruptAt(path string, off int64, err error) error {
	var fe *frameError
	if errors.As(err, &fe) {
		return &CorruptError{File: path, Offset: off, Reason: fe.msg, truncated: fe.truncated}
	}
	return fmt.Errorf("wal: reading %s at offset %d: %w", path, off, err)
}

// scanSegment calls fn for each record of the segment file at path, from offset from, in order,
// and returns the offset after the last good record. It stops at the first bad frame and returns
// it as a *CorruptError. from must be SegmentHeader or the start of a record.
func scanSegment(path string, seg uint32, from int64, fn func(off int64, r Record) error) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, fmt.Errorf("wal: %w", err)
	}
	defer f.Close()
	br := bufio.NewReaderSize(f, 1<<20)
	hdr := make([]byte, SegmentHeader)
	n, err := io.ReadFull(br, hdr)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return 0, fmt.Errorf("wal: reading %s: %w", path, err)
	}
	if err := checkHeader(path, seg, hdr[:n]); err != nil {
		return 0, err
	}
	if from < SegmentHeader {
		from = SegmentHeader
	}
	if _, err := br.Discard(int(from - SegmentHeader)); err != nil {
		return SegmentHeader, &CorruptError{File: path, Offset: from, Reason: "start position beyond end of segment", truncated: true}
	}
	off := from
	buf := make([]byte, 0, 4096)
	for {
		h, err := br.Peek(HeaderSize)
		if len(h) == 0 && errors.Is(err, io.EOF) {
			return off, nil
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return off, fmt.Errorf("wal: reading %s: %w", path, err)
		}
		if allZero(h) {
			// A zero header is never written: the rest is an unwritten or preallocated tail.
			if rest, _ := allZeroReader(br); rest {
				return off, &CorruptError{File: path, Offset: off, Reason: "zero bytes to end of segment", truncated: true}
			}
			return off, &CorruptError{File: path, Offset: off, Reason: "zero frame header"}
		}
		size, err := frameLen(h)
		if err != nil {
			return off, corruptAt(path, off, err)
		}
		buf = slices.Grow(buf[:0], size)[:size]
		if m, err := io.ReadFull(br, buf); err != nil {
			if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
				return off, &CorruptError{File: path, Offset: off, Reason: fmt.Sprintf("frame of %d bytes cut short at %d", size, m), truncated: true}
			}
			return off, fmt.Errorf("wal: reading %s: %w", path, err)
		}
		if fn == nil {
			// Validating only: check the checksum and the body's structure without decoding
			// (and allocating) its fields.
			if binary.LittleEndian.Uint32(buf) == crc32.Checksum(buf[4:], castagnoli) && validBody(Kind(buf[8]), buf[9:]) {
				off += int64(size)
				continue
			}
		}
		r, err := Decode(buf)
		if err != nil {
			err = corruptAt(path, off, err)
			var ce *CorruptError
			if errors.As(err, &ce) {
				ce.frameEnd = off + int64(size)
			}
			return off, err
		}
		if fn != nil {
			if err := fn(off, r); err != nil {
				return off, err
			}
		}
		off += int64(size)
	}
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// allZeroReader reports whether everything left in r is zero bytes.
func allZeroReader(r io.Reader) (bool, error) {
	buf := make([]byte, 32<<10)
	for {
		n, err := r.Read(buf)
		if !allZero(buf[:n]) {
			return false, nil
		}
		if err == io.EOF {
			return true, nil
		}
		if err != nil {
			return false, err
		}
	}
}

func segmentPath(dir string, seg uint32) string { return filepath.Join(dir, segmentName(seg)) }
