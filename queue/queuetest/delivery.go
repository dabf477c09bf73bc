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

// The cases about when and in what order messages are delivered.

func testPutReceiveAck(ctx context.Context, h *env) {
	id := h.put(ctx, queue.Message{Topic: "t", Payload: payload("hello")})
	d := h.receiveOne(ctx, "t", time.Minute)
	if d.ID != id || !bytes.Equal(d.Payload, payload("hello")) || d.Attempt != 1 {
		h.Fatalf("delivered %q %q attempt %d; want %q %q attempt 1", d.ID, d.Payload, d.Attempt, id, "hello")
	}
	h.ack(ctx, d.Receipt)
	h.expectNothing(ctx, "t", 300*time.Millisecond)
}

// testNeverEarly puts messages due a little ahead, in shuffled order, and checks each is delivered
// at or after its due time, which the delivery reports as it was put (to the millisecond: an
// engine may round a due time up to its precision), or as the time of its Put where the Put
// returned after the time asked for (a slow machine).
func testNeverEarly(ctx context.Context, h *env) {
	start := time.Now()
	offsets := []time.Duration{50, 120, 200, 260, 330, 400}
	rand.Shuffle(len(offsets), func(i, j int) { offsets[i], offsets[j] = offsets[j], offsets[i] })
	type asked struct{ at, returned time.Time }
	due := make(map[string]asked)
	for i, o := range offsets {
		at := start.Add(o * time.Millisecond).Add(time.Duration(i) * 137 * time.Microsecond)
		id := h.put(ctx, queue.Message{Topic: "t", DeliverAt: at})
		due[id] = asked{at, time.Now()}
	}
	for _, d := range h.receiveAll(ctx, "t", len(offsets), time.Minute) {
		want, ok := due[d.ID]
		if !ok {
			h.Fatalf("delivered %q, which was not put or was delivered twice", d.ID)
		}
		delete(due, d.ID)
		latest := want.at
		if want.returned.After(latest) {
			latest = want.returned
		}
		if d.DeliverAt.Before(want.at) || d.DeliverAt.After(latest.Add(time.Millisecond)) {
			h.Errorf("%q delivered with due time %v; put with %v (returned at %v)", d.ID, d.DeliverAt, want.at, want.returned)
		}
	}
}

// testPastDueTimes puts messages with a zero DeliverAt, one in the past and one before 1970: each
// is due at once, and the delivery reports the time of its Put as its due time.
func testPastDueTimes(ctx context.Context, h *env) {
	for _, at := range []time.Time{{}, time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(1900, 1, 1, 0, 0, 0, 0, time.UTC)} {
		before := time.Now()
		id := h.put(ctx, queue.Message{Topic: "t", DeliverAt: at})
		after := time.Now()
		d := h.receiveOne(ctx, "t", time.Minute)
		if d.ID != id {
			h.Fatalf("delivered %q; want %q", d.ID, id)
		}
		if d.DeliverAt.Before(before.Add(-time.Millisecond)) || d.DeliverAt.After(after.Add(time.Millisecond)) {
			h.Errorf("put with DeliverAt %v between %v and %v: delivered with due time %v; want the time of the Put",
				at, before, after, d.DeliverAt)
		}
		h.ack(ctx, d.Receipt)
	}
}

// testDueTimeRange checks the latest due time accepted, and a nanosecond more.
func testDueTimeRange(ctx context.Context, h *env) {
	last := queue.MaxDeliverAt()
	_, err := h.e.Put(ctx, queue.Message{Topic: "t", DeliverAt: last.Add(time.Nanosecond)})
	h.wantErr("Put after MaxDeliverAt", err, queue.ErrInvalid)
	id := h.put(ctx, queue.Message{Topic: "t", DeliverAt: last.Add(-time.Millisecond)})
	if ok, err := h.e.Cancel(ctx, id); !ok || err != nil {
		h.Fatalf("Cancel of a message due in 2262: %v, %v; want true", ok, err)
	}
}

