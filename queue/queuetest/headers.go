package queuetest

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"time"

	"github.com/tockwheel/tock/queue"
)

// The cases of message headers: kept with the message through every path it takes, refused
// beyond their bounds, and counted in the payload limit.

// sampleHeaders are headers such as a producer's: a trace context, and values that JSON, Lua and
// a log format would each treat specially.
func sampleHeaders() map[string]string {
	return map[string]string{
		"traceparent":       "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		"content-type":      "application/json; charset=utf-8",
		"Quotes":            `"a", 'b', <c> & \d`,
		"unicode":           "héllo wörld ✓\ttab",
		"empty":             "",
		"x.y_z~!#$%&'*+^`|": ",;",
	}
}

// wantHeaders fails the test when got is not want; nil and empty are the same.
func (h *env) wantHeaders(what string, got, want map[string]string) {
	h.Helper()
	if len(got) != len(want) || !maps.Equal(got, want) {
		h.Fatalf("%s has headers %q; want %q", what, got, want)
	}
}

// testHeaders follows headers through a delivery, a nack, a batch and death: each delivery
// carries the headers put, and a message put without carries none.
func testHeaders(ctx context.Context, h *env) {
	hs := sampleHeaders()
	id := h.put(ctx, queue.Message{Topic: "t", Payload: payload("with"), Headers: hs, DeliverAt: time.Now().Add(200 * time.Millisecond)})
	plain := h.put(ctx, queue.Message{Topic: "t", Payload: payload("without"), DeliverAt: time.Now().Add(200 * time.Millisecond)})
	hs["traceparent"] = "changed after the Put" // the engine keeps its own copy
	want := sampleHeaders()
	for _, d := range h.receiveAll(ctx, "t", 2, time.Minute) {
		switch d.ID {
		case id:
			h.wantHeaders("the delivery of "+id, d.Headers, want)
			if err := h.e.Nack(ctx, d.Receipt, 0); err != nil {
				h.Fatalf("Nack: %v", err)
			}
		case plain:
			if d.Headers != nil {
				h.Fatalf("the delivery of %q, put without headers, has headers %q; want nil", plain, d.Headers)
			}
			h.ack(ctx, d.Receipt)
		default:
			h.Fatalf("delivered %q, which was not put", d.ID)
		}
	}
	d := h.receiveOne(ctx, "t", time.Minute)
	if d.ID != id || d.Attempt != 2 {
		h.Fatalf("delivered %q attempt %d; want %q again, attempt 2", d.ID, d.Attempt, id)
	}
	h.wantHeaders("the second delivery of "+id, d.Headers, want)
	if err := h.e.Nack(ctx, d.Receipt, 0, queue.WithDeadLetter()); err != nil {
		h.Fatalf("Nack to the dead letters: %v", err)
	}
	d = h.receiveOne(ctx, "t"+queue.DeadLetterSuffix, time.Minute)
	h.wantHeaders("the dead letter "+id, d.Headers, want)
	h.ack(ctx, d.Receipt)

	ids, err := h.e.PutBatch(ctx, []queue.Message{
		{Topic: "b", Headers: map[string]string{"n": "1"}},
		{Topic: "b"},
		{Topic: "b", Headers: map[string]string{"n": "3", "other": "x"}},
	})
	if err != nil {
		h.Fatalf("PutBatch with headers: %v", err)
	}
	wantBatch := map[string]map[string]string{ids[0]: {"n": "1"}, ids[1]: nil, ids[2]: {"n": "3", "other": "x"}}
	for _, d := range h.receiveAll(ctx, "b", 3, time.Minute) {
		w, ok := wantBatch[d.ID]
		if !ok {
			h.Fatalf("delivered %q, which was not put or was delivered twice", d.ID)
		}
		delete(wantBatch, d.ID)
		h.wantHeaders("the delivery of batch message "+d.ID, d.Headers, w)
	}
}

// testHeadersRetriedPut checks that a Put repeating a waiting message with other headers is a
// retried Put, and that the message keeps the headers it was first put with. The message is due
// in an hour, so that no Put, however slow, finds it due (a retry after its due time is another
// message over HTTP, whose server takes a due time past as its now), and is made due at once to
// be delivered: the case needs a queue.Admin.
func testHeadersRetriedPut(ctx context.Context, h *env) {
	a := as[queue.Admin](h)
	at := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	first := queue.Message{ID: "retried", Topic: "t", Payload: payload("p"), DeliverAt: at, Headers: map[string]string{"traceparent": "first"}}
	h.put(ctx, first)
	again := first
	again.Headers = map[string]string{"traceparent": "second", "more": "x"}
	if id, err := h.e.Put(ctx, again); err != nil || id != first.ID {
		h.Fatalf("a retried Put with other headers: %q, %v; want %q, nil", id, err, first.ID)
	}
	if m, err := a.Message(ctx, first.ID); err != nil {
		h.Fatalf("Message(%q): %v", first.ID, err)
	} else {
		h.wantHeaders("the message put twice", m.Headers, first.Headers)
	}
	if ok, err := a.DeliverNow(ctx, first.ID); !ok || err != nil {
		h.Fatalf("DeliverNow(%q): %v, %v", first.ID, ok, err)
	}
	d := h.receiveOne(ctx, "t", time.Minute)
	h.wantHeaders("the delivery of a message put twice", d.Headers, first.Headers)
}

