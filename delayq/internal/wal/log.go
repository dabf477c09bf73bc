package wal

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"sync/atomic"
)

// ErrClosed is returned by Append and the waits once Close has begun.
var ErrClosed = errors.New("delayq: log closed")

// Options configure Open.
type Options struct {
	// SegmentSize is the size past which a new segment is started. Default 64 MiB.
	SegmentSize int64
	// NoSync skips fdatasync: frames are durable against a process crash once written, but not
	// against power loss. Segment files are then not written ahead with zeros (see OSFiles).
	NoSync bool
	// Logger receives notes about repairs (a truncated torn tail). Default slog.Default().
	Logger *slog.Logger
	// Covered is the end of what a checkpoint covers: every frame before it was durable, so
	// damage before it is never taken for a torn write and never cut. 0 when there is no
	// checkpoint.
	Covered Pos
	// Verify, when set, checks the body of every frame read, beside its checksum: a frame it
	// refuses is damage. It is how the content tells the log what a valid frame holds, so that a
	// scan past damage does not resume at bytes that only happen to checksum.
	Verify Verifier
	// ReadOnly makes Open change nothing, for checking a directory: it finds the damage and the
	// torn write the repair would meet (OpenDamage, TornTail) without cutting or creating
	// anything, and the log is not appended to (Append returns ErrClosed).
	ReadOnly bool
	// BeforeWrite, when set by a test, runs in the writing goroutine before each write.
	BeforeWrite func()
	// Files creates, writes and syncs the segment files appended to. Default OSFiles.
	Files Files
}

// A Log is a directory of segment files. Frames are appended in memory under a short lock and
// written, then synced, a batch at a time (a commit): by a caller of WaitDurable when no commit is
// in progress, or else by a flusher goroutine, so every write and fdatasync is shared by all the
// frames appended while the previous one was in progress (group commit).
//
// A Log is safe for concurrent use.
type Log struct {
	dir         string
	segSize     int64
	noSync      bool
	logger      *slog.Logger
	verify      Verifier
	beforeWrite func()
	fs          Files
	readOnly    bool
	openDamage  []*CorruptError
	tornTail    *CorruptError

	mu sync.Mutex
	// work wakes the flusher when kick is set or Close begins, and when a commit ends with
	// either; only the flusher waits on it.
	work *sync.Cond
	// progress is broadcast when written or durable move, or err is set: WaitRoom and
	// WaitWritten wait on it.
	progress *sync.Cond
	// synced is broadcast when durable moves, or err is set: WaitDurable waits on it. It is apart
	// from progress so that the write before each sync, which moves only written, does not wake
	// every producer waiting for its frames to be durable only for it to wait again: in tockd,
	// that woke the put's handler as the flusher began to sync, and in the Go runtime a goroutine
	// ready to run on a P that enters a blocking syscall makes sysmon hand the P to another
	// thread.
	synced   *sync.Cond
	pending  []chunk // appended, not yet taken by a commit
	inflight []chunk // taken by the commit in progress, not yet written; read by ReadAt meanwhile
	// committing says that a commit (commitLocked) is writing and syncing, by the flusher or by a
	// waiter leading it; one at a time.
	committing bool
	// kick says that the flusher is to commit what is pending once no commit is in progress: an
	// Append (not AppendAwaited) or a wait for room or for frames to be written asked it.
	kick bool
	// pendingBytes counts the bytes in pending and inflight. WaitRoom waits while it is over
	// maxPending, so producers faster than the disk (with NoSync) are held back instead of
	// filling memory.
	pendingBytes int
	// over is pendingBytes > maxPending, readable without mu so that WaitRoom costs no lock when
	// there is room.
	over    atomic.Bool
	end     Pos   // position after the last appended frame
	inGroup bool  // the last appended frame has more set: the next one stays in its segment
	written Pos   // everything before it is in the files (readable)
	durable Pos   // everything before it is synced
	err     error // sticky: the first write or sync error; the log is unusable after it
	closing bool
	sizes   map[uint32]int64 // segment number -> bytes, for every segment file that exists
	done    chan struct{}    // closed when the flusher exits, after the last commit

	rmu   sync.Mutex // guards files; never held with mu
	files map[uint32]*os.File

	free [][]byte // data buffers for reuse, guarded by mu

	// the state of the commit in progress, touched by one commit at a time
	cur    File
	curSeg uint32

	smu   sync.Mutex // guards syncs; never held with mu
	syncs SyncStats
}

