package wal

import (
	"fmt"
	"time"
)

// maxPending bounds the bytes appended and not yet written, as far as WaitRoom holds producers
// back.
const maxPending = 16 << 20

// A chunk is bytes to append to one segment, from offset off.
type chunk struct {
	seg  uint32
	off  uint32
	data []byte
}

// startSegmentLocked makes seg the segment that appends go to, queuing its header.
func (l *Log) startSegmentLocked(seg uint32) {
	l.pending = append(l.pending, chunk{seg: seg, data: segmentHeader(seg)})
	l.sizes[seg] = SegmentHeader
	l.end = MakePos(seg, SegmentHeader)
}

// Reserve returns the position the next frame appended gets, having started a new segment first
// if the next size bytes would not fit in the current one. A caller that appends a group of
// frames (or needs a frame's position to encode it) and serialises its appends, as delayq does
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

// Append queues the frame of body, of content type typ (1 to MaxType), for writing and returns
// its position and the position after it; more says that more frames of its atomic group follow
// (see frame.go). The frame is readable (ReadAt) at once, in the files once WaitWritten(end)
// returns, and durable once WaitDurable(end) does. Frames are written in the order they are
// appended. Append copies body, and never waits for the writer: call WaitRoom first to be held
// back when it lags. Append wakes the flusher goroutine, which writes and syncs the frame even
// if nobody waits for it.
func (l *Log) Append(typ byte, more bool, body []byte) (pos, end Pos, err error) {
	return l.append(typ, more, body, true)
}

// AppendAwaited is Append for a caller that calls WaitDurable(end) next, once it has appended
// the frames it waits for: it does not wake the flusher, since WaitDurable writes and syncs the
// frames itself when no commit is in progress (see WaitDurable). Until someone waits for them,
// or an Append wakes the flusher, or Close, the frames stay in memory (readable with ReadAt, not
// in the files). With NoSync it is Append: nobody waits then.
func (l *Log) AppendAwaited(typ byte, more bool, body []byte) (pos, end Pos, err error) {
	return l.append(typ, more, body, l.noSync)
}

func (l *Log) append(typ byte, more bool, body []byte, wake bool) (pos, end Pos, err error) {
	size := FrameSize(len(body))
	if typ == 0 || typ > MaxType || len(body) > MaxBody {
		return 0, 0, fmt.Errorf("delayq: frame of type %d and %d bytes out of range", typ, len(body))
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
	c.data, _ = AppendFrame(c.data, typ, more, body) // checked above
	l.end = pos + Pos(size)
	l.inGroup = more
	l.sizes[pos.Segment()] += int64(size)
	l.pendingBytes += size
	l.over.Store(l.pendingBytes > maxPending)
	if wake {
		l.kickLocked()
	}
	return pos, l.end, nil
}

// kickLocked asks the flusher to write and sync what is pending, once no commit is in progress.
func (l *Log) kickLocked() {
	l.kick = true
	if !l.committing {
		l.work.Signal()
	}
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
	if l.pendingBytes > maxPending {
		l.kickLocked() // what is pending is written even if its appenders do not wait for it
	}
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

// End returns the position after the last appended frame.
func (l *Log) End() Pos {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.end
}

// WaitWritten blocks until every frame before end is in the files.
func (l *Log) WaitWritten(end Pos) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.written < end {
		l.kickLocked()
	}
	for l.written < end && l.err == nil {
		l.progress.Wait()
	}
	if l.written >= end {
		return nil
	}
	return l.err
}

// WaitDurable blocks until every frame before end is synced (or written, with NoSync). When no
// commit is in progress it makes them durable itself, with everything appended so far, in the
// caller's goroutine (leader commit): the first waiter to find the log idle writes and syncs for
// all who appended meanwhile, and those who wait for a commit in progress wait for its end, then
// the first of them left behind leads the next. A caller that appended its frames with
// AppendAwaited so takes no hand-off to the flusher and back, which in the Go runtime wakes
// threads; and none of the flusher's either, when one commit at a time is all there is.
func (l *Log) WaitDurable(end Pos) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	for l.durable < end && l.err == nil {
		if !l.committing && !l.closing && len(l.pending) > 0 {
			l.commitLocked()
			continue
		}
		l.synced.Wait()
	}
	if l.durable >= end {
		return nil
	}
	return l.err
}

// DurableEnd returns the position before which every frame is synced.
func (l *Log) DurableEnd() Pos {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.durable
}

// WrittenEnd returns the position before which every frame is in the files.
func (l *Log) WrittenEnd() Pos {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.written
}

// Err returns the error that made the log unusable, or nil.
func (l *Log) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// flush is the flusher goroutine: it commits what is pending whenever an Append, WaitWritten or
// WaitRoom asks it (kick) and no commit is in progress, and at Close, until nothing is left.
func (l *Log) flush() {
	defer close(l.done)
	l.mu.Lock()
	defer l.mu.Unlock()
	for {
		for l.committing || !l.kick && !l.closing {
			l.work.Wait()
		}
		if len(l.pending) == 0 {
			l.kick = false
			if l.closing {
				return
			}
			continue
		}
		l.commitLocked()
	}
}

// commitLocked takes everything appended so far, writes it with one write per segment, syncs
// once, and publishes the new written and durable positions (group commit). It is called with mu
// held, no commit in progress and something pending, by the flusher or a waiter leading the
// commit (WaitDurable), and returns with mu held; it releases mu meanwhile. Commits are one at a
// time (committing), so the files it writes (cur, curSeg) are touched by one goroutine at a time.
func (l *Log) commitLocked() {
	batch, target := l.pending, l.end
	l.pending, l.inflight = nil, batch
	l.committing, l.kick = true, false
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
	l.committing = false
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
	if len(l.pending) > 0 {
		// Appended during the commit: the flusher takes them at once, rather than the first of
		// their waiters to be woken and scheduled (and with puts from many goroutines, which
		// append while a commit is in progress, commits then follow one another without a gap).
		l.kick = true
	}
	l.progress.Broadcast()
	l.synced.Broadcast()
	if l.kick || l.closing {
		l.work.Signal() // appends meanwhile, or Close waiting for this commit
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
	f, err := l.fs.Create(segmentPath(l.dir, seg))
	if err != nil {
		return err
	}
	l.cur, l.curSeg = f, seg
	return l.fs.SyncDir(l.dir)
}

// SyncBuckets is the number of buckets of SyncStats.Buckets.
const SyncBuckets = 17

// SyncBound returns the upper bound of SyncStats.Buckets[i]: 50µs doubled i times, so the
// buckets reach from 50µs to about 3.3s.
func SyncBound(i int) time.Duration { return 50 * time.Microsecond << i }

// SyncStats counts the fdatasync calls that make appended frames durable since Open: one per
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
func (l *Log) sync(f File) error {
	start := time.Now()
	err := f.Datasync()
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
