package delayq

import (
	"context"
	"crypto/cipher"
	crand "crypto/rand"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"

	"github.com/tockwheel/tock"
	"github.com/tockwheel/tock/delayq/internal/wal"
	"github.com/tockwheel/tock/queue"
)

// A Queue is a durable delayed-message queue kept in one directory. A Queue is safe for
// concurrent use by any number of goroutines. It is a [queue.Engine] and a [queue.Reporter].
type Queue struct {
	dir  string
	cfg  config
	log  *wal.Log
	lock *os.File // holds the directory's flock

	// wheel fires the in-memory timers: messages of the near window becoming due, and leases
	// running out.
	wheel *tock.Wheel

	closed chan struct{} // closed when Close begins
	// stopped is closed when a failure stops the queue (see failLocked), so that waiting Receive
	// calls return it.
	stopped chan struct{}
	bg      sync.WaitGroup

	// mu guards the state below. It is held while records are appended to the log, so the order of
	// records in the log is the order of the state changes they describe. Lock order: mu before
	// the log's own lock. Nothing waits for the log's writer while holding mu: Append never waits
	// (waitRoom holds producers back before they take mu), and records not yet written are read
	// from memory.
	mu   sync.Mutex
	disk diskWheel     // messages waiting on disk
	mem  deliveryIndex // messages in memory
	pins pins          // records still needed, per segment
	// sched holds the schedules (see schedule.go).
	sched schedules
	// moving holds, by origin, messages taken out of a list by an Advance or Relocate record whose
	// copies are owed (see apply.go).
	moving map[wal.Pos]*entry
	// leaseRand draws lease numbers: a ChaCha8 generator seeded from crypto/rand at Open.
	leaseRand *rand.ChaCha8
	// secret is the key of the receipts' MACs (see receipt.go), read or made at Open; tags is
	// the block cipher of their tags, under a key derived from it.
	secret         [32]byte
	tags           cipher.Block
	receiptScratch receiptScratch // under mu
	// encoded is the buffer records are encoded into before they are appended (see records.go).
	encoded []byte
	// awaited is set by a call that waits for what it appends to be durable as soon as it has
	// appended (waitDurable after unlocking mu): its records are appended without waking the log's
	// flusher, since the wait commits them itself (see wal.Log.WaitDurable).
	awaited bool
	// opened numbers this Open at random, for the cursors of due messages (see page.go).
	opened  uint32
	err     error   // sticky: a background failure that makes the queue unusable
	ckptPos wal.Pos // replay position of the last checkpoint written
	stats   counters

	// ckptMu serialises checkpoints (the background ones and Close's) and guards ckpt. Lock order:
	// ckptMu before mu.
	ckptMu sync.Mutex
	ckpt   checkpointFile

	// damageMu guards dmg, the damage found so far (see damage.go). Lock order: mu before
	// damageMu.
	damageMu sync.Mutex
	dmg      damage

	// checking: the queue is Check's, which reads what Open reads and writes nothing (see
	// openChecking).
	checking bool

	// afterListRead, when set by a test (under mu), runs after lockList has read a list without mu.
	afterListRead func()
}

var (
	_ queue.Engine    = (*Queue)(nil)
	_ queue.Reporter  = (*Queue)(nil)
	_ queue.Scheduler = (*Queue)(nil)
)

// Open opens the queue in dir, creating the directory if it does not exist, and recovers from
// whatever state a crash left it in: it truncates a torn tail of the log, reads the checkpoint,
// replays the log written since, and makes due every message that came due while the queue was
// closed (late, never lost). Damage it cannot repair gives an error matching ErrCorrupt that names
// the file and offset. Only one Queue may have a directory open at a time; Open returns ErrLocked
// otherwise.
func Open(dir string, opts ...Option) (*Queue, error) {
	cfg := defaultConfig()
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("delayq: %w", err)
	}
	lock, err := lockDir(filepath.Join(dir, "LOCK"))
	if err != nil {
		return nil, err
	}
	q := newQueue(dir, cfg)
	q.lock = lock
	err = q.loadSecret()
	if err == nil {
		err = q.recover()
	}
	if err != nil {
		q.ckpt.close()
		q.stopTimers()
		if q.log != nil {
			q.log.Close()
		}
		unlockDir(lock)
		if diskFailed(err) {
			err = &failure{err}
		}
		return nil, err
	}
	if q.cfg.preload == 0 {
		q.cfg.preload = 2 * q.cfg.slot // the slot the queue was created with
	}
	q.bg.Add(2)
	if !q.cfg.noLoader {
		q.bg.Add(1)
		go q.runLoader()
	}
	go q.every(q.cfg.checkpoint, q.checkpoint)
	go q.runSchedules()
	q.startSchedules()
	if q.cfg.compactLive > 0 {
		q.bg.Add(1)
		c := newCompactor()
		go q.every(q.cfg.checkpoint, func() error { return q.compactRound(c) })
	}
	return q, nil
}

