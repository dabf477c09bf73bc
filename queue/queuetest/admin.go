package queuetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/tockwheel/tock/queue"
)

// The cases of queue.Admin: inspecting topics and messages, and acting on them. They run when the
// engine is a queue.Admin and are skipped otherwise.

var adminCases = []struct {
	name string
	run  func(ctx context.Context, h *env, a queue.Admin)
}{
	{"AdminTopics", testAdminTopics},
	{"AdminMessagesScheduled", testAdminMessagesScheduled},
	{"AdminMessagesByState", testAdminMessagesByState},
	{"AdminMessagesInvalid", testAdminMessagesInvalid},
	{"AdminMessage", testAdminMessage},
	{"AdminDeliverNow", testAdminDeliverNow},
	{"AdminRequeue", testAdminRequeue},
	{"AdminPurge", testAdminPurge},
	{"AdminPause", testAdminPause},
	{"AdminFailureReasons", testFailureReasons},
	{"AdminHeaders", testAdminHeaders},
}

// kill fails the message of id MaxAttempts times, so that it dies on topic.
func (h *env) kill(ctx context.Context, topic, id string) {
	h.Helper()
	for range MaxAttempts {
		d := h.receiveOne(ctx, topic, time.Minute)
		if d.ID != id {
			h.Fatalf("delivered %q; want %q, which is being failed to death", d.ID, id)
		}
		if err := h.e.Nack(ctx, d.Receipt, 0); err != nil {
			h.Fatalf("Nack: %v", err)
		}
	}
}

// topicInfo returns Topics' entry of topic, and whether it has one.
func topicInfo(ctx context.Context, a queue.Admin, topic string) (queue.TopicInfo, bool, error) {
	ts, err := a.Topics(ctx)
	if err != nil {
		return queue.TopicInfo{}, false, err
	}
	for _, t := range ts {
		if t.Topic == topic {
			return t, true, nil
		}
	}
	return queue.TopicInfo{}, false, nil
}

// allPages pages through topic's messages in state, limit at a time.
func (h *env) allPages(ctx context.Context, a queue.Admin, topic string, state queue.State, limit int) []queue.MessageInfo {
	h.Helper()
	var all []queue.MessageInfo
	cursor := ""
	for pages := 0; ; pages++ {
		page, next, err := a.Messages(ctx, topic, state, cursor, limit)
		if err != nil {
			h.Fatalf("Messages(%q, %s, page %d): %v", topic, state, pages, err)
		}
		if len(page) > limit {
			h.Fatalf("Messages(limit %d) returned %d", limit, len(page))
		}
		all = append(all, page...)
		if next == "" {
			return all
		}
		if pages > 10_000 {
			h.Fatalf("Messages(%q, %s) never ends", topic, state)
		}
		cursor = next
	}
}

