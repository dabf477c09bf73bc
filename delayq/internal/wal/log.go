package wal

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"sync"
	"time"
)

// maxPending bounds the bytes appended and not yet written.
const maxPending = 16 << 20

// ErrClosed is returned by Append and the waits once Close has begun.
var ErrClosed = errors.New("delayq: log closed")

// ErrMissing is matched by the error of a read from a segment that has been deleted. Such an
// error matches ErrCorrupt too: a record that something still refers to is gone.
var ErrMissing = errors.New("delayq: segment file missing")

type missingError struct{ path string }

func (e *missingError) Error() string {
	return "delayq: corrupt data: segment file " + e.path + " is missing"
}

func (e *missingError) Is(target error) bool { return target == ErrMissing || target == ErrCorrupt }

// Options configure Open.
type Options struct {
	// SegmentSize is the size past which a new segment is started. Default 64 MiB.
	SegmentSize int64
	// NoSync skips fdatasync: records are durable against a process crash once written, but not
	// against power loss.
	NoSync bool
	// Logger receives notes about repairs (a truncated torn tail). Default slog.Default().
	Logger *slog.Logger
}

// A Log is a directory of segment files. Records are appended in memory under a short lock and
// written, then synced, by one flusher goroutine, so every write and fdatasync is shared by all the
// records appended while the previous one was in progress (group commit).
//
// A Log is safe for concurrent use.
type Log struct {
	dir     string
	segSize int64
	noSync  bool
	logger  *slog.Logger

	mu sync.Mutex
	// work wakes the flusher when pending grows or Close begins; only the flusher waits on it.
	work *sync.Cond
	// progress is broadcast when written or durable move, or err is set: waiters wait on it.
	progress *sync.Cond
	pending  []chunk // appended, not yet handed to the flusher
	// pendingBytes counts the bytes in pending plus those being written; Append waits while it
	// is over maxPending, so producers faster than the disk (with NoSync) are held back instead of
	// filling memory.
	pendingBytes int
	end          Pos   // position after the last appended record
	written      Pos   // everything before it is in the files (readable)
	durable      Pos   // everything before it is synced
	err          error // sticky: the first write or sync error; the log is unusable after it
	closing      bool
	sizes        map[uint32]int64 // segment number -> bytes, for every segment file that exists
	done         chan struct{}    // closed when the flusher exits

	rmu   sync.Mutex // guards files; never held with mu
	files map[uint32]*os.File

	free [][]byte // data buffers for reuse, guarded by mu

	// flusher-only state
	cur    *os.File
	curSeg uint32

	smu   sync.Mutex // guards syncs; never held with mu
	syncs SyncStats
}

// SyncBuckets is the number of buckets of SyncStats.Buckets.
const SyncBuckets = 17

// SyncBound returns the upper bound of SyncStats.Buckets[i]: 50µs doubled i times, so the
// buckets reach from 50µs to about 3.3s.
func SyncBound(i int) time.Duration { return 50 * time.Microsecond << i }

// SyncStats counts the fdatasync calls that make appended records durable since Open: one per
// group commit (none with NoSync), one when a segment is full, and one at Close. The syncs of
// Open's repairs and of directories are not counted.
type SyncStats struct {
	Count uint64
	Total time.Duration // time spent in them
	// Buckets[i] counts the syncs that took at most SyncBound(i) and longer than SyncBound(i-1).
	// Syncs longer than the last bound are only in Count and Total.
	Buckets [SyncBuckets]uint64
}

// SyncStats returns the counts of the log's syncs so far.
func (l *Log) SyncStats() SyncStats {
	l.smu.Lock()
	defer l.smu.Unlock()
	return l.syncs
}

// sync makes f's data durable, timing it into the sync statistics.
func (l *Log) sync(f *os.File) error {
	start := time.Now()
	err := fdatasync(f)
	d := time.Since(start)
	l.smu.Lock()
	defer l.smu.Unlock()
	l.syncs.Count++
	l.syncs.Total += d
	for i := range SyncBuckets {
		if d <= SyncBound(i) {
			l.syncs.Buckets[i]++
			break
		}
	}
	return err
}

