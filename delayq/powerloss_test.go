package delayq

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/tockwheel/tock/delayq/internal/wal"
)

// A stallDisk is the operating system's files, whose next fdatasync once armed waits until it is
// released: the moment a power loss meets a commit written and not synced.
type stallDisk struct {
	mu      sync.Mutex
	armed   bool
	reached chan struct{} // closed when the armed sync begins
	release chan struct{} // the armed sync goes on once it is closed
}

func (d *stallDisk) arm() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.armed, d.reached, d.release = true, make(chan struct{}), make(chan struct{})
}

func (d *stallDisk) Create(path string) (wal.File, error) {
	f, err := wal.OSFiles{}.Create(path)
	return &stallFile{f, d}, err
}

func (d *stallDisk) Append(path string) (wal.File, error) {
	f, err := wal.OSFiles{}.Append(path)
	return &stallFile{f, d}, err
}

func (d *stallDisk) SyncDir(dir string) error { return wal.SyncDir(dir) }

type stallFile struct {
	wal.File
	d *stallDisk
}

func (f *stallFile) Datasync() error {
	d := f.d
	d.mu.Lock()
	armed := d.armed
	d.armed = false
	d.mu.Unlock()
	if armed {
		close(d.reached)
		<-d.release
	}
	return f.File.Datasync()
}

// TestPowerLossInACommit stops the log's fdatasync of a commit of puts (a batch; single puts wait
// behind it), as a power loss would meet it, copies the queue's files as they are then (the commit written over
// the zeros ahead of the frames, not synced), and loses each sector of the commit at random,
// leaving what was there before: every put that returned before the commit is there after Open,
// Open reports no damage, and the puts of the lost commit are there only up to the first sector
// lost. Set DELAYQ_SEED to repeat a run.
func TestPowerLossInACommit(t *testing.T) {
	rng := rand.New(rand.NewPCG(testSeed(t), 24))
	base := t.TempDir()
	d := &stallDisk{}
	dir := filepath.Join(base, "q")
	q := open(t, dir, func(c *config) { c.files = d }, WithCheckpointInterval(time.Hour), WithLogger(quiet))
	ctx := context.Background()
	at := time.Now().Add(time.Hour)
	put := func(id string) error {
		_, err := q.Put(ctx, Message{ID: id, Topic: "t", Payload: make([]byte, 100+len(id)*37%300), DeliverAt: at})
		return err
	}
	var acked []string
	for i := range 300 {
		id := fmt.Sprint("acked-", i)
		if err := put(id); err != nil {
			t.Fatal(err)
		}
		acked = append(acked, id)
	}
	// The commit that the power loss meets: a batch of 300 (one commit); single puts from 32
	// producers wait for the next.
	d.arm()
	var wg sync.WaitGroup
	wg.Go(func() {
		var ms []Message
		for i := range 300 {
			ms = append(ms, Message{ID: fmt.Sprint("lost-b-", i), Topic: "t", Payload: make([]byte, 100+i*37%300), DeliverAt: at})
		}
		if _, err := q.PutBatch(ctx, ms); err != nil {
			t.Error(err)
		}
	})
	<-d.reached
	for g := range 32 {
		wg.Go(func() {
			for i := range 10 {
				if err := put(fmt.Sprintf("lost-%d-%d", g, i)); err != nil {
					t.Error(err)
				}
			}
		})
	}
	durable := q.log.DurableEnd()
	written := q.log.WrittenEnd()
	crashed := filepath.Join(base, "crashed")
	copyDir(t, dir, crashed) // nothing else writes: no checkpoint, nothing due
	close(d.release)
	wg.Wait()
	if written <= durable {
		t.Fatalf("the stalled commit wrote nothing: durable %v, written %v", durable, written)
	}
	seg := filepath.Join(crashed, wal.SegmentName(durable.Segment()))
	img, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("commit of %d bytes from %v, segment of %d bytes", written.Offset()-durable.Offset(), durable, len(img))
	for round := range 20 {
		t.Run(fmt.Sprint(round), func(t *testing.T) {
			dir := filepath.Join(base, fmt.Sprint("round", round))
			copyDir(t, crashed, dir)
			p, lost := rng.Float64(), 0
			b := append([]byte(nil), img...)
			for s := int(durable.Offset()) / 512 * 512; s < int(written.Offset()); s += 512 {
				if rng.Float64() < p {
					clear(b[max(s, int(durable.Offset())):min(s+512, len(b))])
					lost++
				}
			}
			if err := os.WriteFile(filepath.Join(dir, wal.SegmentName(durable.Segment())), b, 0o644); err != nil {
				t.Fatal(err)
			}
			q := open(t, dir, WithLogger(quiet))
			if n := q.Snapshot().CorruptRecords; n != 0 {
				t.Fatalf("%d sectors of the commit lost: %d damaged places reported", lost, n)
			}
			for _, id := range acked {
				if _, err := q.Message(ctx, id); err != nil {
					t.Fatalf("%d sectors of the commit lost: acknowledged %s: %v", lost, id, err)
				}
			}
			kept := 0
			for i := range 300 {
				if _, err := q.Message(ctx, fmt.Sprint("lost-b-", i)); err == nil {
					kept++
				}
			}
			for g := range 32 {
				for i := range 10 {
					if _, err := q.Message(ctx, fmt.Sprintf("lost-%d-%d", g, i)); err == nil {
						kept++
					}
				}
			}
			if lost == 0 && kept == 0 {
				t.Fatalf("no sector lost, and none of the commit's puts kept")
			}
			t.Logf("%d sectors of the commit lost, %d of its puts kept", lost, kept)
		})
	}
}
