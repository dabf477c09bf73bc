package delayq

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tockwheel/tock/delayq/internal/wal"
	"github.com/tockwheel/tock/internal/testlong"
	"github.com/tockwheel/tock/queue/queuetest"
)

// testSeed returns the seed of a randomized test, DELAYQ_SEED when it is set, and logs it so that
// a failing run can be repeated.
func testSeed(t *testing.T) uint64 {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("DELAYQ_SEED"); s != "" {
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	t.Logf("seed %d (set DELAYQ_SEED to repeat)", seed)
	return seed
}

// TestRandomOps runs random sequences of puts (due in the past, in the near window, within and
// far beyond the horizon; with generated and chosen IDs), cancels, receives, acks, nacks, lease
// expiries, compaction rounds (besides the background ones), clean reopens and simulated crashes
// (the directory copied as a kill -9 would leave it, or as a power loss would: cut anywhere after
// the last sync, with garbage after the cut, or sectors after it lost), checking each answer against queuetest's model of
// the contract and the state's invariants after every step and, at the end, that every message
// the model holds is delivered, none early: 2 runs of 400 steps, 8 in long mode. Set DELAYQ_SEED
// to repeat a run.
func TestRandomOps(t *testing.T) {
	seed := testSeed(t)
	for run := range testlong.Pick(2, 8) {
		t.Run(fmt.Sprint(run), func(t *testing.T) {
			randomOps(t, rand.New(rand.NewPCG(seed, uint64(run))), t.TempDir())
		})
	}
}

func randomOps(t *testing.T, rng *rand.Rand, base string) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		opts := []Option{WithSlot(100 * time.Millisecond), WithHorizon(3 * time.Second), WithSegmentSize(8 << 10),
			WithCheckpointInterval(700 * time.Millisecond), WithMaxAttempts(0), WithBackoff(10*time.Millisecond, 50*time.Millisecond)}
		dir := filepath.Join(base, "q0")
		q := open(t, dir, opts...)
		relocated := 0
		m := queuetest.NewModel(0, modelSlack)
		nextUser := 0
		for step := range 400 {
			now := queuetest.At(time.Now())
			var err error // the model's verdict on the step
			switch op := rng.IntN(100); {
			case op < 35: // put
				var delay time.Duration
				switch rng.IntN(4) {
				case 0:
					delay = time.Duration(rng.IntN(400)-200) * time.Millisecond
				case 1:
					delay = time.Duration(rng.IntN(3000)) * time.Millisecond
				default:
					delay = time.Duration(rng.IntN(12000)) * time.Millisecond
				}
				msg := Message{Topic: "t", Payload: []byte(strconv.Itoa(step)), DeliverAt: now.Start.Add(delay)}
				if rng.IntN(4) == 0 {
					nextUser++
					msg.ID = fmt.Sprintf("user-%d", nextUser)
				}
				id, perr := q.Put(ctx, msg)
				err = m.Put(msg, id, perr, now)
			case op < 45: // cancel
				ids := m.IDs()
				if len(ids) == 0 {
					continue
				}
				id := ids[rng.IntN(len(ids))]
				ok, cerr := q.Cancel(ctx, id)
				err = m.Cancel(id, ok, cerr, now)
			case op < 60: // receive what is due
				max, visibility := 1+rng.IntN(5), time.Duration(50+rng.IntN(300))*time.Millisecond
				rctx, cancel := context.WithTimeout(ctx, time.Duration(rng.IntN(500))*time.Millisecond)
				ds, rerr := q.Receive(rctx, "t", max, visibility)
				cancel()
				err = m.Receive("t", max, visibility, ds, rerr, queuetest.Span{Start: now.Start, End: time.Now()})
			case op < 75: // ack or nack one leased
				rs := m.Receipts()
				if len(rs) == 0 {
					continue
				}
				r := rs[rng.IntN(len(rs))]
				if rng.IntN(3) > 0 {
					err = m.Ack([]string{r}, q.Ack(ctx, r), now)
				} else {
					delay := time.Duration(rng.IntN(200)) * time.Millisecond
					err = m.Nack(r, delay, false, q.Nack(ctx, r, delay), now)
				}
			case op < 84: // let time pass
				time.Sleep(time.Duration(rng.IntN(1500)) * time.Millisecond)
				synctest.Wait()
			case op < 88: // a compaction round that relocates every list of a closed segment
				n, err := q.compact(newCompactor(), 2)
				if err != nil {
					t.Fatal(err)
				}
				relocated += n
			case op < 94: // clean reopen
				if err := q.Close(); err != nil {
					t.Fatal(err)
				}
				q = open(t, dir, opts...)
				synctest.Wait() // the loader moves what is due now into memory
				m.LeasesLost(queuetest.At(time.Now()))
			default: // crash: reopen a copy of the files as they are now
				crashed := filepath.Join(base, fmt.Sprintf("crash%d", step))
				whole := crashCopy(t, rng, q, dir, crashed)
				dir = crashed
				q = open(t, dir, opts...)
				synctest.Wait()
				if n := q.Snapshot().CorruptRecords; whole && n > 0 {
					t.Fatalf("step %d: a crash that lost only unsynced sectors left %d damaged places", step, n)
				}
				m.LeasesLost(queuetest.At(time.Now()))
			}
			if err != nil {
				t.Fatalf("step %d: %v", step, err)
			}
			if err := q.checkState(); err != nil {
				t.Fatalf("step %d: %v", step, err)
			}
		}
		// Everything the model holds must come, at or after its time.
		deadline, cancel := context.WithTimeout(ctx, time.Hour)
		defer cancel()
		for len(m.Pending()) > 0 {
			called := time.Now()
			ds, err := q.Receive(deadline, "t", 100, time.Hour)
			if err != nil {
				t.Fatalf("%v with %d messages undelivered: %v", err, len(m.Pending()), m.Pending())
			}
			if err := m.Receive("t", 100, time.Hour, ds, nil, queuetest.Span{Start: called, End: time.Now()}); err != nil {
				t.Fatal(err)
			}
			for _, d := range ds {
				if err := m.Ack([]string{d.Receipt}, q.Ack(ctx, d.Receipt), queuetest.At(time.Now())); err != nil {
					t.Fatal(err)
				}
			}
		}
		check(t, q)
		if err := q.Close(); err != nil {
			t.Fatal(err)
		}
		t.Logf("%d lists relocated by the compaction steps", relocated)
	})
}

