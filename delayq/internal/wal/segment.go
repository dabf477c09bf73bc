package wal

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// A segment file starts with a 16-byte header, then frames (see frame.go):
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

// A Pos is a frame's position in the log: the segment number in the high 32 bits, the byte
// offset in the low 32. Positions of later frames compare greater. The zero Pos names no frame (offset
// 0 is the segment header), so it serves as "none".
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
		return &CorruptError{File: path, Offset: int64(len(hdr)), Reason: "segment header cut short", lost: true, torn: true}
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

func segmentPath(dir string, seg uint32) string { return filepath.Join(dir, SegmentName(seg)) }