// A chunk is bytes to append to one segment.
type chunk struct {
	seg  uint32
	data []byte
}

// Open opens the log in dir, creating dir if needed. It validates the last segment and truncates
// a torn tail: a bad record in the last segment after which no valid record follows (a record cut
// short, zeros, or the garbage a write interrupted by power loss can leave). A bad record followed
// by good ones is damage to synced data: Open returns a *CorruptError naming the file and offset.
// Earlier segments are checked as they are read.
func Open(dir string, opts Options) (*Log, error) {
	if opts.SegmentSize <= 0 {
		opts.SegmentSize = 64 << 20
	}
	if opts.SegmentSize > 1<<31 {
		return nil, fmt.Errorf("wal: segment size %d over 2 GiB", opts.SegmentSize)
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("wal: %w", err)
	}
	l := &Log{
		dir:     dir,
		segSize: opts.SegmentSize,
		noSync:  opts.NoSync,
		logger:  opts.Logger,
		sizes:   make(map[uint32]int64),
		files:   make(map[uint32]*os.File),
		done:    make(chan struct{}),
	}
	l.work = sync.NewCond(&l.mu)
	l.progress = sync.NewCond(&l.mu)
	segs, err := listSegments(dir)
	if err != nil {
		return nil, err
	}
	for _, s := range segs {
		fi, err := os.Stat(segmentPath(dir, s))
		if err != nil {
			return nil, fmt.Errorf("wal: %w", err)
		}
		l.sizes[s] = fi.Size()
	}
	if len(segs) == 0 {
		l.startSegmentLocked(1)
	} else if err := l.openLast(segs[len(segs)-1]); err != nil {
		return nil, err
	}
	go l.flush()
	return l, nil
}

// validFrameAfter reports whether any offset at or after from in the file at path starts a valid
// frame.
func validFrameAfter(path string, from int64) (bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return false, fmt.Errorf("wal: %w", err)
	}
	defer f.Close()
	if _, err := f.Seek(from, io.SeekStart); err != nil {
		return false, fmt.Errorf("wal: %w", err)
	}
	b, err := io.ReadAll(f)
	if err != nil {
		return false, fmt.Errorf("wal: reading %s: %w", path, err)
	}
	for i := 0; i+HeaderSize < len(b); i++ {
		n, err := frameLen(b[i:])
		if err != nil || i+n > len(b) {
			continue
		}
		if _, err := Decode(b[i : i+n]); err == nil {
			return true, nil
		}
	}
	return false, nil
}

// openLast validates the last segment, repairs a torn tail, and opens it for appending.
func (l *Log) openLast(seg uint32) error {
	path := segmentPath(l.dir, seg)
	size := l.sizes[seg]
	good, err := scanSegment(path, seg, SegmentHeader, nil)
	if err != nil {
		var ce *CorruptError
		if !errors.As(err, &ce) {
			return err
		}
		torn := ce.truncated || ce.frameEnd >= size
		if ce.Offset >= SegmentHeader {
			// Garbage after the last sync (a torn write) holds no valid frame; damage to synced
			// data is followed by the records written after it. That holds for a frame that seems
			// cut short too: a damaged length field makes a synced frame run past the end of the
			// file, and truncating there would drop every record after it.
			valid, verr := validFrameAfter(path, ce.Offset+1)
			if verr != nil {
				return verr
			}
			torn = !valid
		}
		if !torn {
			return err
		}
		if good < SegmentHeader {
			// The header itself never made it: drop the file and start it again.
			l.logger.Warn("delayq: removing segment with torn header", "file", path, "bytes", size)
			if err := os.Remove(path); err != nil {
				return fmt.Errorf("wal: %w", err)
			}
			delete(l.sizes, seg)
			if err := SyncDir(l.dir); err != nil {
				return err
			}
			l.startSegmentLocked(seg)
			// Everything before the new segment is in the files.
			l.written, l.durable = MakePos(seg, 0), MakePos(seg, 0)
			return nil
		}
		l.logger.Warn("delayq: truncating torn tail", "file", path, "offset", good, "dropped_bytes", size-good, "reason", ce.Reason)
		if err := os.Truncate(path, good); err != nil {
			return fmt.Errorf("wal: truncating torn tail: %w", err)
		}
		l.sizes[seg] = good
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return fmt.Errorf("wal: %w", err)
	}
	if err := fdatasync(f); err != nil {
		f.Close()
		return fmt.Errorf("wal: %w", err)
	}
	l.cur, l.curSeg = f, seg
	l.end = MakePos(seg, uint32(good))
	l.written, l.durable = l.end, l.end
	return nil
}

