package delayq

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tockwheel/tock/queue"
)

// topicOf returns Topics' entry of name (zero if it is not listed).
func topicOf(t *testing.T, q *Queue, name string) queue.TopicInfo {
	t.Helper()
	ts, err := q.Topics(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, ti := range ts {
		if ti.Topic == name {
			return ti
		}
	}
	return queue.TopicInfo{}
}

// allPages pages through name's messages in state, limit at a time.
func allPages(t *testing.T, q *Queue, name string, state queue.State, limit int) []queue.MessageInfo {
	t.Helper()
	var all []queue.MessageInfo
	cursor := ""
	for {
		page, next, err := q.Messages(context.Background(), name, state, cursor, limit)
		if err != nil {
			t.Fatalf("Messages(%q, %s): %v", name, state, err)
		}
		all = append(all, page...)
		if next == "" {
			return all
		}
		cursor = next
	}
}

// TestPagingBeyondTheHorizon pages through scheduled messages due over several horizons, with
// chosen and generated IDs, some cancelled and some of another topic in the same slots: they come
// in due order, each once, whatever the page size, and the counts Topics reports match.
func TestPagingBeyondTheHorizon(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		q := open(t, t.TempDir(), WithSlot(100*time.Millisecond), WithHorizon(time.Second), WithNoSync())
		start := time.Now().Add(300 * time.Millisecond)
		var want []string
		due := map[string]time.Time{}
		for i := range 90 {
			at := start.Add(time.Duration(i*97%90) * 53 * time.Millisecond) // over about five horizons
			m := Message{Topic: "t", DeliverAt: at}
			if i%4 == 0 {
				m.ID = fmt.Sprintf("chosen-%d", i)
			}
			id, err := q.Put(ctx, m)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := q.Put(ctx, Message{Topic: "other", DeliverAt: at}); err != nil {
				t.Fatal(err)
			}
			if i%7 == 3 {
				if ok, err := q.Cancel(ctx, id); !ok || err != nil {
					t.Fatalf("Cancel: %v, %v", ok, err)
				}
				continue
			}
			want = append(want, id)
			due[id] = at
		}
		slices.SortFunc(want, func(a, b string) int { return due[a].Compare(due[b]) })
		check(t, q)
		if ti := topicOf(t, q, "t"); ti.Scheduled != int64(len(want)) {
			t.Fatalf("topic t: %+v; want %d scheduled", ti, len(want))
		}
		for _, limit := range []int{1, 4, 1000} {
			got := allPages(t, q, "t", queue.Scheduled, limit)
			if len(got) != len(want) {
				t.Fatalf("paging %d at a time: %d messages; want %d", limit, len(got), len(want))
			}
			for i, m := range got {
				if !m.DeliverAt.Equal(due[m.ID]) || i > 0 && m.DeliverAt.Before(got[i-1].DeliverAt) || m.State != queue.Scheduled {
					t.Fatalf("paging %d at a time: message %d is %q due %v (want due %v), after one due %v",
						limit, i, m.ID, m.DeliverAt, due[m.ID], got[max(i-1, 0)].DeliverAt)
				}
			}
		}
	})
}

// TestPagingWhileSlotsLoad pages through scheduled messages while time passes between pages, so
// that the loader moves the slots ahead of the cursor into memory: each message still waiting comes
// once, in due order, whether it was on disk or in memory when its page was read.
func TestPagingWhileSlotsLoad(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		q := open(t, t.TempDir(), WithSlot(100*time.Millisecond), WithHorizon(2*time.Second), WithNoSync())
		start := time.Now().Add(time.Second)
		for i := range 200 {
			if _, err := q.Put(ctx, Message{Topic: "t", DeliverAt: start.Add(time.Duration(i) * 20 * time.Millisecond)}); err != nil {
				t.Fatal(err)
			}
		}
		var got []queue.MessageInfo
		cursor := ""
		for {
			page, next, err := q.Messages(ctx, "t", queue.Scheduled, cursor, 10)
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, page...)
			if next == "" {
				break
			}
			cursor = next
			time.Sleep(50 * time.Millisecond) // slots load; early messages fall due
		}
		seen := map[string]bool{}
		for i, m := range got {
			if seen[m.ID] || i > 0 && m.DeliverAt.Before(got[i-1].DeliverAt) {
				t.Fatalf("message %d, %q due %v: twice, or out of order", i, m.ID, m.DeliverAt)
			}
			seen[m.ID] = true
		}
		if len(got) < 100 {
			t.Fatalf("paged through %d messages of 200, the early ones falling due meanwhile; want the later ones all", len(got))
		}
		check(t, q)
	})
}

