package wal

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// maxPending bounds the bytes appended and not yet written, as far as WaitRoom holds producers
// back.
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
	// Covered is the end of what a checkpoint covers: every record before it was durable, so
	// damage before it is never taken for a torn write and never cut. 0 when there is no
	// checkpoint.
	Covered Pos
	// BeforeWrite, when set by a test, runs in the writing goroutine before each write.
	BeforeWrite func()
}

// A Log is a directory of segment files. Records are appended in memory under a short lock and
// written, then synced, by one flusher goroutine, so every write and fdatasync is shared by all the
// records appended while the previous one was in progress (group commit).
//
// A Log is safe for concurrent use.
type Log struct {
	dir         string
	segSize     int64
	noSync      bool
	logger      *slog.Logger
	beforeWrite func()
	openDamage  []*CorruptError

	mu sync.Mutex
	// work wakes the flusher when pending grows or Close begins; only the flusher waits on it.
	work *sync.Cond
	// progress is broadcast when written or durable move, or err is set: waiters wait on it.
	progress *sync.Cond
	pending  []chunk // appended, not yet handed to the flusher
	inflight []chunk // handed to the flusher, not yet written; read by ReadAt meanwhile
	// pendingBytes counts the bytes in pending and inflight. WaitRoom waits while it is over
	// maxPending, so producers faster than the disk (with NoSync) are held back instead of
	// filling memory.
	pendingBytes int
	// over is pendingBytes > maxPending, readable without mu so that WaitRoom costs no lock when
	// there is room.
	over    atomic.Bool
	end     Pos   // position after the last appended record
	inGroup bool  // the last appended record has More set: the next one stays in its segment
	written Pos   // everything before it is in the files (readable)
	durable Pos   // everything before it is synced
	err     error // sticky: the first write or sync error; the log is unusable after it
	closing bool
	sizes   map[uint32]int64 // segment number -> bytes, for every segment file that exists
	done    chan struct{}    // closed when the flusher exits

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

// A chunk is bytes to append to one segment, from offset off.
type chunk struct {
	seg  uint32
	off  uint32
	data []byte
}

// Open opens the log in dir, creating dir if needed, and repairs the end of its last segment:
//
//   - A torn write is cut: bytes after the last valid record that hold no valid record and end
//     before the frame they start does (a frame cut short, zeros, garbage), and a group of records
//     whose last record is missing. Only what lies at or after opts.Covered is ever cut.
//   - Any other damage (a complete frame that fails its checksum, or damage before opts.Covered) is
//     corruption: it is left as it is and reported by OpenDamage, and scans and reads go past it.
//     When the last segment ends before opts.Covered, appends go to a new segment, so that no
//     position the checkpoint names is ever given to another record.
//
// Earlier segments are checked as they are read.
func Open(dir string, opts Options) (*Log, error) {
	if opts.SegmentSize <= 0 {
		opts.SegmentSize = 64 << 20
	}
	if opts.SegmentSize > 1<<31 {
		return nil, fmt.Errorf("delayq: segment size %d over 2 GiB", opts.SegmentSize)
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("delayq: %w", err)
	}
	l := &Log{
		dir:         dir,
		segSize:     opts.SegmentSize,
		noSync:      opts.NoSync,
		logger:      opts.Logger,
		beforeWrite: opts.BeforeWrite,
		sizes:       make(map[uint32]int64),
		files:       make(map[uint32]*os.File),
		done:        make(chan struct{}),
	}
	l.work = sync.NewCond(&l.mu)
	l.progress = sync.NewCond(&l.mu)
	segs, err := ListSegments(dir)
	if err != nil {
		return nil, err
	}
	for _, s := range segs {
		fi, err := os.Stat(segmentPath(dir, s))
		if err != nil {
			return nil, fmt.Errorf("delayq: %w", err)
		}
		l.sizes[s] = fi.Size()
	}
	var last uint32
	if len(segs) > 0 {
		last = segs[len(segs)-1]
	}
	switch {
	case opts.Covered.Segment() > last:
		// The segment the checkpoint ends in is gone: go on after it. (Segments between may have
		// been deleted by retention.)
		l.openDamage = append(l.openDamage, missingSegment(dir, opts.Covered.Segment()))
		l.startFresh(opts.Covered.Segment() + 1)
	case len(segs) == 0:
		l.startSegmentLocked(1)
	default:
		if err := l.openLast(last, opts.Covered); err != nil {
			return nil, err
		}
	}
	go l.flush()
	return l, nil
}

// OpenDamage returns the corruption Open found in the last segment and left in place.
func (l *Log) OpenDamage() []*CorruptError { return l.openDamage }

// startFresh makes seg, a new segment, the one appends go to, with everything before it written.
func (l *Log) startFresh(seg uint32) {
	l.startSegmentLocked(seg)
	l.written, l.durable = MakePos(seg, 0), MakePos(seg, 0)
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
	sc, hdrDamage, err := openScanner(path, seg, SegmentHeader, -1)
	if err != nil {
		return err
	}
	sc.check = true
	size := sc.limit
	if hdrDamage != nil && hdrDamage.torn {
		sc.close()
		if coveredOff > 0 {
			l.openDamage = append(l.openDamage, hdrDamage)
			l.startFresh(seg + 1)
			return nil
		}
		// The header itself never made it: drop the file and start it again.
		l.logger.Warn("delayq: removing segment with torn header", "file", path, "bytes", size)
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
	var damage []*CorruptError
	if hdrDamage != nil {
		damage = append(damage, hdrDamage)
	}
	groupStart := int64(-1) // first record of a group whose last record has not been met
	for {
		off, rec, err := sc.next()
		if errors.Is(err, io.EOF) {
			break
		}
		var ce *CorruptError
		if errors.As(err, &ce) {
			damage = append(damage, ce)
			continue
		}
		if err != nil {
			sc.close()
			return err
		}
		if rec.More && groupStart < 0 {
			groupStart = off
		} else if !rec.More {
			groupStart = -1
		}
	}
	sc.close()
	cut := int64(-1)
	if n := len(damage); n > 0 && damage[n-1].torn && damage[n-1].Offset >= coveredOff {
		cut = damage[n-1].Offset
		damage = damage[:n-1]
	}
	if groupStart >= coveredOff && (cut < 0 || groupStart < cut) && !damageAfter(damage, groupStart) {
		cut = groupStart
	}
	if cut >= 0 {
		l.logger.Warn("delayq: cutting a torn write at the end of the log", "file", path, "offset", cut, "dropped_bytes", size-cut)
		if err := os.Truncate(path, cut); err != nil {
			return fmt.Errorf("delayq: cutting a torn write: %w", err)
		}
		size = cut
		l.sizes[seg] = cut
	}
	l.openDamage = append(l.openDamage, damage...)
	if size < coveredOff {
		// The segment ends before the checkpoint does: appending to it would give positions the
		// checkpoint names to other records.
		l.startFresh(seg + 1)
		return nil
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return fmt.Errorf("delayq: %w", err)
	}
	if err := fdatasync(f); err != nil {
		f.Close()
		return fmt.Errorf("delayq: %w", err)
	}
	l.cur, l.curSeg = f, seg
	l.end = MakePos(seg, uint32(size))
	l.written, l.durable = l.end, l.end
	return nil
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

// startSegmentLocked makes seg the segment that appends go to, queuing its header.
func (l *Log) startSegmentLocked(seg uint32) {
	l.pending = append(l.pending, chunk{seg: seg, data: segmentHeader(seg)})
	l.sizes[seg] = SegmentHeader
	l.end = MakePos(seg, SegmentHeader)
}

// Dir returns the log's directory.
func (l *Log) Dir() string { return l.dir }

// Reserve returns the position the next record appended gets, having started a new segment first
// if the next size bytes would not fit in the current one. A caller that appends a group of
// records (or needs a record's position to encode it) and serialises its appends, as delayq does
// under its own lock, calls Reserve with their total size first; the group then stays in one
// segment.
func (l *Log) Reserve(size int) Pos {
	l.mu.Lock()
	defer l.mu.Unlock()
	if p := l.end; int64(p.Offset())+int64(size) > l.segSize && p.Offset() > SegmentHeader && !l.inGroup {
		l.startSegmentLocked(p.Segment() + 1)
	}
	return l.end
}

// Append queues r for writing and returns its position and the position after it. The record is
// readable (ReadAt) at once, in the files once WaitWritten(end) returns, and durable once
// WaitDurable(end) does. Records are written in the order they are appended. Append never waits
// for the writer: call WaitRoom first to be held back when it lags.
func (l *Log) Append(r *Record) (pos, end Pos, err error) {
	size := r.Size()
	if size > HeaderSize+MaxRecord {
		return 0, 0, fmt.Errorf("delayq: record of %d bytes over the limit", size)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		return 0, 0, l.err
	}
	if l.closing {
		return 0, 0, ErrClosed
	}
	if p := l.end; int64(p.Offset())+int64(size) > l.segSize && p.Offset() > SegmentHeader && !l.inGroup {
		l.startSegmentLocked(p.Segment() + 1)
	}
	pos = l.end
	var c *chunk
	if n := len(l.pending); n > 0 && l.pending[n-1].seg == pos.Segment() {
		c = &l.pending[n-1]
	} else {
		l.pending = append(l.pending, chunk{seg: pos.Segment(), off: pos.Offset(), data: l.takeBuf()})
		c = &l.pending[len(l.pending)-1]
	}
	if c.data, err = r.Append(c.data); err != nil {
		return 0, 0, err
	}
	l.end = pos + Pos(size)
	l.inGroup = r.More
	l.sizes[pos.Segment()] += int64(size)
	l.pendingBytes += size
	l.over.Store(l.pendingBytes > maxPending)
	l.work.Signal()
	return pos, l.end, nil
}

// WaitRoom blocks while more than a bound of bytes (16 MiB) is appended and not yet written, so
// that producers faster than the disk are held back instead of filling memory. When it waited, it
// returns the log's error, or ErrClosed once Close has begun.
func (l *Log) WaitRoom() error {
	if !l.over.Load() {
		return nil // room; Append reports the log's error or its closing
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for l.pendingBytes > maxPending && l.err == nil && !l.closing {
		l.progress.Wait()
	}
	if l.err != nil {
		return l.err
	}
	if l.closing {
		return ErrClosed
	}
	return nil
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

// WaitWritten blocks until every record before end is in the files.
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
		l.pending, l.inflight = nil, batch
		l.mu.Unlock()

		if l.beforeWrite != nil {
			l.beforeWrite()
		}
		err := l.writeBatch(batch)
		if err == nil {
			l.mu.Lock()
			l.written, l.inflight = target, nil
			for _, c := range batch {
				l.pendingBytes -= len(c.data)
			}
			l.over.Store(l.pendingBytes > maxPending)
			l.progress.Broadcast()
			l.mu.Unlock()
			if !l.noSync {
				err = l.sync(l.cur)
			}
		}
		l.mu.Lock()
		if err != nil {
			l.err = fmt.Errorf("delayq: %w", err)
			l.closing = true
			l.pending = nil
		} else {
			l.durable = target
			for _, c := range batch {
				if c.off != 0 && cap(c.data) <= 1<<20 && len(l.free) < 8 {
					l.free = append(l.free, c.data[:0])
				}
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
		return fmt.Errorf("delayq: %w", err)
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
		return fmt.Errorf("delayq: segment %d is in use", seg)
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
		return fmt.Errorf("delayq: %w", err)
	}
	return nil
}

// Scan calls fn for every valid record in [from, to), in order, up to the end of the log as it
// was written when Scan began; to <= 0 means no bound. from must be the start of a record or the
// header of a segment. Segments before from's segment are not looked at; a segment missing from
// there on is damage (matching ErrMissing as well as ErrCorrupt).
//
// Damage does not stop the scan: it is passed to damage, and the scan goes on with the next valid
// record. With damage nil, Scan returns the first damage instead, as a *CorruptError. Scan stops at
// the first error fn or damage returns, and returns it.
func (l *Log) Scan(from, to Pos, fn func(pos Pos, r Record) error, damage func(*CorruptError) error) error {
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
		if err := l.scanSegment(s, start, limit, fn, damage); err != nil {
			return err
		}
	}
	return nil
}

func (l *Log) scanSegment(s uint32, start, limit int64, fn func(Pos, Record) error, damage func(*CorruptError) error) error {
	path := segmentPath(l.dir, s)
	sc, hdr, err := openScanner(path, s, start, limit)
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
		off, rec, err := sc.next()
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
		if err := fn(MakePos(s, uint32(off)), rec); err != nil {
			return err
		}
	}
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
		return nil, fmt.Errorf("delayq: %w", err)
	}
	l.files[seg] = f
	return f, nil
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
				return nil, true, corruptAt(segmentPath(l.dir, pos.Segment()), int64(pos.Offset()), &frameError{msg: "position inside a record"})
			}
			return slices.Clone(b[:n]), true, nil
		}
	}
	return nil, true, &CorruptError{File: segmentPath(l.dir, pos.Segment()), Offset: int64(pos.Offset()), Reason: "position past the end of the log"}
}

