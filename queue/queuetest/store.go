package queuetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tockwheel/tock/queue"
)

// The cases about what is stored: cancel, chosen IDs, batches, limits, counts and close.

func testCancel(ctx context.Context, h *env) {
	far := h.put(ctx, queue.Message{Topic: "t", DeliverAt: time.Now().Add(time.Hour)})
	soon := h.put(ctx, queue.Message{Topic: "t", DeliverAt: time.Now().Add(150 * time.Millisecond)})
	due := h.put(ctx, queue.Message{Topic: "t"})
	chosen := h.put(ctx, queue.Message{ID: "chosen-1", Topic: "t", DeliverAt: time.Now().Add(150 * time.Millisecond)})
	for _, id := range []string{far, soon, due, chosen} {
		if ok, err := h.e.Cancel(ctx, id); !ok || err != nil {
			h.Fatalf("Cancel(%q) of a waiting message: %v, %v; want true", id, ok, err)
		}
		if ok, err := h.e.Cancel(ctx, id); ok || err != nil {
			h.Fatalf("second Cancel(%q): %v, %v; want false, nil", id, ok, err)
		}
	}
	for _, id := range []string{"never-put", "", "\x00\xff"} {
		if ok, err := h.e.Cancel(ctx, id); ok || (err != nil && !errors.Is(err, queue.ErrInvalid)) {
			h.Fatalf("Cancel(%q) of no message: %v, %v; want false", id, ok, err)
		}
	}
	h.expectNothing(ctx, "t", 400*time.Millisecond)
	// A cancelled chosen ID is free again.
	again := h.put(ctx, queue.Message{ID: "chosen-1", Topic: "t", Payload: payload("again")})
	if d := h.receiveOne(ctx, "t", time.Minute); d.ID != again || string(d.Payload) != "again" {
		h.Fatalf("after cancelling chosen-1 and putting it again, delivered %q %q", d.ID, d.Payload)
	}
}

// testCancelLeased cancels a leased message: it is not delivered again when its lease runs out,
// and acking its receipt afterwards succeeds, the message being done.
func testCancelLeased(ctx context.Context, h *env) {
	id := h.put(ctx, queue.Message{Topic: "t"})
	d := h.receiveOne(ctx, "t", 150*time.Millisecond)
	if ok, err := h.e.Cancel(ctx, id); !ok || err != nil {
		h.Fatalf("Cancel of a leased message: %v, %v; want true", ok, err)
	}
	h.expectNothing(ctx, "t", 150*time.Millisecond+3*Backoff)
	h.ack(ctx, d.Receipt)
}

// testDuplicateID puts a chosen ID twice: the same message again is a retried Put that stores no
// second copy; a different one is refused with a *DuplicateError carrying the waiting one's due
// time. It does so for a scheduled message, due in an hour so that no Put, however slow, finds it
// due, then for a message due at once, and again once that one is leased.
func testDuplicateID(ctx context.Context, h *env) {
	at := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	m := queue.Message{ID: "order-7", Topic: "t", Payload: payload("first"), DeliverAt: at}
	h.put(ctx, m)
	h.put(ctx, m) // a retried Put
	h.wantDuplicates(ctx, m, at, at)

	due := queue.Message{ID: "order-8", Topic: "t", Payload: payload("due")}
	before := time.Now()
	h.put(ctx, due)
	after := time.Now()
	// The waiting message is due at the time of its Put, which an engine may round to its precision.
	h.wantDuplicates(ctx, due, before.Add(-time.Millisecond), after.Add(time.Millisecond))
	d := h.receiveOne(ctx, "t", time.Minute)
	if d.ID != due.ID || !bytes.Equal(d.Payload, due.Payload) {
		h.Fatalf("delivered %q %q; want %q %q", d.ID, d.Payload, due.ID, due.Payload)
	}
	// Leased, the ID is still taken.
	_, err := h.e.Put(ctx, queue.Message{ID: due.ID, Topic: "t", Payload: payload("third")})
	h.wantErr("Put with the ID of a leased message", err, queue.ErrDuplicate)
	h.ack(ctx, d.Receipt)
	h.expectNothing(ctx, "t", 300*time.Millisecond)
}