// TestPauseIsDurable pauses a topic and checks that the pause holds across a clean reopen (from the
// checkpoint) and a crash (from the log), that Receive waits meanwhile, and that Resume wakes it.
func TestPauseIsDurable(t *testing.T) {
	base := t.TempDir()
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		dir := base + "/q"
		q := open(t, dir)
		if err := q.Pause(ctx, "t"); err != nil {
			t.Fatal(err)
		}
		if _, err := q.Put(ctx, Message{Topic: "t"}); err != nil {
			t.Fatal(err)
		}
		if err := q.Close(); err != nil {
			t.Fatal(err)
		}
		q = open(t, dir) // from the checkpoint Close wrote
		if ti := topicOf(t, q, "t"); !ti.Paused || ti.Due != 1 {
			t.Fatalf("after a reopen: %+v; want paused with one due", ti)
		}
		if err := q.Resume(ctx, "t"); err != nil {
			t.Fatal(err)
		}
		if err := q.Pause(ctx, "t"); err != nil {
			t.Fatal(err)
		}
		crashed := base + "/crashed"
		crashCopy(t, nil, q, dir, crashed) // the pause is in the log after the checkpoint
		q = open(t, crashed)
		rctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		if ds, err := q.Receive(rctx, "t", 1, time.Minute); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Receive on a paused topic after a crash: %v, %v; want it to wait", ds, err)
		}
		got := make(chan []Delivery)
		go func() {
			ds, _ := q.Receive(ctx, "t", 1, time.Minute)
			got <- ds
		}()
		synctest.Wait()
		if err := q.Resume(ctx, "t"); err != nil {
			t.Fatal(err)
		}
		if ds := <-got; len(ds) != 1 {
			t.Fatalf("Resume woke the waiting Receive with %d messages", len(ds))
		}
		if ti := topicOf(t, q, "t"); ti.Paused || ti.Leased != 1 {
			t.Fatalf("after Resume: %+v", ti)
		}
		check(t, q)
	})
}

