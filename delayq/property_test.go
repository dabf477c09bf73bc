package delayq

import (
	"context"
	"errors"
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
// the last sync, with garbage after the cut),
// checking the state's invariants after every step and, at the end, that exactly the messages a
// reference model expects are delivered, none early. Set DELAYQ_SEED to repeat a run.
func TestRandomOps(t *testing.T) {
	seed := testSeed(t)
	for run := range 4 {
		t.Run(fmt.Sprint(run), func(t *testing.T) {
			randomOps(t, rand.New(rand.NewPCG(seed, uint64(run))), t.TempDir())
		})
	}
}

// model is what the queue must deliver: pending messages by ID with their due times.
type model struct {
	due map[string]time.Time
	// gone holds IDs acked or cancelled: they must never be delivered again.
	gone map[string]bool
}

func randomOps(t *testing.T, rng *rand.Rand, base string) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		opts := []Option{WithSlot(100 * time.Millisecond), WithHorizon(3 * time.Second), WithSegmentSize(8 << 10),
			WithCheckpointInterval(700 * time.Millisecond), WithMaxAttempts(0), WithBackoff(10*time.Millisecond, 50*time.Millisecond)}
		dir := filepath.Join(base, "q0")
		q := open(t, dir, opts...)
		relocated := 0
		m := model{due: map[string]time.Time{}, gone: map[string]bool{}}
		var leased []Delivery
		nextUser := 0
		deliver := func(ds []Delivery) {
			for _, d := range ds {
				if m.gone[d.ID] {
					t.Fatalf("%s delivered after ack or cancel", d.ID)
				}
				at, ok := m.due[d.ID]
				if !ok {
					t.Fatalf("unknown message %s delivered", d.ID)
				}
				if time.Now().Before(at) {
					t.Fatalf("%s delivered %v early", d.ID, at.Sub(time.Now()))
				}
				leased = append(leased, d)
			}
		}
		for step := range 400 {
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
				msg := Message{Topic: "t", Payload: []byte(strconv.Itoa(step)), DeliverAt: time.Now().Add(delay)}
				if rng.IntN(4) == 0 {
					nextUser++
					msg.ID = fmt.Sprintf("user-%d", nextUser)
				}
				id, err := q.Put(ctx, msg)
				if err != nil {
					t.Fatal(err)
				}
				m.due[id] = msg.DeliverAt
			case op < 45: // cancel
				if len(m.due) == 0 {
					continue
				}
				id := anyKey(rng, m.due)
				ok, err := q.Cancel(ctx, id)
				if err != nil {
					t.Fatal(err)
				}
				if ok {
					delete(m.due, id)
					m.gone[id] = true
					leased = dropID(leased, id)
				} else {
					t.Fatalf("step %d: Cancel(%s) = false for a pending message due %v", step, id, m.due[id])
				}
			case op < 60: // receive what is due
				rctx, cancel := context.WithTimeout(ctx, time.Duration(rng.IntN(500))*time.Millisecond)
				ds, err := q.Receive(rctx, "t", 1+rng.IntN(5), time.Duration(50+rng.IntN(300))*time.Millisecond)
				cancel()
				if err != nil && !errors.Is(err, context.DeadlineExceeded) {
					t.Fatal(err)
				}
				deliver(ds)
			case op < 75: // ack or nack one leased
				if len(leased) == 0 {
					continue
				}
				i := rng.IntN(len(leased))
				d := leased[i]
				leased = append(leased[:i], leased[i+1:]...)
				if rng.IntN(3) > 0 {
					err := q.Ack(ctx, d.Receipt)
					if err == nil {
						delete(m.due, d.ID)
						m.gone[d.ID] = true
					} else if !errors.Is(err, ErrUnknownReceipt) {
						t.Fatal(err)
					}
				} else if err := q.Nack(ctx, d.Receipt, time.Duration(rng.IntN(200))*time.Millisecond); err != nil && !errors.Is(err, ErrUnknownReceipt) {
					t.Fatal(err)
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
				leased = nil
			default: // crash: reopen a copy of the files as they are now
				crashed := filepath.Join(base, fmt.Sprintf("crash%d", step))
				crashCopy(t, rng, q, dir, crashed)
				dir = crashed
				q = open(t, dir, opts...)
				leased = nil
			}
			if err := q.checkState(); err != nil {
				t.Fatalf("step %d: %v", step, err)
			}
		}
		// Everything pending must come, at or after its time.
		deadline, cancel := context.WithTimeout(ctx, time.Hour)
		defer cancel()
		for len(m.due) > 0 {
			ds, err := q.Receive(deadline, "t", 100, time.Hour)
			if err != nil {
				t.Fatalf("%v with %d messages undelivered, e.g. %s", err, len(m.due), anyKey(rng, m.due))
			}
			leased = nil
			deliver(ds)
			for _, d := range ds {
				delete(m.due, d.ID)
			}
		}
		check(t, q)
		if err := q.Close(); err != nil {
			t.Fatal(err)
		}
		t.Logf("%d lists relocated by the compaction steps", relocated)
	})
}

func anyKey[V any](rng *rand.Rand, m map[string]V) string {
	i := rng.IntN(len(m))
	for k := range m {
		if i == 0 {
			return k
		}
		i--
	}
	return ""
}

func dropID(ds []Delivery, id string) []Delivery {
	out := ds[:0]
	for _, d := range ds {
		if d.ID != id {
			out = append(out, d)
		}
	}
	return out
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
// crashed to recover from the crash.
func crashCopy(t testing.TB, rng *rand.Rand, q *Queue, dir, crashed string) {
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
	if rng != nil && rng.IntN(2) == 0 {
		loseUnsynced(t, rng, crashed, durable)
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
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
// random bytes (a torn write) or zeros after the cut.
func loseUnsynced(t testing.TB, rng *rand.Rand, dir string, durable wal.Pos) {
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
}