// testOrderByDueTime puts messages due at distinct times in shuffled order and, once all are due,
// receives them in one call: they come earliest due first. A message whose Put returned after
// the time it asked for is due at its Put instead (a slow machine): then the order checked is that
// of the due times the deliveries report.
func testOrderByDueTime(ctx context.Context, h *env) {
	start := time.Now().Add(300 * time.Millisecond)
	const n = 20
	order := rand.Perm(n)
	ids := make([]string, n)
	for _, i := range order {
		ids[i] = h.put(ctx, queue.Message{Topic: "t", DeliverAt: start.Add(time.Duration(i) * 3 * time.Millisecond)})
	}
	slow := time.Now().After(start)
	sleepUntil(start.Add(n * 3 * time.Millisecond))
	// An engine makes a message due an instant after its due time; the order is promised among
	// the messages due when Receive is called.
	h.eventually(ctx, func() error {
		if st, err := h.e.Stats(ctx); err != nil || st.Due != n {
			return fmt.Errorf("Stats = %+v, %v; want all %d messages due", st, err, n)
		}
		return nil
	})
	ds := h.receiveAll(ctx, "t", n, time.Minute)
	for i, d := range ds {
		switch {
		case !slow && d.ID != ids[i]:
			h.Fatalf("delivery %d is %q, due %v; want %q, the %dth earliest", i, d.ID, d.DeliverAt, ids[i], i)
		case i > 0 && d.DeliverAt.Before(ds[i-1].DeliverAt):
			h.Fatalf("delivery %d is %q, due %v, after %q, due later at %v", i, d.ID, d.DeliverAt, ds[i-1].ID, ds[i-1].DeliverAt)
		}
	}
}

func testTopicsAreSeparate(ctx context.Context, h *env) {
	a := h.put(ctx, queue.Message{Topic: "a"})
	b := h.put(ctx, queue.Message{Topic: "b"})
	if d := h.receiveOne(ctx, "b", time.Minute); d.ID != b {
		h.Fatalf("received %q from topic b; want %q", d.ID, b)
	}
	if d := h.receiveOne(ctx, "a", time.Minute); d.ID != a {
		h.Fatalf("received %q from topic a; want %q", d.ID, a)
	}
	h.expectNothing(ctx, "b", 200*time.Millisecond)
}

// testReceiveWaits checks that a Receive waiting on an empty topic returns a message put after it
// began, once the message is due.
func testReceiveWaits(ctx context.Context, h *env) {
	got := h.receiveLater(ctx, "t")
	due := time.Now().Add(200 * time.Millisecond)
	id := h.put(ctx, queue.Message{Topic: "t", DeliverAt: due})
	r := <-got
	switch {
	case r.err != nil:
		h.Fatalf("waiting Receive: %v", r.err)
	case len(r.ds) != 1 || r.ds[0].ID != id:
		h.Fatalf("waiting Receive returned %d deliveries; want %q", len(r.ds), id)
	case r.at.Before(due):
		h.Fatalf("waiting Receive returned %v before the message was due", due.Sub(r.at))
	}
}

func testReceiveMax(ctx context.Context, h *env) {
	for range 5 {
		h.put(ctx, queue.Message{Topic: "t"})
	}
	if ds := h.receive(ctx, "t", 2, time.Minute); len(ds) > 2 {
		h.Fatalf("Receive(max 2) returned %d", len(ds))
	}
	h.receiveAll(ctx, "t", 3, time.Minute)
	h.expectNothing(ctx, "t", 200*time.Millisecond)
}

func testReceiveContextEnds(ctx context.Context, h *env) {
	h.put(ctx, queue.Message{Topic: "t", DeliverAt: time.Now().Add(time.Hour)})
	h.expectNothing(ctx, "t", 200*time.Millisecond)
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	ds, err := h.e.Receive(cctx, "t", 1, time.Minute)
	if len(ds) != 0 || !errors.Is(err, context.Canceled) {
		h.Fatalf("Receive with a cancelled context: %d deliveries, %v; want none and context.Canceled", len(ds), err)
	}
}
