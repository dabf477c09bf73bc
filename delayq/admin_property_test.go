package delayq

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tockwheel/tock/queue"
)

// TestRandomAdminOps runs random sequences of puts on a few topics (due now, in the near window,
// in the disk wheel and beyond its horizon; generated and chosen IDs), receives from the topics
// and their dead-letter topics, acks, nacks (to death), cancels, pauses and resumes, purges of
// every state, requeues, deliveries now, compaction rounds, clean reopens and crashes (the files as
// a kill -9 leaves them), against a model of where each message is. After every step it checks the
// state's invariants and that Topics counts what the model holds; now and then it pages through a
// topic's messages and checks them against the model; a purge must remove exactly what Messages
// listed of the state an instant before. At the end every message left must be delivered. Set
// DELAYQ_SEED to repeat a run.
func TestRandomAdminOps(t *testing.T) {
	seed := testSeed(t)
	for run := range 3 {
		t.Run(fmt.Sprint(run), func(t *testing.T) {
			randomAdminOps(t, rand.New(rand.NewPCG(seed, uint64(run))), t.TempDir())
		})
	}
}

// Where a message is, in the model.
type mstate int

const (
	mWaiting    mstate = iota // on its topic, scheduled or due
	mLeased                   // leased from its topic
	mDead                     // on its dead-letter topic, not leased
	mDeadLeased               // leased from its dead-letter topic
)

type mmsg struct {
	home     string
	due      time.Time
	st       mstate
	failures int
	receipt  string
}

// amodel is what the queue holds, by ID, and which topics are paused.
type amodel struct {
	msgs   map[string]*mmsg
	paused map[string]bool
}

// settled reports whether m, waiting, is scheduled (due after now) or due with no doubt: a message
// due within a couple of milliseconds of now may be either for an instant.
func settled(m *mmsg, now time.Time) (scheduled, sure bool) {
	d := m.due.Sub(now)
	return d > 0, d.Abs() > 2*time.Millisecond
}