// testRetriedPutDueAtOnce checks that a Put repeating a waiting message due at once, with another
// time that has come or with none, is a retried Put, not a duplicate: every such time means due
// at the Put, and a Put retried over HTTP (its first reply lost) carries the server's clock of the
// retry, not the first request's. It does so for messages put with a past time and with none,
// singly and in a batch, while they wait and once they are leased, and for a message put a little
// ahead whose time has come since. A due time to come is still a duplicate. One copy of each is
// delivered.
func testRetriedPutDueAtOnce(ctx context.Context, h *env) {
	past := queue.Message{ID: "past", Topic: "t", Payload: payload("past"), DeliverAt: time.Now().Add(-time.Hour)}
	none := queue.Message{ID: "none", Topic: "t", Payload: payload("none")}
	soon := queue.Message{ID: "soon", Topic: "t", Payload: payload("soon"), DeliverAt: time.Now().Add(200 * time.Millisecond)}
	batch := []queue.Message{
		{ID: "batch-past", Topic: "t", Payload: payload("batch past"), DeliverAt: time.Now().Add(-time.Minute)},
		{ID: "batch-none", Topic: "t", Payload: payload("batch none")},
	}
	for _, m := range []queue.Message{past, none, soon} {
		h.put(ctx, m)
	}
	putBatch := func(what string, ms []queue.Message) {
		h.Helper()
		ids, err := h.e.PutBatch(ctx, ms)
		if err != nil || len(ids) != len(ms) || ids[0] != ms[0].ID || ids[1] != ms[1].ID {
			h.Fatalf("%s: PutBatch = %q, %v; want [%q %q], nil", what, ids, err, ms[0].ID, ms[1].ID)
		}
	}
	putBatch("batch due at once", batch)
	// retry puts m again under each of the other times that have come: a retried Put each time.
	retry := func(state string, m queue.Message) {
		h.Helper()
		for _, at := range []time.Time{{}, time.Now().Add(-2 * time.Hour), time.Now().Add(-time.Millisecond)} {
			r := m
			r.DeliverAt = at
			if _, err := h.e.Put(ctx, r); err != nil {
				h.Fatalf("Put of %s %q (put due %v) again due %v: %v; want a retried Put", state, m.ID, m.DeliverAt, at, err)
			}
		}
	}
	retry("waiting", past)
	retry("waiting", none)
	putBatch("batch retried with other past times", []queue.Message{
		{ID: "batch-past", Topic: "t", Payload: payload("batch past")},
		{ID: "batch-none", Topic: "t", Payload: payload("batch none"), DeliverAt: time.Now().Add(-time.Second)},
	})
	ds := h.receiveAll(ctx, "t", 5, time.Hour) // soon among them: its time has come
	got := map[string]bool{}
	for _, d := range ds {
		got[d.ID] = true
	}
	for _, m := range append([]queue.Message{past, none, soon}, batch...) {
		if !got[m.ID] {
			h.Fatalf("delivered %d messages without %q", len(ds), m.ID)
		}
	}
	retry("leased", past)
	retry("leased", none)
	retry("leased", soon)
	retry("leased", batch[0])
	_, err := h.e.Put(ctx, queue.Message{ID: past.ID, Topic: "t", Payload: past.Payload, DeliverAt: time.Now().Add(time.Hour)})
	h.wantErr("Put of a message due at once again due in an hour", err, queue.ErrDuplicate)
	for _, d := range ds {
		h.ack(ctx, d.Receipt)
	}
	h.expectNothing(ctx, "t", 300*time.Millisecond)
}

// wantDuplicates puts messages with m's ID that differ from m in topic, payload or due time, and
// checks that each is refused with a *DuplicateError naming the ID and the waiting message's due
// time, which must lie within [from, to].
func (h *env) wantDuplicates(ctx context.Context, m queue.Message, from, to time.Time) {
	h.Helper()
	later := time.Now().Add(2 * time.Hour)
	if m.DeliverAt.After(time.Now()) {
		later = m.DeliverAt.Add(time.Second)
	}
	for _, other := range []queue.Message{
		{ID: m.ID, Topic: m.Topic, Payload: payload("other than %q", m.Payload), DeliverAt: m.DeliverAt},
		{ID: m.ID, Topic: m.Topic + "-other", Payload: m.Payload, DeliverAt: m.DeliverAt},
		{ID: m.ID, Topic: m.Topic, Payload: m.Payload, DeliverAt: later},
	} {
		_, err := h.e.Put(ctx, other)
		var de *queue.DuplicateError
		if !errors.Is(err, queue.ErrDuplicate) || !errors.As(err, &de) {
			h.Fatalf("Put of a different message with waiting ID %q: %v; want a *DuplicateError", m.ID, err)
		}
		if de.ID != m.ID || de.DeliverAt.Before(from) || de.DeliverAt.After(to) {
			h.Fatalf("DuplicateError{%q, %v}; want ID %q, due within [%v, %v]", de.ID, de.DeliverAt, m.ID, from, to)
		}
	}
}