// testAdminTopics puts messages in every state on one topic and checks the counts Topics reports,
// and that a paused topic with no messages is listed.
func testAdminTopics(ctx context.Context, h *env, a queue.Admin) {
	for range 3 {
		h.put(ctx, queue.Message{Topic: "a", DeliverAt: time.Now().Add(time.Hour)})
	}
	dead := h.put(ctx, queue.Message{Topic: "a"})
	h.kill(ctx, "a", dead)
	h.put(ctx, queue.Message{Topic: "a"})
	leased := h.receiveOne(ctx, "a", time.Minute)
	firstDue := time.Now()
	for range 2 {
		h.put(ctx, queue.Message{Topic: "a"})
	}
	h.put(ctx, queue.Message{Topic: "b"})
	if err := a.Pause(ctx, "c"); err != nil {
		h.Fatalf("Pause: %v", err)
	}

	h.eventually(ctx, func() error {
		ts, err := a.Topics(ctx)
		if err != nil {
			return err
		}
		byName := map[string]queue.TopicInfo{}
		for i, t := range ts {
			byName[t.Topic] = t
			if i > 0 && ts[i-1].Topic >= t.Topic {
				return fmt.Errorf("Topics not in the order of their names: %q before %q", ts[i-1].Topic, t.Topic)
			}
		}
		ta := byName["a"]
		got := [4]int64{ta.Scheduled, ta.Due, ta.Leased, ta.Dead}
		if got != [4]int64{3, 2, 1, 1} {
			return fmt.Errorf("topic a: scheduled, due, leased, dead = %v; want [3 2 1 1]", got)
		}
		if ta.OldestDue.IsZero() || ta.OldestDue.After(firstDue.Add(time.Second)) {
			return fmt.Errorf("topic a: oldest due %v; want about %v", ta.OldestDue, firstDue)
		}
		if ta.Puts != 7 || ta.Deliveries < 1+MaxAttempts || ta.Paused {
			return fmt.Errorf("topic a: %d puts, %d deliveries, paused %v; want 7, at least %d, false",
				ta.Puts, ta.Deliveries, ta.Paused, 1+MaxAttempts)
		}
		if tb := byName["b"]; tb.Due != 1 {
			return fmt.Errorf("topic b: %+v; want 1 due", tb)
		}
		if tc, ok := byName["c"]; !ok || !tc.Paused {
			return fmt.Errorf("paused topic c with no messages: listed %v, %+v", ok, tc)
		}
		if td := byName["a"+queue.DeadLetterSuffix]; td.Due != 1 {
			return fmt.Errorf("dead-letter topic: %+v; want its dead letter due", td)
		}
		return nil
	})
	h.ack(ctx, leased.Receipt)
	h.eventually(ctx, func() error {
		ta, _, err := topicInfo(ctx, a, "a")
		if err == nil && (ta.Acks != 1 || ta.Leased != 0) {
			err = fmt.Errorf("after an ack, topic a has %d acks and %d leased; want 1 and 0", ta.Acks, ta.Leased)
		}
		return err
	})
}

// testAdminMessagesScheduled pages through scheduled messages put in shuffled order: they come in
// the order of their due times, each once, however small the pages, with their payloads previewed.
func testAdminMessagesScheduled(ctx context.Context, h *env, a queue.Admin) {
	const n = 57
	start := time.Now().Add(time.Hour)
	ids := make([]string, n)
	for _, i := range rand.Perm(n) {
		m := queue.Message{Topic: "t", Payload: payload("message %d", i), DeliverAt: start.Add(time.Duration(i) * 700 * time.Millisecond)}
		if i == 5 {
			m.Payload = bytes.Repeat([]byte("p"), queue.PreviewLen+10)
		}
		ids[i] = h.put(ctx, m)
	}
	h.put(ctx, queue.Message{Topic: "other", DeliverAt: start})
	for _, limit := range []int{1, 7, queue.MaxPage} {
		got := h.allPages(ctx, a, "t", queue.Scheduled, limit)
		if len(got) != n {
			h.Fatalf("paging %d at a time: %d scheduled messages; want %d", limit, len(got), n)
		}
		for i, m := range got {
			want := start.Add(time.Duration(i) * 700 * time.Millisecond)
			switch {
			case m.ID != ids[i]:
				h.Fatalf("paging %d at a time: message %d is %q; want %q, the %dth due", limit, i, m.ID, ids[i], i)
			case m.Topic != "t" || m.State != queue.Scheduled || m.Attempts != 0:
				h.Fatalf("scheduled message %+v", m)
			case m.DeliverAt.Before(want) || m.DeliverAt.After(want.Add(time.Millisecond)):
				h.Fatalf("message %q due at %v; want %v", m.ID, m.DeliverAt, want)
			case i == 5 && (len(m.Payload) != queue.PreviewLen || m.Size != queue.PreviewLen+10):
				h.Fatalf("long payload previewed as %d of %d bytes; want %d of %d", len(m.Payload), m.Size, queue.PreviewLen, queue.PreviewLen+10)
			case i != 5 && (string(m.Payload) != fmt.Sprintf("message %d", i) || m.Size != len(m.Payload)):
				h.Fatalf("message %d: payload %q of size %d", i, m.Payload, m.Size)
			}
		}
	}
}