// startSegmentLocked makes seg the segment that appends go to, queuing its header.
func (l *Log) startSegmentLocked(seg uint32) {
	l.pending = append(l.pending, chunk{seg: seg, data: segmentHeader(seg)})
	l.sizes[seg] = SegmentHeader
	l.end = MakePos(seg, SegmentHeader)
}

// Dir returns the log's directory.
func (l *Log) Dir() string { return l.dir }

// NextPos returns the position a record of size bytes appended now would get. Callers that
// serialise their appends (as delayq does under its own lock) can use it to put the position in
// the record itself.
func (l *Log) NextPos(size int) Pos {
	l.mu.Lock()
	defer l.mu.Unlock()
	if p := l.end; int64(p.Offset())+int64(size) > l.segSize && p.Offset() > SegmentHeader {
		return MakePos(p.Segment()+1, SegmentHeader)
	}
	return l.end
}

// Append queues r for writing and returns its position and the position after it. The record is
// readable once WaitWritten(end) returns and durable once WaitDurable(end) does. Records are written
// in the order they are appended.
func (l *Log) Append(r *Record) (pos, end Pos, err error) {
	size := r.Size()
	if size > HeaderSize+MaxRecord {
		return 0, 0, fmt.Errorf("wal: record of %d bytes over the limit", size)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for l.pendingBytes > maxPending && l.err == nil && !l.closing {
		l.progress.Wait()
	}
	if l.err != nil {
		return 0, 0, l.err
	}
	if l.closing {
		return 0, 0, ErrClosed
	}
	if p := l.end; int64(p.Offset())+int64(size) > l.segSize && p.Offset() > SegmentHeader {
		l.startSegmentLocked(p.Segment() + 1)
	}
	pos = l.end
	var c *chunk
	if n := len(l.pending); n > 0 && l.pending[n-1].seg == pos.Segment() {
		c = &l.pending[n-1]
	} else {
		l.pending = append(l.pending, chunk{seg: pos.Segment(), data: l.takeBuf()})
		c = &l.pending[len(l.pending)-1]
	}
	if c.data, err = r.Append(c.data); err != nil {
		return 0, 0, err
	}
	l.end = pos + Pos(size)
	l.sizes[pos.Segment()] += int64(size)
	l.pendingBytes += size
	l.work.Signal()
	return pos, l.end, nil
}

func (l *Log) takeBuf() []byte {
	if n := len(l.free); n > 0 {
		b := l.free[n-1][:0]
		l.free = l.free[:n-1]
		return b
	}
	return make([]byte, 0, 64<<10)
}

// End returns the position after the last appended record.
func (l *Log) End() Pos {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.end
}

// WaitWritten blocks until every record before end is in the files, so ReadAt can see it.
func (l *Log) WaitWritten(end Pos) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	for l.written < end && l.err == nil {
		l.progress.Wait()
	}
	if l.written >= end {
		return nil
	}
	return l.err
}

// WaitDurable blocks until every record before end is synced (or written, with NoSync).
func (l *Log) WaitDurable(end Pos) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	for l.durable < end && l.err == nil {
		l.progress.Wait()
	}
	if l.durable >= end {
		return nil
	}
	return l.err
}