func randomAdminOps(t *testing.T, rng *rand.Rand, base string) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		const maxAttempts = 2
		opts := []Option{WithSlot(100 * time.Millisecond), WithHorizon(2 * time.Second), WithSegmentSize(16 << 10),
			WithCheckpointInterval(700 * time.Millisecond), WithMaxAttempts(maxAttempts), WithLogger(quiet)}
		dir := filepath.Join(base, "q0")
		q := open(t, dir, opts...)
		homes := []string{"a", "b", "c"}
		m := amodel{msgs: map[string]*mmsg{}, paused: map[string]bool{}}
		pick := func(ok func(*mmsg) bool) string {
			var ids []string
			for id, x := range m.msgs {
				if ok(x) {
					ids = append(ids, id)
				}
			}
			if len(ids) == 0 {
				return ""
			}
			slices.Sort(ids) // map order is random: sort, so that a seed repeats a run
			return ids[rng.IntN(len(ids))]
		}
		anyTopic := func() string {
			h := homes[rng.IntN(len(homes))]
			if rng.IntN(3) == 0 {
				return h + queue.DeadLetterSuffix
			}
			return h
		}
		endLeases := func() {
			for _, x := range m.msgs {
				switch x.st {
				case mLeased:
					x.st = mWaiting
				case mDeadLeased:
					x.st = mDead
				}
				x.receipt = ""
			}
		}
		nextUser := 0
		done := map[string]int{} // what the steps did, for the log
		for step := range 400 {
			now := time.Now()
			what := ""
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
				msg := Message{Topic: homes[rng.IntN(len(homes))], Payload: []byte(strconv.Itoa(step)), DeliverAt: now.Add(delay)}
				if rng.IntN(4) == 0 {
					nextUser++
					msg.ID = fmt.Sprintf("user-%d", nextUser)
				}
				id, err := q.Put(ctx, msg)
				if err != nil {
					t.Fatal(err)
				}
				due := msg.DeliverAt
				if due.Before(now) {
					due = now
				}
				m.msgs[id] = &mmsg{home: msg.Topic, due: due}
			case op < 45:
				topic := anyTopic()
				what = "receive from " + topic
				rctx, cancel := context.WithTimeout(ctx, time.Duration(rng.IntN(20))*time.Millisecond)
				ds, err := q.Receive(rctx, topic, 1+rng.IntN(4), time.Hour)
				cancel()
				if err != nil && !errors.Is(err, context.DeadlineExceeded) {
					t.Fatal(err)
				}
				if len(ds) > 0 && m.paused[topic] {
					t.Fatalf("step %d: Receive on paused topic %s delivered %d messages", step, topic, len(ds))
				}
				now = time.Now()
				for _, d := range ds {
					x := m.msgs[d.ID]
					switch {
					case x == nil:
						t.Fatalf("step %d: %s delivered from %s: not waiting", step, d.ID, topic)
					case x.st == mWaiting && topic == x.home && !x.due.After(now):
						x.st = mLeased
					case x.st == mDead && topic == x.home+queue.DeadLetterSuffix:
						x.st = mDeadLeased
					default:
						t.Fatalf("step %d: %s delivered from %s, in state %d on %s due %v (now %v)", step, d.ID, topic, x.st, x.home, x.due, now)
					}
					x.receipt = d.Receipt
				}
				done["delivered"] += len(ds)
			case op < 60:
				id := pick(func(x *mmsg) bool { return x.st == mLeased || x.st == mDeadLeased })
				if id == "" {
					continue
				}
				x := m.msgs[id]
				if x.st == mDeadLeased || rng.IntN(4) == 0 {
					what = "ack " + id
					if err := q.Ack(ctx, x.receipt); err != nil {
						t.Fatalf("step %d: Ack of %s: %v", step, id, err)
					}
					delete(m.msgs, id)
					continue
				}
				what = "nack " + id
				delay := time.Duration(rng.IntN(3)/2) * 100 * time.Millisecond
				if err := q.Nack(ctx, x.receipt, delay); err != nil {
					t.Fatalf("step %d: Nack of %s: %v", step, id, err)
				}
				x.receipt = ""
				if x.failures++; x.failures >= maxAttempts {
					x.st, x.due = mDead, now
					done["killed"]++
				} else {
					x.st, x.due = mWaiting, now.Add(delay)
				}
			case op < 63:
				id := pick(func(*mmsg) bool { return true })
				if id == "" {
					continue
				}
				what = "cancel " + id
				if ok, err := q.Cancel(ctx, id); !ok || err != nil {
					t.Fatalf("step %d: Cancel(%s) of a message in state %d: %v, %v", step, id, m.msgs[id].st, ok, err)
				}
				delete(m.msgs, id)
			case op < 68:
				what = "sleep"
				time.Sleep(time.Duration(rng.IntN(1500)) * time.Millisecond)
				synctest.Wait()
			case op < 72:
				topic := anyTopic()
				paused := rng.IntN(10) < 3
				what = fmt.Sprintf("pause %s %v", topic, paused)
				var err error
				if paused {
					err = q.Pause(ctx, topic)
				} else {
					err = q.Resume(ctx, topic)
				}
				if err != nil {
					t.Fatal(err)
				}
				m.paused[topic] = paused
			case op < 75:
				topic := anyTopic()
				state := []queue.State{queue.Scheduled, queue.Due, queue.Dead}[rng.IntN(3)]
				what = fmt.Sprintf("purge %s %s", topic, state)
				listed := allPages(t, q, topic, state, 1+rng.IntN(50))
				n, err := q.Purge(ctx, topic, state)
				if err != nil || n != len(listed) {
					t.Fatalf("step %d: Purge(%s, %s) = %d, %v; Messages listed %d an instant before", step, topic, state, n, err, len(listed))
				}
				for _, info := range listed {
					delete(m.msgs, info.ID)
				}
				done["purged "+string(state)] += n
			case op < 82:
				home := homes[rng.IntN(len(homes))]
				what = "requeue " + home
				want := 0
				for _, x := range m.msgs {
					if x.home == home && (x.st == mDead || x.st == mDeadLeased) {
						want++
						x.st, x.due, x.failures, x.receipt = mWaiting, now, 0, ""
					}
				}
				if n, err := q.Requeue(ctx, home); n != want || err != nil {
					t.Fatalf("step %d: Requeue(%s) = %d, %v; want %d", step, home, n, err, want)
				}
				done["requeued"] += want
			case op < 87:
				id := pick(func(x *mmsg) bool { return true })
				if id == "" {
					continue
				}
				what = "deliver now " + id
				x := m.msgs[id]
				scheduled, sure := settled(x, now)
				ok, err := q.DeliverNow(ctx, id)
				if err != nil {
					t.Fatal(err)
				}
				want := x.st == mWaiting && scheduled
				if ok != want && (sure || x.st != mWaiting) {
					t.Fatalf("step %d: DeliverNow(%s) = %v for a message in state %d due %v (now %v)", step, id, ok, x.st, x.due, now)
				}
				if ok {
					x.due = now
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
				endLeases()
			default:
				what = "crash"
				crashed := filepath.Join(base, fmt.Sprintf("crash%d", step))
				crashCopy(t, nil, q, dir, crashed)
				dir = crashed
				q = open(t, dir, opts...)
				endLeases()
			}
			if err := q.checkState(); err != nil {
				t.Fatalf("step %d (%s): %v", step, what, err)
			}
			checkTopics(t, q, &m, homes, fmt.Sprintf("step %d (%s)", step, what))
			if rng.IntN(8) == 0 {
				checkPages(t, q, &m, homes[rng.IntN(len(homes))], 1+rng.IntN(20), fmt.Sprintf("step %d (%s)", step, what))
			}
		}
		t.Logf("the steps did: %v", done)
		// Everything left must come.
		for topic := range m.paused {
			if err := q.Resume(ctx, topic); err != nil {
				t.Fatal(err)
			}
		}
		endLeases()
		if err := q.Close(); err != nil {
			t.Fatal(err)
		}
		q = open(t, dir, opts...)
		deadline := time.Now().Add(time.Hour)
		for len(m.msgs) > 0 {
			if time.Now().After(deadline) {
				t.Fatalf("%d messages never delivered", len(m.msgs))
			}
			got := 0
			for _, h := range homes {
				for _, topic := range []string{h, h + queue.DeadLetterSuffix} {
					rctx, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
					ds, _ := q.Receive(rctx, topic, 100, time.Hour)
					cancel()
					for _, d := range ds {
						if m.msgs[d.ID] == nil {
							t.Fatalf("%s delivered in the drain: not waiting", d.ID)
						}
						delete(m.msgs, d.ID)
						if err := q.Ack(ctx, d.Receipt); err != nil {
							t.Fatal(err)
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

// checkTopics checks what Topics reports against the model.
func checkTopics(t *testing.T, q *Queue, m *amodel, homes []string, when string) {
	t.Helper()
	ts, err := q.Topics(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]queue.TopicInfo{}
	for _, ti := range ts {
		got[ti.Topic] = ti
	}
	for _, h := range homes {
		var waiting, leased, dead, deadLeased int64
		for _, x := range m.msgs {
			if x.home != h {
				continue
			}
			switch x.st {
			case mWaiting:
				waiting++
			case mLeased:
				leased++
			case mDead:
				dead++
			case mDeadLeased:
				deadLeased++
			}
		}
		dl := h + queue.DeadLetterSuffix
		th, td := got[h], got[dl]
		if th.Scheduled+th.Due != waiting || th.Leased != leased || th.Dead != dead || th.Paused != m.paused[h] {
			t.Fatalf("%s: topic %s %+v; the model has %d waiting, %d leased, %d dead, paused %v", when, h, th, waiting, leased, dead, m.paused[h])
		}
		if td.Scheduled+td.Due != dead || td.Leased != deadLeased || td.Dead != 0 || td.Paused != m.paused[dl] {
			t.Fatalf("%s: topic %s %+v; the model has %d dead letters waiting, %d leased, paused %v", when, dl, td, dead, deadLeased, m.paused[dl])
		}
		delete(got, h)
		delete(got, dl)
	}
	for name, ti := range got {
		t.Fatalf("%s: Topics lists %q, %+v, which the model does not hold", when, name, ti)
	}
}

// checkPages pages through each state of topic, limit at a time, and checks the messages against
// the model: every message listed is in that state (or about to leave it), in order, and every
// message surely in the state is listed.
func checkPages(t *testing.T, q *Queue, m *amodel, topic string, limit int, when string) {
	t.Helper()
	now := time.Now()
	for _, state := range []queue.State{queue.Scheduled, queue.Due, queue.Leased, queue.Dead} {
		page := allPages(t, q, topic, state, limit)
		listed := map[string]bool{}
		for i, info := range page {
			x := m.msgs[info.ID]
			if x == nil || listed[info.ID] || info.Topic != topic || info.State != state {
				t.Fatalf("%s: Messages(%s, %s) lists %+v: not in the model, twice, or of another topic", when, topic, state, info)
			}
			listed[info.ID] = true
			scheduled, sure := settled(x, now)
			ok := false
			switch state {
			case queue.Scheduled:
				ok = x.st == mWaiting && (scheduled || !sure)
				if i > 0 && info.DeliverAt.Before(page[i-1].DeliverAt) {
					t.Fatalf("%s: scheduled messages out of due order: %v after %v", when, info.DeliverAt, page[i-1].DeliverAt)
				}
			case queue.Due:
				ok = x.st == mWaiting && (!scheduled || !sure)
			case queue.Leased:
				ok = x.st == mLeased
			case queue.Dead:
				ok = x.st == mDead
			}
			if !ok {
				t.Fatalf("%s: Messages(%s, %s) lists %s, in state %d due %v (now %v)", when, topic, state, info.ID, x.st, x.due, now)
			}
		}
		for id, x := range m.msgs {
			if x.home != topic || listed[id] {
				continue
			}
			scheduled, sure := settled(x, now)
			missing := false
			switch state {
			case queue.Scheduled:
				missing = x.st == mWaiting && scheduled && sure
			case queue.Due:
				missing = x.st == mWaiting && !scheduled && sure
			case queue.Leased:
				missing = x.st == mLeased
			case queue.Dead:
				missing = x.st == mDead
			}
			if missing {
				t.Fatalf("%s: Messages(%s, %s) does not list %s, due %v (now %v)", when, topic, state, id, x.due, now)
			}
		}
	}
}
