package delayq

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tockwheel/tock/internal/testlong"
	"github.com/tockwheel/tock/queue"
	"github.com/tockwheel/tock/queue/queuetest"
)

// TestRandomAdminOps runs random sequences of puts on a few topics (due now, in the near window,
// in the disk wheel and beyond its horizon; generated and chosen IDs), receives from the topics
// and their dead-letter topics, acks, nacks (to death), cancels, pauses and resumes, purges of
// every state, requeues, deliveries now, compaction rounds, clean reopens and crashes (the files as
// a kill -9 leaves them), against queuetest's model of the contract. After every step it checks the
// state's invariants and that Topics counts what the model holds; now and then it pages through a
// topic's messages and checks them against the model. At the end every message left must be
// delivered: 2 runs of 400 steps, 6 in long mode. Set DELAYQ_SEED to repeat a run.
func TestRandomAdminOps(t *testing.T) {
	seed := testSeed(t)
	for run := range testlong.Pick(2, 6) {
		t.Run(fmt.Sprint(run), func(t *testing.T) {
			randomAdminOps(t, rand.New(rand.NewPCG(seed, uint64(run))), t.TempDir())
		})
	}
}

// modelSlack is how far the queue's due times and timers may be from the model's: a message
// becomes due when the timer of its millisecond fires, at the end of that millisecond.
const modelSlack = 2 * time.Millisecond