// testIDFreeAfterAck checks that a chosen ID can be put again once its message is acked.
func testIDFreeAfterAck(ctx context.Context, h *env) {
	h.put(ctx, queue.Message{ID: "job", Topic: "t", Payload: payload("1")})
	h.ack(ctx, h.receiveOne(ctx, "t", time.Minute).Receipt)
	h.put(ctx, queue.Message{ID: "job", Topic: "t", Payload: payload("2")})
	if d := h.receiveOne(ctx, "t", time.Minute); string(d.Payload) != "2" || d.Attempt != 1 {
		h.Fatalf("second message with ID job: delivered %q attempt %d; want %q attempt 1", d.Payload, d.Attempt, "2")
	} else {
		h.ack(ctx, d.Receipt)
	}
}

func testBatch(ctx context.Context, h *env) {
	now := time.Now()
	ms := []queue.Message{
		{Topic: "t", Payload: payload("a"), DeliverAt: now.Add(100 * time.Millisecond)},
		{ID: "batch-b", Topic: "t", Payload: payload("b")},
		{Topic: "t", Payload: payload("c"), DeliverAt: now.Add(50 * time.Millisecond)},
	}
	ids, err := h.e.PutBatch(ctx, ms)
	if err != nil || len(ids) != len(ms) || ids[1] != "batch-b" || ids[0] == "" || ids[2] == "" || ids[0] == ids[2] {
		h.Fatalf("PutBatch: %q, %v; want three distinct IDs, the second batch-b", ids, err)
	}
	want := []string{ids[1], ids[2], ids[0]} // by due time
	got := h.receiveAll(ctx, "t", 3, time.Minute)
	seen := map[string]bool{}
	for _, d := range got {
		seen[d.ID] = true
	}
	for _, id := range want {
		if !seen[id] {
			h.Fatalf("batch message %q not delivered", id)
		}
	}
}

// testBatchAllOrNone checks that a batch refused for any one message stores none of them.
func testBatchAllOrNone(ctx context.Context, h *env) {
	h.put(ctx, queue.Message{ID: "taken", Topic: "t", DeliverAt: time.Now().Add(time.Hour)})
	good := queue.Message{Topic: "t", Payload: payload("good")}
	for _, tc := range []struct {
		name  string
		bad   queue.Message
		extra []queue.Message
		want  error
	}{
		{"empty topic", queue.Message{Payload: payload("x")}, nil, queue.ErrInvalid},
		{"payload too large", queue.Message{Topic: "t", Payload: make([]byte, MaxPayload+1)}, nil, queue.ErrTooLarge},
		{"due too late", queue.Message{Topic: "t", DeliverAt: queue.MaxDeliverAt().Add(time.Second)}, nil, queue.ErrInvalid},
		{"ID repeated in the batch", queue.Message{ID: "twice", Topic: "t"}, []queue.Message{{ID: "twice", Topic: "t"}}, queue.ErrInvalid},
		{"ID of a waiting message", queue.Message{ID: "taken", Topic: "t", Payload: payload("other")}, nil, queue.ErrDuplicate},
	} {
		ms := append([]queue.Message{good, tc.bad}, tc.extra...)
		ms = append(ms, good)
		ids, err := h.e.PutBatch(ctx, ms)
		if !errors.Is(err, tc.want) || ids != nil {
			h.Fatalf("PutBatch with %s: %q, %v; want no IDs and an error matching %v", tc.name, ids, err, tc.want)
		}
	}
	h.expectNothing(ctx, "t", 300*time.Millisecond)
}

