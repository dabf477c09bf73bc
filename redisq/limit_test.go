package redisq

import (
	"context"
	"testing"
	"time"

	"github.com/tockwheel/tock/queue"
)

// TestPermitsGivenBackKeepTheRate checks the bound of a rate limit across a receive that gives
// back permits it did not use: permits granted in any span of T seconds are at most rate·T +
// burst. A receive (A) takes the whole bucket; the bucket fills again while A holds its permits;
// another (C) takes it all; A gives its permits back, unused; a third (D) asks at once. Had A
// never taken them, the bucket would have been full while they were out and lost that refill, so
// D may get no more than the refill since C: a bucket given A's permits back whole lets C and D
// take twice the burst within moments.
func TestPermitsGivenBackKeepTheRate(t *testing.T) {
	s := startServer(t)
	q := openQueue(t, singleClient(t, s.Addr))
	ctx := context.Background()
	const rate, burst = 10, 10
	if err := q.SetLimit(ctx, "t", queue.Limit{Rate: rate, Burst: burst}); err != nil {
		t.Fatal(err)
	}
	acquire := func(n int) (granted, at int64, tokens []any) {
		t.Helper()
		tokens = make([]any, n)
		for i := range tokens {
			tokens[i] = newToken()
		}
		granted, _, at, err := q.permit(ctx, "a", "t", append([]any{n, 60_000, permitMargin.Milliseconds()}, tokens...)...)
		if err != nil {
			t.Fatal(err)
		}
		return granted, at, tokens
	}
	// The premise: C and D close enough together that rate·(D - C) + burst, what they may take,
	// is under 2·burst, what they take if A's permits come back whole. A machine too slow for
	// that (D a whole refill after C) tells nothing: try again, then fail.
	for try := 0; try < 3; try++ {
		a, atA, tokensA := acquire(burst)
		if a != burst {
			t.Fatalf("A was granted %d of a full bucket of %d", a, burst)
		}
		time.Sleep(time.Second * burst / rate) // the bucket fills again
		c, atC, _ := acquire(burst)
		if _, _, _, err := q.permit(ctx, "r", "t", append([]any{burst, atA}, tokensA...)...); err != nil {
			t.Fatal(err)
		}
		d, atD, _ := acquire(burst)
		if atC-atA < 1000*burst/rate {
			t.Fatalf("C asked %d ms after A by Redis's clock, after a sleep of %v", atC-atA, time.Second*burst/rate)
		}
		span := atD - atC
		most := rate*(span+1)/1000 + burst
		if most >= 2*burst {
			t.Logf("D asked %d ms after C: C and D may take %d, too many to tell; again", span, most)
			time.Sleep(time.Second * burst / rate)
			continue
		}
		if c+d > most {
			t.Fatalf("C and D were granted %d and %d permits %d ms apart; a rate of %d/s with a burst of %d allows %d",
				c, d, span, rate, burst, most)
		}
		return
	}
	t.Fatal("D never asked within a refill of C: the test's premise did not happen")
}

// TestPermitsGivenBackAtOnceComeBack checks that permits a receive gives back at once, unused,
// are not lost: the next receive is granted them.
func TestPermitsGivenBackAtOnceComeBack(t *testing.T) {
	s := startServer(t)
	q := openQueue(t, singleClient(t, s.Addr))
	ctx := context.Background()
	const burst = 10
	if err := q.SetLimit(ctx, "t", queue.Limit{Rate: 1, Burst: burst}); err != nil {
		t.Fatal(err)
	}
	tokens := make([]any, burst)
	for i := range tokens {
		tokens[i] = newToken()
	}
	n, _, at, err := q.permit(ctx, "a", "t", append([]any{burst, 60_000, permitMargin.Milliseconds()}, tokens...)...)
	if err != nil || n != burst {
		t.Fatalf("granted %d of a full bucket of %d: %v", n, burst, err)
	}
	if _, _, _, err := q.permit(ctx, "r", "t", append([]any{burst, at}, tokens...)...); err != nil {
		t.Fatal(err)
	}
	for i := range tokens {
		tokens[i] = newToken()
	}
	if n, _, _, err := q.permit(ctx, "a", "t", append([]any{burst, 60_000, permitMargin.Milliseconds()}, tokens...)...); err != nil || n != burst {
		t.Fatalf("after %d permits were given back unused, granted %d: %v; want them all", burst, n, err)
	}
}
