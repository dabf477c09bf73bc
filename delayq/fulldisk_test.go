package delayq

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tockwheel/tock/delayq/internal/wal"
)

// A faultDisk is the segment files of a disk that fills up or fails when a test says so: the
// operating system's files, with room for a number of bytes more (a write past it writes what
// fits and fails with ENOSPC, as write(2) on a full disk does) and syncs that fail with EIO while
// syncs is false. The checkpoint's writes are not its: fullDiskQueue fills a real one.
type faultDisk struct {
	mu        sync.Mutex
	room      int64 // bytes writes may still take; negative: no bound
	syncFails bool
	refused   int // writes refused for want of room
	failed    int // syncs failed
}

func newFaultDisk() *faultDisk { return &faultDisk{room: -1} }

// fill leaves room bytes; heal takes the bound and the sync failures away.
func (d *faultDisk) fill(room int64) { d.mu.Lock(); d.room = room; d.mu.Unlock() }
func (d *faultDisk) failSyncs()      { d.mu.Lock(); d.syncFails = true; d.mu.Unlock() }
func (d *faultDisk) heal()           { d.mu.Lock(); d.room, d.syncFails = -1, false; d.mu.Unlock() }

// faults returns the writes refused and the syncs failed so far.
func (d *faultDisk) faults() (refused, failed int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.refused, d.failed
}

func (d *faultDisk) Create(path string) (wal.File, error) {
	f, err := wal.OSFiles{}.Create(path)
	if err != nil {
		return nil, err
	}
	return &faultFile{f, d, path}, nil
}

func (d *faultDisk) Append(path string) (wal.File, error) {
	f, err := wal.OSFiles{}.Append(path)
	if err != nil {
		return nil, err
	}
	return &faultFile{f, d, path}, nil
}

func (d *faultDisk) SyncDir(dir string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.syncFails {
		d.failed++
		return &fs.PathError{Op: "sync", Path: dir, Err: syscall.EIO}
	}
	return wal.SyncDir(dir)
}

type faultFile struct {
	f    wal.File
	d    *faultDisk
	path string
}

func (f *faultFile) Write(p []byte) (int, error) {
	d := f.d
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.room < 0 || int64(len(p)) <= d.room {
		if d.room >= 0 {
			d.room -= int64(len(p))
		}
		return f.f.Write(p)
	}
	fits := d.room
	d.room = 0
	d.refused++
	n, err := f.f.Write(p[:fits])
	if err == nil {
		err = &fs.PathError{Op: "write", Path: f.path, Err: syscall.ENOSPC}
	}
	return n, err
}

func (f *faultFile) Datasync() error {
	d := f.d
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.syncFails {
		d.failed++
		return &fs.PathError{Op: "fdatasync", Path: f.path, Err: syscall.EIO}
	}
	return f.f.Datasync()
}

func (f *faultFile) Close() error { return f.f.Close() }

func withFaultDisk(d *faultDisk) Option { return func(c *config) { c.files = d } }

// acked is what a test's producers were told: the messages whose Put returned nil, by ID, with
// their due times.
type acked struct {
	mu  sync.Mutex
	due map[string]time.Time
}

func (a *acked) add(ids []string, msgs []Message) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for i, id := range ids {
		a.due[id] = msgs[i].DeliverAt
	}
}

// putUntilFailure runs producers that put single messages and batches, due within spread, until
// a call fails, and returns the errors they stopped with, after fill has been called once n
// messages are acked.
func putUntilFailure(t *testing.T, q *Queue, seed uint64, a *acked, n int, spread time.Duration, fill func()) []error {
	t.Helper()
	const producers = 6
	errs := make([]error, producers)
	var wg sync.WaitGroup
	var once sync.Once
	for p := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(p)))
			for i := 0; ; i++ {
				size := 1
				if i%2 == 1 {
					size = 1 + rng.IntN(8)
				}
				msgs := make([]Message, size)
				for j := range msgs {
					msgs[j] = Message{Topic: "full", Payload: fmt.Appendf(nil, "p%d-%d-%d", p, i, j),
						DeliverAt: time.Now().Add(time.Duration(rng.Int64N(int64(spread))))}
				}
				ids, err := q.PutBatch(context.Background(), msgs)
				if err != nil {
					errs[p] = err
					return
				}
				a.add(ids, msgs)
				a.mu.Lock()
				enough := len(a.due) >= n
				a.mu.Unlock()
				if enough {
					once.Do(fill)
				}
			}
		}()
	}
	wg.Wait()
	return errs
}

// drainAcked receives from topic until every message of want has been delivered, failing the test
// on a message delivered before its due time, and acks what it receives. Other messages may come:
// those of Puts that failed, written before the disk failed (a failed Put promises nothing); it
// returns how many.
func drainAcked(t *testing.T, q *Queue, topic string, want map[string]time.Time) (others int) {
	t.Helper()
	ctx := context.Background()
	left := len(want)
	seen := make(map[string]bool)
	for left > 0 {
		rctx, cancel := context.WithTimeout(ctx, time.Minute)
		ds, err := q.Receive(rctx, topic, 100, time.Hour)
		cancel()
		if err != nil {
			missing := 0
			for id := range want {
				if !seen[id] {
					missing++
				}
			}
			t.Fatalf("Receive with %d acknowledged messages still to come (%d missing): %v", left, missing, err)
		}
		now := time.Now()
		for _, d := range ds {
			if now.Before(d.DeliverAt) {
				t.Errorf("%s delivered %v early", d.ID, d.DeliverAt.Sub(now))
			}
			if _, ok := want[d.ID]; !ok {
				others++
			} else if !seen[d.ID] {
				left--
			}
			seen[d.ID] = true
			if err := q.Ack(ctx, d.Receipt); err != nil {
				t.Fatal(err)
			}
		}
	}
	return others
}