func randomAdminOps(t *testing.T, rng *rand.Rand, base string) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		const maxAttempts = 2
		opts := []Option{WithSlot(100 * time.Millisecond), WithHorizon(2 * time.Second), WithSegmentSize(16 << 10),
			WithCheckpointInterval(700 * time.Millisecond), WithMaxAttempts(maxAttempts), WithLogger(quiet)}
		dir := filepath.Join(base, "q0")
		q := open(t, dir, opts...)
		homes := []string{"a", "b", "c"}
		m := queuetest.NewModel(maxAttempts, modelSlack)
		pick := func(from []string) string {
			if len(from) == 0 {
				return ""
			}
			return from[rng.IntN(len(from))]
		}
		anyTopic := func() string {
			h := homes[rng.IntN(len(homes))]
			if rng.IntN(3) == 0 {
				return h + queue.DeadLetterSuffix
			}
			return h
		}
		nextUser := 0
		done := map[string]int{} // what the steps did, for the log
		for step := range 400 {
			now := queuetest.At(time.Now())
			what := ""
			var err error // the model's verdict on the step
			switch op := rng.IntN(100); {
			case op < 25:
				what = "put"
				var delay time.Duration
				switch rng.IntN(4) {
				case 0:
					delay = time.Duration(rng.IntN(200)-100) * time.Millisecond
				case 1:
					delay = time.Duration(rng.IntN(2000)) * time.Millisecond
				default:
					delay = time.Duration(rng.IntN(8000)) * time.Millisecond
				}
				msg := Message{Topic: homes[rng.IntN(len(homes))], Payload: []byte(strconv.Itoa(step)), DeliverAt: now.Start.Add(delay)}
				if rng.IntN(4) == 0 {
					nextUser++
					msg.ID = fmt.Sprintf("user-%d", nextUser)
				}
				id, perr := q.Put(ctx, msg)
				err = m.Put(msg, id, perr, now)
			case op < 45:
				topic := anyTopic()
				what = "receive from " + topic
				max := 1 + rng.IntN(4)
				rctx, cancel := context.WithTimeout(ctx, time.Duration(rng.IntN(20))*time.Millisecond)
				ds, rerr := q.Receive(rctx, topic, max, time.Hour)
				cancel()
				err = m.Receive(topic, max, time.Hour, ds, rerr, queuetest.Span{Start: now.Start, End: time.Now()})
				done["delivered"] += len(ds)
			case op < 60:
				r := pick(m.Receipts())
				if r == "" {
					continue
				}
				// Dead letters are acked; others acked or nacked (to death, in the end).
				if _, topic := m.Lease(r); rng.IntN(4) == 0 || strings.HasSuffix(topic, queue.DeadLetterSuffix) {
					what = "ack"
					err = m.Ack([]string{r}, q.Ack(ctx, r), now)
				} else {
					what = "nack"
					delay := time.Duration(rng.IntN(3)/2) * 100 * time.Millisecond
					err = m.Nack(r, delay, false, q.Nack(ctx, r, delay), now)
				}
			case op < 63:
				id := pick(m.IDs())
				if id == "" {
					continue
				}
				what = "cancel " + id
				ok, cerr := q.Cancel(ctx, id)
				err = m.Cancel(id, ok, cerr, now)
			case op < 68:
				what = "sleep"
				time.Sleep(time.Duration(rng.IntN(1500)) * time.Millisecond)
				synctest.Wait()
			case op < 72:
				topic := anyTopic()
				paused := rng.IntN(10) < 3
				what = fmt.Sprintf("pause %s %v", topic, paused)
				if paused {
					err = q.Pause(ctx, topic)
				} else {
					err = q.Resume(ctx, topic)
				}
				if err == nil {
					m.Pause(topic, paused)
				}
			case op < 75:
				topic := anyTopic()
				state := []queue.State{queue.Scheduled, queue.Due, queue.Dead}[rng.IntN(3)]
				what = fmt.Sprintf("purge %s %s", topic, state)
				n, perr := q.Purge(ctx, topic, state)
				err = m.Purge(topic, state, n, perr, now)
				done["purged "+string(state)] += n
			case op < 82:
				home := homes[rng.IntN(len(homes))]
				what = "requeue " + home
				n, rerr := q.Requeue(ctx, home)
				err = m.Requeue(home, nil, n, rerr, now)
				done["requeued"] += n
			case op < 87:
				id := pick(m.IDs())
				if id == "" {
					continue
				}
				what = "deliver now " + id
				ok, derr := q.DeliverNow(ctx, id)
				err = m.DeliverNow(id, ok, derr, now)
				if ok {
					done["delivered now"]++
				}
			case op < 90:
				what = "compact"
				if _, err := q.compact(newCompactor(), 2); err != nil {
					t.Fatal(err)
				}
			case op < 95:
				what = "reopen"
				if err := q.Close(); err != nil {
					t.Fatal(err)
				}
				q = open(t, dir, opts...)
				synctest.Wait() // the loader moves what is due now into memory
				m.LeasesLost(queuetest.At(time.Now()))
			default:
				what = "crash"
				crashed := filepath.Join(base, fmt.Sprintf("crash%d", step))
				crashCopy(t, nil, q, dir, crashed)
				dir = crashed
				q = open(t, dir, opts...)
				synctest.Wait()
				m.LeasesLost(queuetest.At(time.Now()))
			}
			if err != nil {
				t.Fatalf("step %d (%s): %v", step, what, err)
			}
			if err := q.checkState(); err != nil {
				t.Fatalf("step %d (%s): %v", step, what, err)
			}
			now = queuetest.At(time.Now())
			ts, err := q.Topics(ctx)
			if err == nil {
				err = m.CheckTopics(ts, now)
			}
			if err != nil {
				t.Fatalf("step %d (%s): %v", step, what, err)
			}
			if rng.IntN(8) == 0 {
				topic, limit := homes[rng.IntN(len(homes))], 1+rng.IntN(20)
				for _, state := range []queue.State{queue.Scheduled, queue.Due, queue.Leased, queue.Dead} {
					if err := m.CheckMessages(topic, state, allPages(t, q, topic, state, limit), now); err != nil {
						t.Fatalf("step %d (%s): %v", step, what, err)
					}
				}
			}
		}
		t.Logf("the steps did: %v", done)
		// Everything left must come.
		for _, h := range homes {
			for _, topic := range []string{h, h + queue.DeadLetterSuffix} {
				if err := q.Resume(ctx, topic); err != nil {
					t.Fatal(err)
				}
				m.Pause(topic, false)
			}
		}
		if err := q.Close(); err != nil {
			t.Fatal(err)
		}
		q = open(t, dir, opts...)
		m.LeasesLost(queuetest.At(time.Now()))
		deadline := time.Now().Add(time.Hour)
		for len(m.Pending()) > 0 {
			if time.Now().After(deadline) {
				t.Fatalf("%d messages never delivered: %v", len(m.Pending()), m.Pending())
			}
			got := 0
			for _, h := range homes {
				for _, topic := range []string{h, h + queue.DeadLetterSuffix} {
					rctx, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
					ds, err := q.Receive(rctx, topic, 100, time.Hour)
					cancel()
					if err := m.Receive(topic, 100, time.Hour, ds, err, queuetest.At(time.Now())); err != nil {
						t.Fatalf("drain: %v", err)
					}
					for _, d := range ds {
						if err := m.Ack([]string{d.Receipt}, q.Ack(ctx, d.Receipt), queuetest.At(time.Now())); err != nil {
							t.Fatalf("drain: %v", err)
						}
					}
					got += len(ds)
				}
			}
			if got == 0 {
				time.Sleep(100 * time.Millisecond)
			}
		}
		check(t, q)
	})
}