// TestPurgeIsDurable purges a topic's scheduled messages, in memory and in several lists of the
// disk wheel (with chosen IDs), and its due and dead ones, and checks that none of them comes back
// after a crash (the Purge records replayed) or a reopen (from the checkpoint), that the chosen IDs
// are free, and that the other topic sharing the lists keeps its messages.
func TestPurgeIsDurable(t *testing.T) {
	base := t.TempDir()
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		dir := base + "/q"
		opts := []Option{WithSlot(100 * time.Millisecond), WithHorizon(time.Second), WithMaxAttempts(1)}
		q := open(t, dir, opts...)
		for i := range 30 {
			at := time.Now().Add(time.Duration(50+i*100) * time.Millisecond) // in memory, in the wheel, beyond it
			if _, err := q.Put(ctx, Message{ID: fmt.Sprintf("s%d", i), Topic: "t", DeliverAt: at}); err != nil {
				t.Fatal(err)
			}
			if _, err := q.Put(ctx, Message{Topic: "u", DeliverAt: at}); err != nil {
				t.Fatal(err)
			}
		}
		q.Put(ctx, Message{Topic: "t"})
		dead, _ := q.Put(ctx, Message{Topic: "t"})
		time.Sleep(time.Millisecond)
		d := receiveOne(t, q, "t", time.Second, time.Minute)
		if err := q.Nack(ctx, d.Receipt, 0); err != nil { // to its dead-letter topic
			t.Fatal(err)
		}
		q.Put(ctx, Message{Topic: "t"})
		time.Sleep(time.Millisecond)
		ti := topicOf(t, q, "t")
		if ti.Scheduled != 30 || ti.Due != 2 || ti.Dead != 1 {
			t.Fatalf("before purging: %+v", ti)
		}
		for _, tc := range []struct {
			state queue.State
			n     int
		}{{queue.Scheduled, 30}, {queue.Due, 2}, {queue.Dead, 1}} {
			if n, err := q.Purge(ctx, "t", tc.state); n != tc.n || err != nil {
				t.Fatalf("Purge(%s) = %d, %v; want %d", tc.state, n, err, tc.n)
			}
		}
		if err := q.Ack(ctx, d.Receipt); err != nil {
			t.Fatalf("Ack of a receipt of a purged message: %v; want nil, the message being done", err)
		}
		if st := q.Snapshot(); st.Purged != 33 || st.Cancelled != 0 {
			t.Fatalf("Snapshot counts %d purged, %d cancelled; want 33 and 0", st.Purged, st.Cancelled)
		}
		check(t, q)
		crashed := base + "/crashed"
		crashCopy(t, nil, q, dir, crashed)
		for _, reopen := range []string{"crash", "reopen"} {
			q = open(t, crashed, opts...)
			check(t, q)
			if ti := topicOf(t, q, "t"); ti.Topic != "" {
				t.Fatalf("after a %s: topic t listed %+v; want it gone", reopen, ti)
			}
			if ti := topicOf(t, q, "u"); ti.Scheduled+ti.Due != 30 {
				t.Fatalf("after a %s: topic u %+v; want its 30 messages", reopen, ti)
			}
			if _, err := q.Message(ctx, dead); !errors.Is(err, ErrNotFound) {
				t.Fatalf("Message of a purged dead letter: %v", err)
			}
			if err := q.Close(); err != nil {
				t.Fatal(err)
			}
		}
		q = open(t, crashed, opts...)
		if _, err := q.Put(ctx, Message{ID: "s7", Topic: "t", Payload: []byte("again")}); err != nil {
			t.Fatalf("Put with the chosen ID of a purged message: %v", err)
		}
		time.Sleep(5 * time.Second)
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		ds, err := q.Receive(rctx, "t", 100, time.Minute)
		if err != nil || len(ds) != 1 || string(ds[0].Payload) != "again" {
			t.Fatalf("after the purge, topic t delivered %d messages (%v); want only the one put again", len(ds), err)
		}
		check(t, q)
	})
}

// TestRequeueIsDurable kills a message twice over (once leased from its dead-letter topic), requeues
// both, and checks that they come back on their topic as first attempts, that the dead-letter
// consumer's receipt is stale, and that the requeue holds after a crash.
func TestRequeueIsDurable(t *testing.T) {
	base := t.TempDir()
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		dir := base + "/q"
		q := open(t, dir, WithMaxAttempts(2), WithBackoff(time.Second, time.Second))
		a, _ := q.Put(ctx, Message{Topic: "t", Payload: []byte("a")})
		b, _ := q.Put(ctx, Message{ID: "b", Topic: "t", Payload: []byte("b")})
		time.Sleep(time.Millisecond)
		for range 2 {
			ds, err := q.Receive(ctx, "t", 2, time.Minute)
			if err != nil || len(ds) != 2 {
				t.Fatalf("Receive: %v, %v", ds, err)
			}
			for _, d := range ds {
				if err := q.Nack(ctx, d.Receipt, 0); err != nil {
					t.Fatal(err)
				}
			}
		}
		if ti := topicOf(t, q, "t"); ti.Dead != 2 {
			t.Fatalf("after two failed deliveries each: %+v; want 2 dead", ti)
		}
		held := receiveOne(t, q, "t.dead", time.Second, time.Minute)
		if ti := topicOf(t, q, "t"); ti.Dead != 1 || topicOf(t, q, "t.dead").Leased != 1 {
			t.Fatalf("a dead letter leased from the dead-letter topic still counts as dead: %+v", ti)
		}
		if n, err := q.Requeue(ctx, "t"); n != 2 || err != nil {
			t.Fatalf("Requeue = %d, %v; want 2", n, err)
		}
		if err := q.Ack(ctx, held.Receipt); !errors.Is(err, ErrUnknownReceipt) {
			t.Fatalf("Ack of the dead-letter consumer's receipt after the requeue: %v; want ErrUnknownReceipt", err)
		}
		crashed := base + "/crashed"
		crashCopy(t, nil, q, dir, crashed)
		q = open(t, crashed, WithMaxAttempts(2))
		check(t, q)
		for _, id := range []string{a, b} {
			m, err := q.Message(ctx, id)
			if err != nil || m.State != queue.Due || m.Topic != "t" || m.Attempts != 0 || m.LastFailure != "" {
				t.Fatalf("requeued message after a crash: %+v, %v; want due on t, attempt 0, no failure", m, err)
			}
		}
		ds, err := q.Receive(ctx, "t", 2, time.Minute)
		if err != nil || len(ds) != 2 || ds[0].Attempt != 1 || ds[1].Attempt != 1 {
			t.Fatalf("requeued messages delivered as %+v, %v; want both as attempt 1", ds, err)
		}
		if ti := topicOf(t, q, "t.dead"); ti.Topic != "" {
			t.Fatalf("dead-letter topic still listed: %+v", ti)
		}
	})
}