// Err returns the error that made the log unusable, or nil.
func (l *Log) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// flush is the flusher goroutine: it takes everything appended so far, writes it with one write
// per segment, syncs once, and publishes the new written and durable positions.
func (l *Log) flush() {
	defer close(l.done)
	for {
		l.mu.Lock()
		for len(l.pending) == 0 && !l.closing {
			l.work.Wait()
		}
		if len(l.pending) == 0 {
			l.mu.Unlock()
			return
		}
		batch, target := l.pending, l.end
		l.pending = nil
		l.mu.Unlock()

		err := l.writeBatch(batch)
		if err == nil {
			l.mu.Lock()
			l.written = target
			for _, c := range batch {
				l.pendingBytes -= len(c.data)
			}
			l.progress.Broadcast()
			l.mu.Unlock()
			if !l.noSync {
				err = l.sync(l.cur)
			}
		}
		l.mu.Lock()
		if err != nil {
			l.err = fmt.Errorf("wal: %w", err)
			l.closing = true
			l.pending = nil
		} else {
			l.durable = target
		}
		for _, c := range batch {
			if cap(c.data) <= 1<<20 && len(l.free) < 8 {
				l.free = append(l.free, c.data[:0])
			}
		}
		l.progress.Broadcast()
		l.mu.Unlock()
	}
}

func (l *Log) writeBatch(batch []chunk) error {
	for _, c := range batch {
		if c.seg != l.curSeg || l.cur == nil {
			if err := l.switchTo(c.seg); err != nil {
				return err
			}
		}
		if _, err := l.cur.Write(c.data); err != nil {
			return err
		}
	}
	return nil
}

// switchTo syncs and closes the current segment and creates segment seg.
func (l *Log) switchTo(seg uint32) error {
	if l.cur != nil {
		if err := l.sync(l.cur); err != nil {
			return err
		}
		if err := l.cur.Close(); err != nil {
			return err
		}
		l.cur = nil
	}
	f, err := os.OpenFile(segmentPath(l.dir, seg), os.O_WRONLY|os.O_CREATE|os.O_EXCL|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	l.cur, l.curSeg = f, seg
	return SyncDir(l.dir)
}

// Close writes and syncs everything appended, stops the flusher and closes the files. Later
// appends return ErrClosed. It returns the log's sticky error, if any.
func (l *Log) Close() error {
	l.mu.Lock()
	l.closing = true
	l.work.Broadcast()
	l.progress.Broadcast()
	l.mu.Unlock()
	<-l.done
	var err error
	if l.cur != nil {
		if !l.noSync {
			err = l.sync(l.cur)
		}
		if cerr := l.cur.Close(); err == nil {
			err = cerr
		}
		l.cur = nil
	}
	l.rmu.Lock()
	for s, f := range l.files {
		f.Close()
		delete(l.files, s)
	}
	l.rmu.Unlock()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		return l.err
	}
	if err != nil {
		return fmt.Errorf("wal: %w", err)
	}
	return nil
}

// Segments returns the numbers and sizes of the segment files, oldest first.
func (l *Log) Segments() (segs []uint32, sizes []int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for s := range l.sizes {
		segs = append(segs, s)
	}
	slices.Sort(segs)
	for _, s := range segs {
		sizes = append(sizes, l.sizes[s])
	}
	return segs, sizes
}

// Remove deletes segment seg, which must be older than the segment being appended to. The
// directory is not synced: a removal lost in a crash only leaves a file to remove again.
func (l *Log) Remove(seg uint32) error {
	l.mu.Lock()
	if seg >= l.end.Segment() || seg >= l.written.Segment() {
		l.mu.Unlock()
		return fmt.Errorf("wal: segment %d is in use", seg)
	}
	delete(l.sizes, seg)
	l.mu.Unlock()
	l.rmu.Lock()
	if f := l.files[seg]; f != nil {
		f.Close()
		delete(l.files, seg)
	}
	l.rmu.Unlock()
	if err := os.Remove(segmentPath(l.dir, seg)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("wal: %w", err)
	}
	return nil
}

// Scan calls fn for every record from position from to the end of the log as it was when Scan
// began, in order. from must be the start of a record or the header of a segment; segments
// missing before from's segment are not looked at. Damage gives a *CorruptError.
func (l *Log) Scan(from Pos, fn func(pos Pos, r Record) error) error {
	segs, _ := l.Segments()
	end := l.WrittenEnd()
	for _, s := range segs {
		if s < from.Segment() {
			continue
		}
		if MakePos(s, SegmentHeader) >= end {
			break
		}
		start := int64(SegmentHeader)
		if s == from.Segment() {
			start = int64(from.Offset())
		}
		stop, err := scanSegment(segmentPath(l.dir, s), s, start, func(off int64, r Record) error {
			p := MakePos(s, uint32(off))
			if p >= end {
				return io.EOF
			}
			return fn(p, r)
		})
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if s == end.Segment() && stop < int64(end.Offset()) {
			return &CorruptError{File: segmentPath(l.dir, s), Offset: stop, Reason: "segment shorter than the log's end"}
		}
	}
	return nil
}