// ReadAt reads the record at pos.
func (l *Log) ReadAt(pos Pos) (Record, error) {
	var r Reader
	r.l = l
	return r.ReadAt(pos)
}

// A Reader reads records by position through a cache of one window of one segment, so following
// a slot list backwards through records written close together costs few reads. Records appended
// and not yet written are read from memory: reading never waits for the writer. A Reader is not
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

// ReadAt reads the record at pos, which must have been appended.
func (r *Reader) ReadAt(pos Pos) (Record, error) {
	seg, off := pos.Segment(), int64(pos.Offset())
	path := func() string { return segmentPath(r.l.dir, seg) } // only for errors: it costs a Sprintf
	if off < SegmentHeader {
		return Record{}, &CorruptError{File: path(), Offset: off, Reason: "position inside the segment header"}
	}
	if frame, ok, err := r.l.unwritten(pos); ok {
		if err != nil {
			return Record{}, err
		}
		rec, err := decodeFrame(frame)
		if err != nil {
			return Record{}, corruptAt(path(), off, err)
		}
		return rec, nil
	}
	hdr, err := r.window(seg, off, HeaderSize)
	if err != nil {
		return Record{}, err
	}
	size, err := frameLen(hdr)
	if err != nil {
		return Record{}, corruptAt(path(), off, err)
	}
	frame, err := r.window(seg, off, size)
	if err != nil {
		return Record{}, err
	}
	rec, err := decodeFrame(frame)
	if err != nil {
		return Record{}, corruptAt(path(), off, err)
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
		return nil, fmt.Errorf("delayq: reading %s: %w", f.Name(), err)
	}
	r.seg, r.start, r.buf = seg, start, buf[:m]
	if off+int64(n) > start+int64(m) {
		return nil, &CorruptError{File: f.Name(), Offset: off, Reason: fmt.Sprintf("record of %d bytes past the end of the file", n), torn: true}
	}
	return r.buf[off-start : off-start+int64(n)], nil
}