// TestFullDiskIsAnOutageNotALoss fills the log's disk under producers (in the middle of a write,
// at a random byte, so a batch is cut), and makes its syncs fail, round after round on the same
// directory with the space back in between: every call that fails, those in flight when the disk
// filled first, fails with an error matching ErrUnavailable that keeps its cause; waiting Receive
// calls and Ready report it; and once space is back, the queue opened again holds every message
// whose Put returned nil and delivers each, none early. Segments are small, so that some rounds
// fill the disk as a new segment starts.
func TestFullDiskIsAnOutageNotALoss(t *testing.T) {
	dir := t.TempDir()
	d := newFaultDisk()
	a := &acked{due: make(map[string]time.Time)}
	rng := rand.New(rand.NewPCG(18, 5))
	const rounds = 6
	for round := range rounds {
		q := open(t, dir, withFaultDisk(d), WithSegmentSize(8<<10))
		// A Receive waiting when the disk fills.
		waiting := make(chan error, 1)
		go func() {
			// Bounded only so that a Receive the failure does not wake fails the test.
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			_, err := q.Receive(ctx, "nothing", 1, time.Minute)
			waiting <- err
		}()
		syncs := round%3 == 2
		refused0, failed0 := d.faults()
		errs := putUntilFailure(t, q, uint64(round), a, (round+1)*200, 3*time.Second, func() {
			if syncs {
				d.failSyncs()
			} else {
				d.fill(rng.Int64N(4 << 10))
			}
		})
		refused, failed := d.faults()
		if refused == refused0 && failed == failed0 {
			t.Fatalf("round %d: the disk refused no write and failed no sync", round)
		}
		for p, err := range errs {
			if !errors.Is(err, ErrUnavailable) {
				t.Errorf("round %d: producer %d: %v (%T), not ErrUnavailable", round, p, err, err)
			}
			if want := syscall.ENOSPC; syncs {
				if !errors.Is(err, syscall.EIO) {
					t.Errorf("round %d: producer %d: %v: the cause (EIO) is lost", round, p, err)
				}
			} else if !errors.Is(err, want) {
				t.Errorf("round %d: producer %d: %v: the cause (ENOSPC) is lost", round, p, err)
			}
		}
		if err := q.Ready(context.Background()); !errors.Is(err, ErrUnavailable) {
			t.Errorf("round %d: Ready: %v, want ErrUnavailable", round, err)
		}
		if err := <-waiting; !errors.Is(err, ErrUnavailable) {
			t.Errorf("round %d: waiting Receive: %v, want ErrUnavailable", round, err)
		}
		if _, err := q.Put(context.Background(), Message{Topic: "full"}); !errors.Is(err, ErrUnavailable) {
			t.Errorf("round %d: Put after the failure: %v, want ErrUnavailable", round, err)
		}
		if err := q.Close(); !errors.Is(err, ErrUnavailable) {
			t.Errorf("round %d: Close: %v, want ErrUnavailable", round, err)
		}
		d.heal()
	}
	q := open(t, dir, withFaultDisk(d), WithSegmentSize(8<<10))
	t.Logf("%d messages acknowledged over %d outages", len(a.due), rounds)
	drainAcked(t, q, "full", a.due)
}

// TestFailedSyncKeepsOnlyWhatWasSynced makes fdatasync fail under producers: the records written
// whose sync failed were never acknowledged, and after a failed fdatasync the kernel may have
// dropped them from the disk while still showing them from its cache, so the queue opened again
// in the same process must not take them for durable. It must find exactly the messages whose Put
// returned nil: before the log cut back to what was synced at Close, it delivered those of the
// failed batch too, read back from the cache.
func TestFailedSyncKeepsOnlyWhatWasSynced(t *testing.T) {
	dir := t.TempDir()
	d := newFaultDisk()
	a := &acked{due: make(map[string]time.Time)}
	q := open(t, dir, withFaultDisk(d), WithSegmentSize(8<<10))
	errs := putUntilFailure(t, q, 7, a, 300, time.Second, d.failSyncs)
	for p, err := range errs {
		if !errors.Is(err, ErrUnavailable) || !errors.Is(err, syscall.EIO) {
			t.Errorf("producer %d: %v, want ErrUnavailable caused by EIO", p, err)
		}
	}
	if _, failed := d.faults(); failed == 0 {
		t.Fatal("no sync failed")
	}
	q.Close()
	d.heal()
	q = open(t, dir, withFaultDisk(d))
	others := drainAcked(t, q, "full", a.due)
	// Everything put is due by now: anything more is a failed Put's.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if ds, err := q.Receive(ctx, "full", 100, time.Hour); err == nil {
		others += len(ds)
	}
	if others > 0 {
		t.Errorf("%d messages delivered whose Put failed (%d acknowledged)", others, len(a.due))
	}
}
