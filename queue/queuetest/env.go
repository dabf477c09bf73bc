package queuetest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/tockwheel/tock/queue"
)

// env is one subtest's engine with the checks the cases share. Each helper fails the test with a
// message saying what was expected.
type env struct {
	*testing.T
	e queue.Engine
}

func (h *env) put(ctx context.Context, m queue.Message) string {
	h.Helper()
	id, err := h.e.Put(ctx, m)
	if err != nil {
		h.Fatalf("Put(%q, due %v): %v", m.ID, m.DeliverAt, err)
	}
	if m.ID != "" && id != m.ID {
		h.Fatalf("Put with ID %q returned ID %q", m.ID, id)
	}
	if id == "" {
		h.Fatalf("Put returned an empty ID")
	}
	return id
}

// receive leases up to max messages of topic, waiting for as long as the case may run, and checks
// that none is delivered before its due time.
func (h *env) receive(ctx context.Context, topic string, max int, visibility time.Duration) []queue.Delivery {
	h.Helper()
	ds, err := h.e.Receive(ctx, topic, max, visibility)
	now := time.Now()
	if err != nil {
		h.Fatalf("Receive(%q): %v (a message the case waits for did not come)", topic, err)
	}
	if len(ds) == 0 || len(ds) > max {
		h.Fatalf("Receive(%q, max %d) returned %d deliveries", topic, max, len(ds))
	}
	for _, d := range ds {
		h.checkDelivery(d, topic, now)
	}
	return ds
}

// checkDelivery checks what every delivery must hold, received at now.
func (h *env) checkDelivery(d queue.Delivery, topic string, now time.Time) {
	h.Helper()
	switch {
	case d.Topic != topic:
		h.Fatalf("delivery of %q has topic %q, received from %q", d.ID, d.Topic, topic)
	case d.ID == "" || d.Receipt == "":
		h.Fatalf("delivery with ID %q and receipt %q: both must be set", d.ID, d.Receipt)
	case d.Attempt < 1:
		h.Fatalf("delivery of %q has attempt %d", d.ID, d.Attempt)
	case now.Before(d.DeliverAt):
		h.Fatalf("delivery of %q received at %v, %v before its due time %v: early",
			d.ID, now.Format(time.RFC3339Nano), d.DeliverAt.Sub(now), d.DeliverAt.Format(time.RFC3339Nano))
	}
}

// receiveAll receives from topic until n messages have come.
func (h *env) receiveAll(ctx context.Context, topic string, n int, visibility time.Duration) []queue.Delivery {
	h.Helper()
	var all []queue.Delivery
	for len(all) < n {
		all = append(all, h.receive(ctx, topic, n-len(all), visibility)...)
	}
	return all
}

// receiveOne receives exactly one message of topic.
func (h *env) receiveOne(ctx context.Context, topic string, visibility time.Duration) queue.Delivery {
	h.Helper()
	return h.receive(ctx, topic, 1, visibility)[0]
}

// expectNothing checks that nothing of topic is delivered within wait. Its lease is short: over
// HTTP, the server may notice only late that this Receive gave up, and lease a message put
// afterwards to it; the message must then be due again soon.
func (h *env) expectNothing(ctx context.Context, topic string, wait time.Duration) {
	h.Helper()
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	ds, err := h.e.Receive(ctx, topic, 10, 500*time.Millisecond)
	if len(ds) > 0 {
		h.Fatalf("Receive(%q) delivered %q (attempt %d); want nothing", topic, ds[0].ID, ds[0].Attempt)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		h.Fatalf("Receive(%q) on nothing due: %v; want an error wrapping context.DeadlineExceeded", topic, err)
	}
}

func (h *env) ack(ctx context.Context, receipts ...string) {
	h.Helper()
	if err := h.e.Ack(ctx, receipts...); err != nil {
		h.Fatalf("Ack: %v", err)
	}
}

// wantErr checks that err matches target.
func (h *env) wantErr(what string, err, target error) {
	h.Helper()
	if !errors.Is(err, target) {
		h.Fatalf("%s: error %v; want one matching %v", what, err, target)
	}
}

// receiveLater starts a Receive of one message of topic on a goroutine, and returns once that
// goroutine runs, about to call it, so that what the case does next happens while the call waits.
// The result comes on the channel returned.
func (h *env) receiveLater(ctx context.Context, topic string) <-chan received {
	got := make(chan received, 1)
	started := make(chan struct{})
	go func() {
		close(started)
		ds, err := h.e.Receive(ctx, topic, 1, time.Minute)
		got <- received{ds, err, time.Now()}
	}()
	<-started
	// The goroutine runs: give it the moment it needs to enter the engine's wait.
	time.Sleep(50 * time.Millisecond)
	return got
}

// received is what a Receive started by receiveLater returned, and when.
type received struct {
	ds  []queue.Delivery
	err error
	at  time.Time
}

// eventually calls check until it returns nil, or fails the test with its error when ctx ends:
// an engine may count a message due an instant after it became due.
func (h *env) eventually(ctx context.Context, check func() error) {
	h.Helper()
	for {
		err := check()
		if err == nil {
			return
		}
		select {
		case <-ctx.Done():
			h.Fatal(err)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// sleepUntil waits until t has passed.
func sleepUntil(t time.Time) { time.Sleep(time.Until(t)) }

// payload returns a payload saying what it is, so that a mixed-up delivery is easy to read.
func payload(format string, args ...any) []byte { return []byte(fmt.Sprintf(format, args...)) }