// TestLastFailure checks what Message and Messages say of failed deliveries: a nack and a lease
// that ran out, each with its time, and a dead letter's last failure after a restart.
func TestLastFailure(t *testing.T) {
	dir := t.TempDir()
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		q := open(t, dir, WithMaxAttempts(2), WithBackoff(time.Second, time.Second))
		nacked, _ := q.Put(ctx, Message{Topic: "n"})
		expired, _ := q.Put(ctx, Message{Topic: "e"})
		time.Sleep(time.Millisecond)
		d := receiveOne(t, q, "n", time.Second, time.Minute)
		nackedAt := time.Now()
		if err := q.Nack(ctx, d.Receipt, time.Hour); err != nil {
			t.Fatal(err)
		}
		receiveOne(t, q, "e", time.Second, time.Second)
		expiredAt := time.Now().Add(time.Second)
		time.Sleep(2100 * time.Millisecond) // the lease runs out, and the backoff after it
		for _, tc := range []struct {
			id, why string
			at      time.Time
			state   queue.State
		}{{nacked, "nacked", nackedAt, queue.Scheduled}, {expired, "lease expired", expiredAt, queue.Due}} {
			m, err := q.Message(ctx, tc.id)
			if err != nil || m.LastFailure != tc.why || m.FailedAt.Sub(tc.at).Abs() > 2*time.Millisecond || m.State != tc.state || m.Attempts != 1 {
				t.Fatalf("Message(%s) = %+v, %v; want %s at %v, %s after 1 attempt", tc.id, m, err, tc.why, tc.at, tc.state)
			}
		}
		d = receiveOne(t, q, "e", time.Second, time.Minute)
		diedAt := time.Now()
		if err := q.Nack(ctx, d.Receipt, 0); err != nil {
			t.Fatal(err)
		}
		if err := q.Close(); err != nil {
			t.Fatal(err)
		}
		q = open(t, dir, WithMaxAttempts(2))
		page := allPages(t, q, "e", queue.Dead, 10)
		if len(page) != 1 || page[0].ID != expired || page[0].LastFailure != "nacked" || !page[0].FailedAt.Equal(diedAt) ||
			page[0].Attempts != 2 || page[0].Topic != "e" {
			t.Fatalf("dead letters after a restart: %+v; want %s, nacked at %v after 2 attempts", page, expired, diedAt)
		}
	})
}