// copyDir copies the regular files of src into a new directory dst (the lock file included,
// which a new Queue locks afresh).
func copyDir(t testing.TB, src, dst string) {
	t.Helper()
	if err := os.MkdirAll(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if !e.Type().IsRegular() {
			continue
		}
		in, err := os.Open(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out, err := os.Create(filepath.Join(dst, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(out, in); err != nil {
			t.Fatal(err)
		}
		in.Close()
		out.Close()
	}
}

// crashCopy copies the files of q, whose directory is dir, to crashed as a kill -9 now would leave
// them, and as a power loss would when rng (if not nil) says so (see loseUnsynced), then closes q. Reopen
// crashed to recover from the crash. whole reports that the copy lost nothing, or only whole
// sectors: nothing a reopen may report as damage.
func crashCopy(t testing.TB, rng *rand.Rand, q *Queue, dir, crashed string) (whole bool) {
	t.Helper()
	// A kill -9 stops every goroutine at one instant; a copy is one only if nothing writes while
	// it is taken. Holding ckptMu and then mu (the lock order) stops checkpoints, retention and
	// appends: the loader, compaction and callers wait, as the killed process would have.
	durable, err := func() (wal.Pos, error) {
		q.ckptMu.Lock()
		defer q.ckptMu.Unlock()
		q.mu.Lock()
		defer q.mu.Unlock()
		if err := q.log.WaitWritten(q.log.End()); err != nil {
			return 0, err
		}
		copyDir(t, dir, crashed)
		return q.log.DurableEnd(), nil
	}()
	if err != nil {
		t.Fatal(err)
	}
	whole = true
	if rng != nil && rng.IntN(2) == 0 {
		whole = loseUnsynced(t, rng, crashed, durable)
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	return whole
}

// forSegments calls fn with the number and path of every segment file in dir.
func forSegments(t testing.TB, dir string, fn func(seg uint32, path string)) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		var seg uint32
		if _, err := fmt.Sscanf(e.Name(), "%010d.seg", &seg); err == nil {
			fn(seg, filepath.Join(dir, e.Name()))
		}
	}
}

// loseUnsynced does to a copied queue directory what a power loss may do: segments after the one
// holding the sync point are gone, and that one is cut somewhere after the sync point, with
// random bytes (a torn write) or zeros after the cut, or keeps its size and loses sectors (512
// bytes) after the sync point at random, each as it was before the write: the zeros written
// ahead of the frames. sectors reports the latter.
func loseUnsynced(t testing.TB, rng *rand.Rand, dir string, durable wal.Pos) (sectors bool) {
	t.Helper()
	forSegments(t, dir, func(seg uint32, path string) {
		switch {
		case seg > durable.Segment():
			os.Remove(path)
		case seg == durable.Segment():
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if d := int(durable.Offset()); rng.IntN(2) == 0 {
				for s := d / 512 * 512; s < len(data); s += 512 {
					if rng.IntN(2) == 0 {
						clear(data[max(s, d):min(s+512, len(data))])
					}
				}
				if err := os.WriteFile(path, data, 0o644); err != nil {
					t.Fatal(err)
				}
				sectors = true
				return
			}
			cut := int(durable.Offset()) + rng.IntN(len(data)-int(durable.Offset())+1)
			tail := make([]byte, rng.IntN(64))
			if rng.IntN(2) == 0 {
				for i := range tail {
					tail[i] = byte(rng.Uint32())
				}
			}
			if err := os.WriteFile(path, append(data[:cut], tail...), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	})
	return sectors
}