// testAdminMessagesByState lists a topic's due, leased and dead messages.
func testAdminMessagesByState(ctx context.Context, h *env, a queue.Admin) {
	dead := h.put(ctx, queue.Message{Topic: "t", Payload: payload("dead")})
	h.kill(ctx, "t", dead)
	leasedID := h.put(ctx, queue.Message{Topic: "t", Payload: payload("leased")})
	leased := h.receiveOne(ctx, "t", time.Hour)
	if leased.ID != leasedID {
		h.Fatalf("received %q; want %q", leased.ID, leasedID)
	}
	due := []string{h.put(ctx, queue.Message{Topic: "t", Payload: payload("due 0")})}
	time.Sleep(2 * time.Millisecond) // messages due in the same millisecond have no order
	due = append(due, h.put(ctx, queue.Message{Topic: "t", Payload: payload("due 1")}))

	h.eventually(ctx, func() error {
		page := h.allPages(ctx, a, "t", queue.Due, 10)
		if len(page) != 2 || page[0].ID != due[0] || page[1].ID != due[1] || page[0].State != queue.Due {
			return fmt.Errorf("due messages %+v; want %q and %q", page, due[0], due[1])
		}
		return nil
	})
	page := h.allPages(ctx, a, "t", queue.Leased, 10)
	if len(page) != 1 || page[0].ID != leasedID || page[0].State != queue.Leased || page[0].Attempts != 1 ||
		page[0].LeaseDeadline.Before(time.Now().Add(50*time.Minute)) {
		h.Fatalf("leased messages %+v; want %q, attempt 1, its lease an hour out", page, leasedID)
	}
	page = h.allPages(ctx, a, "t", queue.Dead, 10)
	if len(page) != 1 || page[0].ID != dead || page[0].State != queue.Dead || page[0].Topic != "t" ||
		page[0].Attempts != MaxAttempts || page[0].LastFailure == "" || page[0].FailedAt.IsZero() || string(page[0].Payload) != "dead" {
		h.Fatalf("dead letters %+v; want %q, which died on t after %d attempts, with its last failure", page, dead, MaxAttempts)
	}
	if page := h.allPages(ctx, a, "t"+queue.DeadLetterSuffix, queue.Dead, 10); len(page) != 0 {
		h.Fatalf("the dead-letter topic lists %d dead letters of its own; want them under the topic they died on", len(page))
	}
	h.ack(ctx, leased.Receipt)
}

func testAdminMessagesInvalid(ctx context.Context, h *env, a queue.Admin) {
	h.put(ctx, queue.Message{Topic: "t", DeliverAt: time.Now().Add(time.Hour)})
	for _, tc := range []struct {
		state  queue.State
		cursor string
		limit  int
	}{
		{queue.Scheduled, "", 0},
		{queue.Scheduled, "", queue.MaxPage + 1},
		{"pending", "", 10},
		{"", "", 10},
		{queue.Scheduled, "not a cursor \x00", 10},
	} {
		if _, _, err := a.Messages(ctx, "t", tc.state, tc.cursor, tc.limit); !errors.Is(err, queue.ErrInvalid) {
			h.Errorf("Messages(state %q, cursor %q, limit %d): %v; want ErrInvalid", tc.state, tc.cursor, tc.limit, err)
		}
	}
	if page, next, err := a.Messages(ctx, "no-such-topic", queue.Scheduled, "", 10); len(page) != 0 || next != "" || err != nil {
		h.Fatalf("Messages of a topic with none: %d, %q, %v; want an empty last page", len(page), next, err)
	}
}