// TestDeliverNowFromTheDiskWheel makes messages waiting in the disk wheel due at once, with chosen
// and generated IDs: each comes at once, keeps its ID, is not delivered again when its slot comes,
// and the change survives a crash.
func TestDeliverNowFromTheDiskWheel(t *testing.T) {
	base := t.TempDir()
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		dir := base + "/q"
		q := open(t, dir, WithSlot(100*time.Millisecond), WithHorizon(10*time.Second))
		gen, _ := q.Put(ctx, Message{Topic: "t", Payload: []byte("g"), DeliverAt: time.Now().Add(5 * time.Second)})
		q.Put(ctx, Message{ID: "chosen", Topic: "t", Payload: []byte("c"), DeliverAt: time.Now().Add(time.Minute)})
		q.Put(ctx, Message{Topic: "t", DeliverAt: time.Now().Add(5 * time.Second)})
		for _, id := range []string{gen, "chosen"} {
			if ok, err := q.DeliverNow(ctx, id); !ok || err != nil {
				t.Fatalf("DeliverNow(%s) = %v, %v", id, ok, err)
			}
		}
		check(t, q)
		crashed := base + "/crashed"
		crashCopy(t, nil, q, dir, crashed)
		q = open(t, crashed)
		// DeliverNow may have put the two messages, due now, into the disk wheel's list for this
		// slot (when the loader had not loaded it yet); after the crash they are there again, and
		// they are counted scheduled until the loader, which runs at once, moves them into memory.
		// Wait until it has: every goroutine of the bubble waits on a timer or a channel.
		synctest.Wait()
		check(t, q)
		if ti := topicOf(t, q, "t"); ti.Due != 2 || ti.Scheduled != 1 {
			t.Fatalf("after DeliverNow and a crash: %+v; want 2 due, 1 scheduled", ti)
		}
		ds, err := q.Receive(ctx, "t", 10, time.Hour)
		if err != nil || len(ds) != 2 {
			t.Fatalf("Receive: %v, %v", ds, err)
		}
		for _, d := range ds {
			if d.ID != gen && d.ID != "chosen" || d.Attempt != 1 {
				t.Fatalf("delivered %q attempt %d", d.ID, d.Attempt)
			}
		}
		if ok, err := q.DeliverNow(ctx, gen); ok || err != nil {
			t.Fatalf("DeliverNow of a leased message: %v, %v; want false", ok, err)
		}
		time.Sleep(2 * time.Minute)
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		ds, _ = q.Receive(rctx, "t", 10, time.Hour)
		if len(ds) != 1 || ds[0].ID == gen || ds[0].ID == "chosen" {
			t.Fatalf("when their slots came: %+v; want only the message left alone", ds)
		}
		check(t, q)
	})
}

// TestAdminRefusesBadArguments checks the arguments the actions refuse.
func TestAdminRefusesBadArguments(t *testing.T) {
	ctx := context.Background()
	q := open(t, t.TempDir(), WithNoSync())
	long := string(make([]byte, 70000))
	for name, err := range map[string]error{
		"Pause of no topic":   q.Pause(ctx, ""),
		"Resume of no topic":  q.Resume(ctx, ""),
		"Pause of a long one": q.Pause(ctx, long),
	} {
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v; want ErrInvalid", name, err)
		}
	}
	if _, err := q.Purge(ctx, "t", queue.Leased); !errors.Is(err, ErrInvalid) {
		t.Errorf("Purge of leased messages: %v; want ErrInvalid", err)
	}
	if _, err := q.Requeue(ctx, ""); !errors.Is(err, ErrInvalid) {
		t.Errorf("Requeue of no topic: %v; want ErrInvalid", err)
	}
	if _, _, err := q.Messages(ctx, "t", queue.Due, q.makeCursor(queue.Scheduled, pageKey{}), 10); !errors.Is(err, ErrInvalid) {
		t.Errorf("Messages of due messages with a cursor of scheduled ones: %v; want ErrInvalid", err)
	}
}

// TestTopicCountersSurviveTheDiskWheel puts one message on each of 10,000 topics, more than memory
// takes at once: the messages pass through the disk wheel's lists, and each topic's Puts must
// still count its message when they are loaded (the loader let go of a topic whose only messages
// a list held, and its counters with it: 4,399 of 10,000 topics counted no put). A nack counts in
// Nacks, on the topic the message was delivered from.
func TestTopicCountersSurviveTheDiskWheel(t *testing.T) {
	q, err := Open(t.TempDir(), WithNoSync())
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	ctx := context.Background()
	const topics = 10_000
	for i := range topics {
		if _, err := q.Put(ctx, Message{Topic: fmt.Sprintf("t%05d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	ts, err := q.Topics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	lost := 0
	for _, ti := range ts {
		if ti.Puts != 1 {
			lost++
		}
	}
	if len(ts) != topics || lost > 0 {
		t.Fatalf("%d topics listed, %d of them not counting their one put", len(ts), lost)
	}
	ds, err := q.Receive(ctx, "t00007", 1, time.Minute)
	if err != nil || len(ds) != 1 {
		t.Fatalf("receive: %v %v", ds, err)
	}
	if err := q.Nack(ctx, ds[0].Receipt, time.Hour); err != nil {
		t.Fatal(err)
	}
	if ti := topicOf(t, q, "t00007"); ti.Puts != 1 || ti.Deliveries != 1 || ti.Nacks != 1 || ti.Acks != 0 {
		t.Errorf("after a nack: %+v; want 1 put, 1 delivery, 1 nack", ti)
	}
}
