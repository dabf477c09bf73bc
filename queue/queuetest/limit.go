package queuetest

import (
	"context"
	"math"
	"slices"
	"time"

	"github.com/tockwheel/tock/queue"
)

// The cases of a queue.Limiter: delivery limits per topic.

var limitCases = []struct {
	name string
	run  func(ctx context.Context, h *env, l queue.Limiter)
}{
	{"LimitConcurrency", testLimitConcurrency},
	{"LimitRate", testLimitRate},
	{"LimitInvalid", testLimitInvalid},
}

// testLimitConcurrency bounds a topic to 2 leased messages: a Receive gets 2 of 5 due, the next
// waits until a lease ends (an ack, a nack), and removing the limit lets the rest through.
func testLimitConcurrency(ctx context.Context, h *env, l queue.Limiter) {
	if err := l.SetLimit(ctx, "t", queue.Limit{Concurrency: 2}); err != nil {
		h.Fatalf("SetLimit: %v", err)
	}
	for range 5 {
		h.put(ctx, queue.Message{Topic: "t"})
	}
	h.put(ctx, queue.Message{Topic: "u"})
	first := h.receiveAll(ctx, "t", 2, time.Minute)
	h.expectNothing(ctx, "t", 300*time.Millisecond)
	h.ack(ctx, h.receiveOne(ctx, "u", time.Minute).Receipt) // another topic is not limited
	h.ack(ctx, first[0].Receipt)
	third := h.receiveOne(ctx, "t", time.Minute)
	if err := h.e.Nack(ctx, first[1].Receipt, 0); err != nil {
		h.Fatalf("Nack: %v", err)
	}
	fourth := h.receiveOne(ctx, "t", time.Minute)
	h.expectNothing(ctx, "t", 300*time.Millisecond)
	ls, err := l.Limits(ctx)
	if err != nil || len(ls) != 1 || ls[0].Topic != "t" || ls[0].Concurrency != 2 || ls[0].Rate != 0 {
		h.Fatalf("Limits: %+v, %v; want t with concurrency 2", ls, err)
	}
	if err := l.SetLimit(ctx, "t", queue.Limit{}); err != nil {
		h.Fatalf("SetLimit to remove: %v", err)
	}
	rest := h.receiveAll(ctx, "t", 2, time.Minute) // of 5: 1 acked, 2 leased
	if ls, err := l.Limits(ctx); err != nil || len(ls) != 0 {
		h.Fatalf("Limits after removing the only one: %+v, %v", ls, err)
	}
	h.ack(ctx, third.Receipt, fourth.Receipt)
	for _, d := range rest {
		h.ack(ctx, d.Receipt)
	}
}

// testLimitRate limits a topic to 10 deliveries a second with a burst of 2: 10 due messages,
// received as fast as they come, are never more than 2 + 10·T in any T seconds from the first
// Receive, and all come.
func testLimitRate(ctx context.Context, h *env, l queue.Limiter) {
	const rate, burst, n = 10, 2, 10
	for range n {
		h.put(ctx, queue.Message{Topic: "t"})
	}
	if err := l.SetLimit(ctx, "t", queue.Limit{Rate: rate, Burst: burst}); err != nil {
		h.Fatalf("SetLimit: %v", err)
	}
	start := time.Now()
	var at []time.Duration
	for len(at) < n {
		ds := h.receive(ctx, "t", n, time.Minute)
		took := time.Since(start)
		for _, d := range ds {
			at = append(at, took)
			h.ack(ctx, d.Receipt)
		}
	}
	slices.Sort(at)
	for i, t := range at {
		// The (i+1)-th delivery came by t: at most burst + rate·t deliveries by then, with a
		// millisecond for the engines' rounding of time.
		if allowed := burst + rate*(t+time.Millisecond).Seconds(); float64(i+1) > math.Floor(allowed)+1e-9 {
			h.Fatalf("%d deliveries within %v of the first Receive; a rate of %d/s with a burst of %d allows %v", i+1, t, rate, burst, math.Floor(allowed))
		}
	}
	if last := at[n-1]; last < time.Duration(float64(n-burst)/rate*float64(time.Second))-10*time.Millisecond {
		h.Fatalf("the last of %d came %v after the first Receive: faster than the rate allows", n, last)
	}
}

// testLimitInvalid checks the limits every engine refuses, with ErrInvalid.
func testLimitInvalid(ctx context.Context, h *env, l queue.Limiter) {
	for _, bad := range []queue.Limit{
		{Rate: -1}, {Rate: math.NaN()}, {Rate: queue.MaxRate * 2}, {Burst: 3},
		{Rate: 1, Burst: -1}, {Concurrency: -1}, {Concurrency: queue.MaxConcurrency + 1},
	} {
		h.wantErr("SetLimit of an invalid limit", l.SetLimit(ctx, "t", bad), queue.ErrInvalid)
	}
	h.wantErr("SetLimit on an empty topic", l.SetLimit(ctx, "", queue.Limit{Concurrency: 1}), queue.ErrInvalid)
	if err := l.SetLimit(ctx, "t", queue.Limit{Rate: 25}); err != nil {
		h.Fatalf("SetLimit: %v", err)
	}
	if ls, err := l.Limits(ctx); err != nil || len(ls) != 1 || ls[0].Rate != 25 || ls[0].Burst != 3 {
		h.Fatalf("Limits after a rate of 25 without a burst: %+v, %v; want the default burst, 3", ls, err)
	}
}