// DurableEnd returns the position before which every record is synced.
func (l *Log) DurableEnd() Pos {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.durable
}

// WrittenEnd returns the position before which every record is in the files.
func (l *Log) WrittenEnd() Pos {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.written
}

// file returns an open read handle for segment seg.
func (l *Log) file(seg uint32) (*os.File, error) {
	l.rmu.Lock()
	defer l.rmu.Unlock()
	if f := l.files[seg]; f != nil {
		return f, nil
	}
	f, err := os.Open(segmentPath(l.dir, seg))
	if errors.Is(err, os.ErrNotExist) {
		return nil, &missingError{segmentPath(l.dir, seg)}
	}
	if err != nil {
		return nil, fmt.Errorf("wal: %w", err)
	}
	l.files[seg] = f
	return f, nil
}

// ReadAt reads the record at pos, which must be written (see WaitWritten).
func (l *Log) ReadAt(pos Pos) (Record, error) {
	var r Reader
	r.l = l
	return r.ReadAt(pos)
}

// A Reader reads records by position through a cache of one window of one segment, so following
// a slot list backwards through records written close together costs few reads. A Reader is not
// safe for concurrent use; give each goroutine its own.
type Reader struct {
	l     *Log
	seg   uint32
	start int64
	buf   []byte
}

// NewReader returns a Reader of l.
func (l *Log) NewReader() *Reader { return &Reader{l: l} }

// ReadWindow is the size of the window a Reader reads around a record it does not hold: lists are
// followed backwards through records written close together, so one read serves many of them.
const ReadWindow = 256 << 10

// ReadAt reads the record at pos, which must be written.
func (r *Reader) ReadAt(pos Pos) (Record, error) {
	seg, off := pos.Segment(), int64(pos.Offset())
	if off < SegmentHeader {
		return Record{}, &CorruptError{File: segmentPath(r.l.dir, seg), Offset: off, Reason: "position inside the segment header"}
	}
	hdr, err := r.window(seg, off, HeaderSize)
	if err != nil {
		return Record{}, err
	}
	size, err := frameLen(hdr)
	if err != nil {
		return Record{}, corruptAt(segmentPath(r.l.dir, seg), off, err)
	}
	frame, err := r.window(seg, off, size)
	if err != nil {
		return Record{}, err
	}
	rec, err := Decode(frame)
	if err != nil {
		return Record{}, corruptAt(segmentPath(r.l.dir, seg), off, err)
	}
	return rec, nil
}

// window returns n bytes at off of segment seg, reading a window that ends a little after them
// (lists are followed backwards) when the cache does not hold them. The window starts at off at
// the latest: n bytes larger than the window are read whole.
func (r *Reader) window(seg uint32, off int64, n int) ([]byte, error) {
	if seg == r.seg && off >= r.start && off+int64(n) <= r.start+int64(len(r.buf)) {
		return r.buf[off-r.start : off-r.start+int64(n)], nil
	}
	f, err := r.l.file(seg)
	if err != nil {
		return nil, err
	}
	start := min(off, max(off+int64(n)+4096-ReadWindow, SegmentHeader))
	size := max(int(off-start)+n, ReadWindow)
	if cap(r.buf) < size {
		r.buf = make([]byte, size)
	}
	buf := r.buf[:size]
	m, err := f.ReadAt(buf, start)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("wal: reading %s: %w", f.Name(), err)
	}
	r.seg, r.start, r.buf = seg, start, buf[:m]
	if off+int64(n) > start+int64(m) {
		return nil, &CorruptError{File: f.Name(), Offset: off, Reason: fmt.Sprintf("record of %d bytes past the end of the file", n), truncated: true}
	}
	return r.buf[off-start : off-start+int64(n)], nil
}