func testAdminMessage(ctx context.Context, h *env, a queue.Admin) {
	body := bytes.Repeat([]byte("b"), 3*queue.PreviewLen)
	at := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	id := h.put(ctx, queue.Message{ID: "chosen", Topic: "t", Payload: body, DeliverAt: at})
	m, err := a.Message(ctx, id)
	if err != nil || m.ID != id || m.Topic != "t" || m.State != queue.Scheduled || !m.DeliverAt.Equal(at) ||
		!bytes.Equal(m.Payload, body) || m.Size != len(body) {
		h.Fatalf("Message(%q) = %+v, %v; want it scheduled at %v with its whole payload", id, m, err, at)
	}
	gen := h.put(ctx, queue.Message{Topic: "t"})
	d := h.receiveOne(ctx, "t", time.Minute)
	if m, err := a.Message(ctx, gen); err != nil || m.State != queue.Leased || d.ID != gen {
		h.Fatalf("Message(%q) of a leased message = %+v, %v", gen, m, err)
	}
	h.ack(ctx, d.Receipt)
	for _, missing := range []string{gen, "never-put"} {
		if _, err := a.Message(ctx, missing); !errors.Is(err, queue.ErrNotFound) {
			h.Fatalf("Message(%q) of no waiting message: %v; want ErrNotFound", missing, err)
		}
	}
}

func testAdminDeliverNow(ctx context.Context, h *env, a queue.Admin) {
	id := h.put(ctx, queue.Message{Topic: "t", DeliverAt: time.Now().Add(time.Hour)})
	asked := time.Now()
	if ok, err := a.DeliverNow(ctx, id); !ok || err != nil {
		h.Fatalf("DeliverNow of a scheduled message: %v, %v; want true", ok, err)
	}
	d := h.receiveOne(ctx, "t", time.Minute)
	if d.ID != id || d.DeliverAt.After(time.Now()) || d.DeliverAt.Before(asked.Add(-time.Second)) {
		h.Fatalf("after DeliverNow, delivered %q due %v; want %q due about %v", d.ID, d.DeliverAt, id, asked)
	}
	if ok, err := a.DeliverNow(ctx, id); ok || err != nil {
		h.Fatalf("DeliverNow of a leased message: %v, %v; want false", ok, err)
	}
	if ok, err := a.DeliverNow(ctx, "never-put"); ok || err != nil {
		h.Fatalf("DeliverNow of no message: %v, %v; want false", ok, err)
	}
	h.ack(ctx, d.Receipt)
}

// testAdminRequeue requeues one dead letter by ID, then the rest: each comes back on its topic as
// attempt 1.
func testAdminRequeue(ctx context.Context, h *env, a queue.Admin) {
	ids := []string{h.put(ctx, queue.Message{Topic: "t", Payload: payload("0")})}
	h.kill(ctx, "t", ids[0])
	ids = append(ids, h.put(ctx, queue.Message{ID: "chosen-dead", Topic: "t", Payload: payload("1")}))
	h.kill(ctx, "t", ids[1])

	if n, err := a.Requeue(ctx, "t", ids[1], "no-such-id"); n != 1 || err != nil {
		h.Fatalf("Requeue of one dead letter: %d, %v; want 1", n, err)
	}
	d := h.receiveOne(ctx, "t", time.Minute)
	if d.ID != ids[1] || d.Attempt != 1 || string(d.Payload) != "1" {
		h.Fatalf("requeued, delivered %q attempt %d %q; want %q attempt 1", d.ID, d.Attempt, d.Payload, ids[1])
	}
	h.ack(ctx, d.Receipt)
	if n, err := a.Requeue(ctx, "t"); n != 1 || err != nil {
		h.Fatalf("Requeue of every dead letter: %d, %v; want 1", n, err)
	}
	if d := h.receiveOne(ctx, "t", time.Minute); d.ID != ids[0] || d.Attempt != 1 {
		h.Fatalf("requeued, delivered %q attempt %d; want %q attempt 1", d.ID, d.Attempt, ids[0])
	} else {
		h.ack(ctx, d.Receipt)
	}
	if n, err := a.Requeue(ctx, "t"); n != 0 || err != nil {
		h.Fatalf("Requeue with no dead letters: %d, %v; want 0", n, err)
	}
	h.expectNothing(ctx, "t"+queue.DeadLetterSuffix, 200*time.Millisecond)
}