// OpenReadOnly returns a Log of dir for reading records by position (NewReader, ReadAt) only: it
// does not look at the files until asked, changes nothing, and must not be appended to. Close
// closes the files it opened.
func OpenReadOnly(dir string) *Log {
	l := &Log{dir: dir, files: make(map[uint32]*os.File), written: ^Pos(0), done: make(chan struct{}), sizes: make(map[uint32]int64)}
	l.work = sync.NewCond(&l.mu)
	l.progress = sync.NewCond(&l.mu)
	l.closing = true
	close(l.done)
	return l
}

// ScanFile calls fn for every valid record of the segment file seg in dir, in order, and damage
// for the damage met (see Scan), without opening the log. A torn write at the end of the file is
// damage too; IsTornTail tells it apart.
func ScanFile(dir string, seg uint32, fn func(Pos, Record) error, damage func(*CorruptError) error) error {
	return (&Log{dir: dir}).scanSegment(seg, SegmentHeader, -1, fn, damage)
}

// Describe says what the bytes of a damaged frame seem to hold, read without trusting their
// checksum, or "" when they do not look like a record.
func Describe(frame []byte) string {
	if len(frame) < HeaderSize+1 {
		return ""
	}
	r, err := decodeBody(Kind(frame[8]&^kindMore), frame[9:])
	if err != nil {
		return ""
	}
	switch r.Kind {
	case KindPut:
		return fmt.Sprintf("put of %q on topic %q due %s (%d bytes of payload)", r.ID, r.Topic, time.Unix(0, r.DeliverAt).UTC().Format(time.RFC3339Nano), len(r.Payload))
	case KindCancel:
		return fmt.Sprintf("cancel of %q", r.ID)
	case KindAck:
		return fmt.Sprintf("ack of the message first put at %v", r.Target)
	case KindUpdate:
		return fmt.Sprintf("retry of the message first put at %v", r.Target)
	case KindPause:
		return fmt.Sprintf("pause (%v) of topic %q", r.Paused, r.Topic)
	case KindPurge:
		return fmt.Sprintf("purge of topic %q from the list of slot %d", r.Topic, r.ListSlot)
	default:
		return fmt.Sprintf("%v of slot %d", r.Kind, r.Slot)
	}
}