// testHeadersRefused checks the bounds of headers: invalid keys and values are refused with
// ErrInvalid, too many or too large with ErrTooLarge, and their bytes count in the payload limit;
// a refused Put or batch stores nothing.
func testHeadersRefused(ctx context.Context, h *env) {
	many := make(map[string]string, queue.MaxHeaders+1)
	for i := range queue.MaxHeaders + 1 {
		many[fmt.Sprintf("k%d", i)] = ""
	}
	for _, tc := range []struct {
		name    string
		headers map[string]string
		payload []byte
		want    error
	}{
		{"an empty key", map[string]string{"": "v"}, nil, queue.ErrInvalid},
		{"a key with a space", map[string]string{"a b": "v"}, nil, queue.ErrInvalid},
		{"a key with =", map[string]string{"a=b": "v"}, nil, queue.ErrInvalid},
		{"a key with a colon", map[string]string{"a:b": "v"}, nil, queue.ErrInvalid},
		{"a key of non-ASCII letters", map[string]string{"clé": "v"}, nil, queue.ErrInvalid},
		{"a key too long", map[string]string{strings.Repeat("k", queue.MaxHeaderKey+1): "v"}, nil, queue.ErrInvalid},
		{"a value with a newline", map[string]string{"k": "a\nb"}, nil, queue.ErrInvalid},
		{"a value with NUL", map[string]string{"k": "a\x00b"}, nil, queue.ErrInvalid},
		{"a value not UTF-8", map[string]string{"k": "a\xffb"}, nil, queue.ErrInvalid},
		{"too many headers", many, nil, queue.ErrTooLarge},
		{"headers too large", map[string]string{"k": strings.Repeat("v", queue.MaxHeadersSize)}, nil, queue.ErrTooLarge},
		{"headers beside a payload over the limit", map[string]string{"k": "vv"}, make([]byte, MaxPayload-2), queue.ErrTooLarge},
	} {
		m := queue.Message{ID: "refused", Topic: "t", Headers: tc.headers, Payload: tc.payload}
		_, err := h.e.Put(ctx, m)
		h.wantErr("Put with "+tc.name, err, tc.want)
		_, err = h.e.PutBatch(ctx, []queue.Message{{Topic: "t"}, m})
		h.wantErr("PutBatch with "+tc.name, err, tc.want)
	}
	// At the limit exactly: the payload and the headers' keys and values fill it.
	full := queue.Message{Topic: "t", Headers: map[string]string{"k": "vv"}, Payload: make([]byte, MaxPayload-3)}
	for i := range full.Payload {
		full.Payload[i] = 'p'
	}
	h.put(ctx, full)
	d := h.receiveOne(ctx, "t", time.Minute)
	h.wantHeaders("the message at the limit", d.Headers, full.Headers)
	h.ack(ctx, d.Receipt)
	h.expectNothing(ctx, "t", 300*time.Millisecond)
}

// testAdminHeaders checks that Message and Messages show a message's headers, whole, in every
// state.
func testAdminHeaders(ctx context.Context, h *env, a queue.Admin) {
	hs := sampleHeaders()
	id := h.put(ctx, queue.Message{Topic: "t", Headers: hs, Payload: payload("x"), DeliverAt: time.Now().Add(time.Hour)})
	plain := h.put(ctx, queue.Message{Topic: "t", DeliverAt: time.Now().Add(2 * time.Hour)})
	m, err := a.Message(ctx, id)
	if err != nil {
		h.Fatalf("Message(%q): %v", id, err)
	}
	h.wantHeaders("Message of a scheduled message", m.Headers, hs)
	page, _, err := a.Messages(ctx, "t", queue.Scheduled, "", 10)
	if err != nil || len(page) != 2 {
		h.Fatalf("Messages of scheduled: %d messages, %v; want 2", len(page), err)
	}
	for _, m := range page {
		switch m.ID {
		case id:
			h.wantHeaders("a page's scheduled message", m.Headers, hs)
		case plain:
			h.wantHeaders("a page's message put without headers", m.Headers, nil)
		}
	}
	if ok, err := a.DeliverNow(ctx, id); !ok || err != nil {
		h.Fatalf("DeliverNow(%q): %v, %v", id, ok, err)
	}
	h.eventually(ctx, func() error {
		m, err := a.Message(ctx, id)
		if err != nil || m.State != queue.Due {
			return fmt.Errorf("Message(%q) after DeliverNow: %+v, %v; want it due", id, m, err)
		}
		return nil
	})
	m, _ = a.Message(ctx, id)
	h.wantHeaders("Message of a message made due", m.Headers, hs)
	d := h.receiveOne(ctx, "t", time.Minute)
	h.wantHeaders("the delivery of a message made due", d.Headers, hs)
	m, err = a.Message(ctx, id)
	if err != nil || m.State != queue.Leased {
		h.Fatalf("Message(%q) once leased: %+v, %v", id, m, err)
	}
	h.wantHeaders("Message of a leased message", m.Headers, hs)
	page, _, err = a.Messages(ctx, "t", queue.Leased, "", 10)
	if err != nil || len(page) != 1 {
		h.Fatalf("Messages of leased: %d messages, %v; want 1", len(page), err)
	}
	h.wantHeaders("a page's leased message", page[0].Headers, hs)
	if err := h.e.Nack(ctx, d.Receipt, 0, queue.WithDeadLetter()); err != nil {
		h.Fatalf("Nack to the dead letters: %v", err)
	}
	page, _, err = a.Messages(ctx, "t", queue.Dead, "", 10)
	if err != nil || len(page) != 1 {
		h.Fatalf("Messages of dead: %d messages, %v; want 1", len(page), err)
	}
	h.wantHeaders("a page's dead letter", page[0].Headers, hs)
	if n, err := a.Requeue(ctx, "t"); n != 1 || err != nil {
		h.Fatalf("Requeue: %d, %v; want 1", n, err)
	}
	d = h.receiveOne(ctx, "t", time.Minute)
	h.wantHeaders("the delivery of a requeued dead letter", d.Headers, hs)
}
