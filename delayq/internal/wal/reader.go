package wal

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
)

// A Reader reads frames by position through a cache of one window of one segment, so following
// a chain of frames backwards through frames written close together costs few reads. Frames
// appended and not yet written are read from memory: reading never waits for the writer. A Reader
// is not safe for concurrent use; give each goroutine its own.
type Reader struct {
	l     *Log
	seg   uint32
	start int64
	buf   []byte
}

// NewReader returns a Reader of l.
func (l *Log) NewReader() *Reader { return &Reader{l: l} }

// ReadWindow is the size of the window a Reader reads around a frame it does not hold: chains are
// followed backwards through frames written close together, so one read serves many of them.
const ReadWindow = 256 << 10

// ReadAt reads the frame at pos, which must have been appended. The frame's body is valid until
// the next call.
func (r *Reader) ReadAt(pos Pos) (Frame, error) {
	seg, off := pos.Segment(), int64(pos.Offset())
	path := func() string { return segmentPath(r.l.dir, seg) } // only for errors: it costs a Sprintf
	if off < SegmentHeader {
		return Frame{}, &CorruptError{File: path(), Offset: off, Reason: "position inside the segment header"}
	}
	if b, ok, err := r.l.unwritten(pos); ok {
		if err != nil {
			return Frame{}, err
		}
		f, err := checkFrame(b, r.l.verify)
		if err != nil {
			return Frame{}, corruptAt(path(), off, err)
		}
		return f, nil
	}
	hdr, err := r.window(seg, off, HeaderSize)
	if err != nil {
		return Frame{}, err
	}
	size, err := frameLen(hdr)
	if err != nil {
		return Frame{}, corruptAt(path(), off, err)
	}
	b, err := r.window(seg, off, size)
	if err != nil {
		return Frame{}, err
	}
	f, err := checkFrame(b, r.l.verify)
	if err != nil {
		return Frame{}, corruptAt(path(), off, err)
	}
	return f, nil
}

// window returns n bytes at off of segment seg, reading a window that ends a little after them
// (chains are followed backwards) when the cache does not hold them. The window starts at off at
// the latest: n bytes larger than the window are read whole.
func (r *Reader) window(seg uint32, off int64, n int) ([]byte, error) {
	if seg == r.seg && off >= r.start && off+int64(n) <= r.start+int64(len(r.buf)) {
		return r.buf[off-r.start : off-r.start+int64(n)], nil
	}
	f, err := r.l.file(seg)
	if err != nil {
		return nil, err
	}
	// What the window may keep: the segment being written to is longer than its frames (the
	// zeros written ahead of them, see osFile), and a frame written there later must not be
	// read from a window that holds zeros in its place. Taken before the read, so that the
	// window holds no byte written after it.
	limit := r.l.writtenIn(seg)
	start := min(off, max(off+int64(n)+4096-ReadWindow, SegmentHeader))
	size := max(int(off-start)+n, ReadWindow)
	if cap(r.buf) < size {
		r.buf = make([]byte, size)
	}
	buf := r.buf[:size]
	m, err := f.ReadAt(buf, start)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("delayq: reading %s: %w", f.Name(), err)
	}
	if limit >= 0 {
		m = int(max(0, min(int64(m), limit-start)))
	}
	r.seg, r.start, r.buf = seg, start, buf[:m]
	if off+int64(n) > start+int64(m) {
		return nil, &CorruptError{File: f.Name(), Offset: off, Reason: fmt.Sprintf("frame of %d bytes past the end of the file", n), torn: true}
	}
	return r.buf[off-start : off-start+int64(n)], nil
}

// ReadAt reads the frame at pos with a Reader of its own.
func (l *Log) ReadAt(pos Pos) (Frame, error) { return l.NewReader().ReadAt(pos) }

// file returns an open read handle for segment seg.
func (l *Log) file(seg uint32) (*os.File, error) {
	l.rmu.Lock()
	defer l.rmu.Unlock()
	if f := l.files[seg]; f != nil {
		return f, nil
	}
	f, err := os.Open(segmentPath(l.dir, seg))
	if errors.Is(err, os.ErrNotExist) {
		return nil, missingSegment(l.dir, seg)
	}
	if err != nil {
		return nil, fmt.Errorf("delayq: %w", err)
	}
	l.files[seg] = f
	return f, nil
}

// writtenIn returns the offset in segment seg before which the files hold the log's frames, or
// -1 when the whole file does: seg is before the segment being written to.
func (l *Log) writtenIn(seg uint32) int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch w := l.written; {
	case seg < w.Segment():
		return -1
	case seg == w.Segment():
		return int64(w.Offset())
	}
	return 0
}

// unwritten returns a copy of the frame at pos if it is appended and not yet written, with ok
// set; ok is false when pos is written, so that the files hold it.
func (l *Log) unwritten(pos Pos) (frame []byte, ok bool, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if pos < l.written {
		return nil, false, nil
	}
	for _, cs := range [][]chunk{l.inflight, l.pending} {
		for _, c := range cs {
			if c.seg != pos.Segment() || pos.Offset() < c.off || pos.Offset() >= c.off+uint32(len(c.data)) {
				continue
			}
			b := c.data[pos.Offset()-c.off:]
			n, err := frameLen(b)
			if err != nil || n > len(b) {
				return nil, true, corruptAt(segmentPath(l.dir, pos.Segment()), int64(pos.Offset()), &frameError{msg: "position inside a frame"})
			}
			return slices.Clone(b[:n]), true, nil
		}
	}
	return nil, true, &CorruptError{File: segmentPath(l.dir, pos.Segment()), Offset: int64(pos.Offset()), Reason: "position past the end of the log"}
}