// newQueue returns the queue of dir with cfg, its state not read yet (see Open and openChecking).
func newQueue(dir string, cfg config) *Queue {
	q := &Queue{
		dir:     dir,
		cfg:     cfg,
		closed:  make(chan struct{}),
		stopped: make(chan struct{}),
		wheel:   cfg.wheel,
		pins:    make(pins),
		moving:  make(map[wal.Pos]*entry),
		sched:   newSchedules(),
	}
	if q.wheel == nil {
		q.wheel = tock.New()
	}
	var seed [32]byte
	crand.Read(seed[:])
	q.leaseRand = rand.NewChaCha8(seed)
	q.opened = uint32(q.leaseRand.Uint64())
	q.mem = newDeliveryIndex(q.wheel, q.fire, q.wheelFailed)
	return q
}

// Close stops the queue: it wakes waiting Receive calls with ErrClosed, writes a final
// checkpoint, syncs and closes the log, and releases the directory. Messages leased and not yet
// acked are delivered again after the next Open. A second Close returns ErrClosed.
func (q *Queue) Close() error {
	q.mu.Lock()
	select {
	case <-q.closed:
		q.mu.Unlock()
		return errClosed
	default:
	}
	close(q.closed)
	q.mu.Unlock()
	q.bg.Wait()
	q.stopTimers()
	err := q.checkpoint()
	if errors.Is(err, ErrClosed) {
		err = nil
	}
	q.ckpt.close()
	if cerr := q.log.Close(); err == nil && cerr != nil {
		err = &failure{cerr}
	}
	if uerr := unlockDir(q.lock); err == nil {
		err = uerr
	}
	return err
}

// stopTimers stops the queue's timers: its own wheel, or its timers on a wheel it was given.
func (q *Queue) stopTimers() {
	q.mu.Lock()
	q.stopSchedulesLocked()
	q.mu.Unlock()
	if q.cfg.wheel == nil {
		q.wheel.Stop()
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, b := range q.mem.buckets {
		b.timer.Stop()
	}
}

// usableLocked returns the error that stops new operations: Close or a background failure.
func (q *Queue) usableLocked() error {
	select {
	case <-q.closed:
		return errClosed
	default:
	}
	return q.err
}

// wheelFailed is called under mu when a timer cannot be set: the wheel is stopped. Its own wheel
// is stopped only by Close; a wheel given with WithWheel may be stopped by its owner, which stops
// the queue.
func (q *Queue) wheelFailed(err error) {
	if q.usableLocked() == nil && q.cfg.wheel != nil {
		q.failLocked(fmt.Errorf("delayq: the wheel given with WithWheel: %w", err))
	}
}

// failLocked records a failure that stops the queue (a write or sync of the log or the
// checkpoint failed, or a background task did): every later operation returns it, matching
// ErrUnavailable, and waiting Receive calls return it.
func (q *Queue) failLocked(err error) {
	if q.err == nil {
		q.err = &failure{err}
		close(q.stopped)
		q.cfg.logger.Error("delayq: queue stopped by a failure", "dir", q.dir, "err", err)
	}
}

// fail stops the queue for err, as failLocked does, and returns the queue's failure; an err that
// is the closing of the queue or of its log is returned as ErrClosed instead. It is how the errors
// of the log's writer, met in a wait, stop the queue: the calls in flight, whose records the disk
// did not take, get the failure. mu must not be held.
func (q *Queue) fail(err error) error {
	if errors.Is(err, wal.ErrClosed) || errors.Is(err, ErrClosed) {
		return errClosed
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	q.failLocked(err)
	return q.err
}

// waitRoom begins a call that writes: it returns ctx's error if ctx has ended, and holds the
// caller back while the log's writer lags. It is called before taking mu: no wait for the writer
// may happen under mu.
func (q *Queue) waitRoom(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("delayq: %w", err)
	}
	if err := q.log.WaitRoom(); err != nil {
		return q.fail(err)
	}
	return nil
}

// lockToWrite begins a call that writes (see waitRoom) and takes mu, for a queue still usable.
// On error, mu is not held.
func (q *Queue) lockToWrite(ctx context.Context) error {
	if err := q.waitRoom(ctx); err != nil {
		return err
	}
	q.mu.Lock()
	if err := q.usableLocked(); err != nil {
		q.mu.Unlock()
		return err
	}
	return nil
}

// waitDurable waits for the log to sync through end, or returns at once with WithNoSync.
func (q *Queue) waitDurable(end wal.Pos) error {
	if q.cfg.noSync {
		return nil
	}
	if err := q.log.WaitDurable(end); err != nil {
		return q.fail(err)
	}
	return nil
}