// Open opens the log in dir, creating dir if needed, and repairs the end of its last segment (see
// repair.go): a torn write is cut, any other damage is left in place and reported by OpenDamage.
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
	if opts.Files == nil {
		opts.Files = OSFiles{segmentSize: opts.SegmentSize, noZeros: opts.NoSync}
	}
	if !opts.ReadOnly {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("delayq: %w", err)
		}
	}
	l := &Log{
		dir:         dir,
		segSize:     opts.SegmentSize,
		noSync:      opts.NoSync,
		logger:      opts.Logger,
		verify:      opts.Verify,
		beforeWrite: opts.BeforeWrite,
		fs:          opts.Files,
		readOnly:    opts.ReadOnly,
		sizes:       make(map[uint32]int64),
		files:       make(map[uint32]*os.File),
		done:        make(chan struct{}),
	}
	l.work = sync.NewCond(&l.mu)
	l.progress = sync.NewCond(&l.mu)
	l.synced = sync.NewCond(&l.mu)
	if err := l.repair(opts.Covered); err != nil {
		return nil, err
	}
	if l.readOnly {
		l.closing = true
		close(l.done)
		return l, nil
	}
	go l.flush()
	return l, nil
}

// OpenDamage returns the corruption Open found in the last segment and left in place.
func (l *Log) OpenDamage() []*CorruptError { return l.openDamage }

// TornTail returns the torn write Open found at the end of the log, and cut (unless ReadOnly), or
// nil.
func (l *Log) TornTail() *CorruptError { return l.tornTail }

// OpenReadOnly returns a Log of dir for reading frames by position (NewReader, ReadAt) only: it
// does not look at the files until asked, changes nothing, and must not be appended to. Close
// closes the files it opened.
func OpenReadOnly(dir string, verify Verifier) *Log {
	l := &Log{dir: dir, verify: verify, files: make(map[uint32]*os.File), written: ^Pos(0), done: make(chan struct{}), sizes: make(map[uint32]int64)}
	l.work = sync.NewCond(&l.mu)
	l.progress = sync.NewCond(&l.mu)
	l.synced = sync.NewCond(&l.mu)
	l.closing = true
	close(l.done)
	return l
}

// Dir returns the log's directory.
func (l *Log) Dir() string { return l.dir }

// Close writes and syncs everything appended, stops the flusher and closes the files. Later
// appends return ErrClosed. It returns the log's sticky error, if any: a log whose write or sync
// failed is first cut back to what was durable (see cutUndurableLocked).
func (l *Log) Close() error {
	l.mu.Lock()
	l.closing = true
	l.work.Broadcast()
	l.progress.Broadcast()
	l.synced.Broadcast()
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
		if !l.noSync {
			l.cutUndurableLocked()
		}
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

// cutUndurableLocked cuts the files of a log whose write or sync failed back to the end of what
// was synced: what comes after was never acknowledged, and after a failed fdatasync the kernel may
// have dropped it from the disk while still showing it from its cache (or kept it only there), so
// that an Open in this process would take for durable, and a checkpoint cover, bytes a power loss
// can take away. Segments begun since are removed. It does its best: what it cannot cut, Open
// cuts as a torn write or reports as damage.
func (l *Log) cutUndurableLocked() {
	d := l.durable
	for seg := range l.sizes {
		path := segmentPath(l.dir, seg)
		var err error
		switch {
		case seg < d.Segment():
			continue
		case seg > d.Segment() || d.Offset() < SegmentHeader:
			err = os.Remove(path)
			if errors.Is(err, os.ErrNotExist) {
				err = nil
			}
		default:
			err = truncateSync(path, int64(d.Offset()))
		}
		if err != nil {
			l.logger.Warn("delayq: cannot cut what was not synced after a failed write", "file", path, "durable", int64(d.Offset()), "err", err)
		}
	}
	if err := SyncDir(l.dir); err != nil {
		l.logger.Warn("delayq: cannot cut what was not synced after a failed write", "dir", l.dir, "err", err)
	}
}

// truncateSync cuts the file at path to size bytes, if longer, and syncs it.
func truncateSync(path string, size int64) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || fi.Size() <= size {
		return err
	}
	if err := f.Truncate(size); err != nil {
		return err
	}
	return fdatasync(f)
}