// testAdminPurge purges a topic's scheduled, due and dead messages, and checks that nothing of
// them is delivered and their chosen IDs are free.
func testAdminPurge(ctx context.Context, h *env, a queue.Admin) {
	for i := range 3 {
		h.put(ctx, queue.Message{ID: fmt.Sprintf("s%d", i), Topic: "t", DeliverAt: time.Now().Add(time.Hour)})
	}
	dead := h.put(ctx, queue.Message{Topic: "t"})
	h.kill(ctx, "t", dead)
	for range 2 {
		h.put(ctx, queue.Message{Topic: "t"})
	}
	h.put(ctx, queue.Message{Topic: "u"})
	h.eventually(ctx, func() error {
		if ta, _, err := topicInfo(ctx, a, "t"); err != nil || ta.Due != 2 {
			return fmt.Errorf("topic t: %+v, %v; want 2 due before purging", ta, err)
		}
		return nil
	})
	for _, tc := range []struct {
		state queue.State
		n     int
	}{{queue.Scheduled, 3}, {queue.Due, 2}, {queue.Dead, 1}, {queue.Scheduled, 0}} {
		if n, err := a.Purge(ctx, "t", tc.state); n != tc.n || err != nil {
			h.Fatalf("Purge(%s): %d, %v; want %d", tc.state, n, err, tc.n)
		}
	}
	if _, err := a.Purge(ctx, "t", queue.Leased); !errors.Is(err, queue.ErrInvalid) {
		h.Fatalf("Purge of leased messages: %v; want ErrInvalid", err)
	}
	h.expectNothing(ctx, "t", 300*time.Millisecond)
	h.expectNothing(ctx, "t"+queue.DeadLetterSuffix, 100*time.Millisecond)
	h.put(ctx, queue.Message{ID: "s0", Topic: "t"}) // free again
	if d := h.receiveOne(ctx, "u", time.Minute); d.Topic != "u" {
		h.Fatalf("the other topic lost its message")
	}
}

// testAdminPause pauses a topic: its due messages wait, puts go on and other topics are served;
// after Resume a waiting Receive gets them.
func testAdminPause(ctx context.Context, h *env, a queue.Admin) {
	if err := a.Pause(ctx, "t"); err != nil {
		h.Fatalf("Pause: %v", err)
	}
	if err := a.Pause(ctx, "t"); err != nil {
		h.Fatalf("second Pause: %v", err)
	}
	id := h.put(ctx, queue.Message{Topic: "t"})
	h.put(ctx, queue.Message{Topic: "u"})
	h.receiveOne(ctx, "u", time.Minute)
	h.expectNothing(ctx, "t", 300*time.Millisecond)
	if ti, ok, err := topicInfo(ctx, a, "t"); err != nil || !ok || !ti.Paused || ti.Due != 1 {
		h.Fatalf("paused topic: %+v, listed %v, %v; want paused with 1 due", ti, ok, err)
	}

	got := h.receiveLater(ctx, "t")
	if err := a.Resume(ctx, "t"); err != nil {
		h.Fatalf("Resume: %v", err)
	}
	r := <-got
	if r.err != nil || len(r.ds) != 1 || r.ds[0].ID != id {
		h.Fatalf("after Resume, a waiting Receive got %d deliveries, %v; want %q", len(r.ds), r.err, id)
	}
	if err := a.Resume(ctx, "t"); err != nil {
		h.Fatalf("second Resume: %v", err)
	}
}