func testLimits(ctx context.Context, h *env) {
	big := bytes.Repeat([]byte("x"), MaxPayload)
	_, err := h.e.Put(ctx, queue.Message{Topic: "t", Payload: append(big, 'y')})
	h.wantErr("Put of MaxPayload+1 bytes", err, queue.ErrTooLarge)
	_, err = h.e.Put(ctx, queue.Message{Payload: payload("no topic")})
	h.wantErr("Put with no topic", err, queue.ErrInvalid)
	_, err = h.e.Receive(ctx, "t", 0, time.Minute)
	h.wantErr("Receive of 0 messages", err, queue.ErrInvalid)
	_, err = h.e.Receive(ctx, "t", 1, 0)
	h.wantErr("Receive with no visibility", err, queue.ErrInvalid)

	id := h.put(ctx, queue.Message{Topic: "t", Payload: big})
	d := h.receiveOne(ctx, "t", time.Minute)
	if d.ID != id || !bytes.Equal(d.Payload, big) {
		h.Fatalf("payload of MaxPayload bytes came back as %d bytes", len(d.Payload))
	}
	h.ack(ctx, d.Receipt)
}

// testStats checks the counts of scheduled, due and leased messages.
func testStats(ctx context.Context, h *env) {
	for range 3 {
		h.put(ctx, queue.Message{Topic: "t", DeliverAt: time.Now().Add(time.Hour)})
	}
	for range 2 {
		h.put(ctx, queue.Message{Topic: "t"})
	}
	h.put(ctx, queue.Message{Topic: "u"})
	d := h.receiveOne(ctx, "u", time.Minute)
	want := queue.Stats{Scheduled: 3, Due: 2, Leased: 1}
	h.eventually(ctx, func() error {
		st, err := h.e.Stats(ctx)
		if err != nil {
			return fmt.Errorf("Stats: %w", err)
		}
		if got := (queue.Stats{Scheduled: st.Scheduled, Due: st.Due, Leased: st.Leased}); got != want {
			return fmt.Errorf("Stats = %+v; want %+v", got, want)
		}
		return nil
	})
	h.ack(ctx, d.Receipt)
}

// testDueCounts checks the forecast of scheduled messages, to the second.
func testDueCounts(ctx context.Context, h *env) {
	from := time.Now().Truncate(time.Second).Add(10 * time.Second)
	for i, n := range []int{0, 2, 0, 0, 1} {
		for range n {
			h.put(ctx, queue.Message{Topic: "t", DeliverAt: from.Add(time.Duration(i)*time.Second + 400*time.Millisecond)})
		}
	}
	counts, err := h.e.DueCounts(ctx, from, time.Second, 6)
	if err != nil {
		h.Fatalf("DueCounts: %v", err)
	}
	want := []int{0, 2, 0, 0, 1, 0}
	if len(counts) != len(want) {
		h.Fatalf("DueCounts returned %d counts; want %d", len(counts), len(want))
	}
	for i := range want {
		if counts[i] != want[i] {
			h.Fatalf("DueCounts = %v; want %v", counts, want)
		}
	}
	if c, err := h.e.DueCounts(ctx, from, time.Second, 0); c != nil || err != nil {
		h.Fatalf("DueCounts of 0 steps: %v, %v; want nil", c, err)
	}
}

// testClose checks that Close wakes a waiting Receive, that every call after it fails with
// ErrClosed, and that Ready says so.
func testClose(ctx context.Context, h *env) {
	if err := h.e.Ready(ctx); err != nil {
		h.Fatalf("Ready of an open engine: %v", err)
	}
	waiting := h.receiveLater(ctx, "t")
	if err := h.e.Close(); err != nil {
		h.Fatalf("Close: %v", err)
	}
	r := <-waiting
	h.wantErr("a Receive waiting when Close began", r.err, queue.ErrClosed)
	_, err := h.e.Put(ctx, queue.Message{Topic: "t"})
	h.wantErr("Put after Close", err, queue.ErrClosed)
	_, err = h.e.Receive(ctx, "t", 1, time.Minute)
	h.wantErr("Receive after Close", err, queue.ErrClosed)
	h.wantErr("Ready after Close", h.e.Ready(ctx), queue.ErrClosed)
	h.wantErr("second Close", h.e.Close(), queue.ErrClosed)
}
