package retry_test

import (
	"math"
	"testing"
	"time"

	"github.com/tockwheel/tock/retry"
)

func TestConstant(t *testing.T) {
	b := retry.Constant(3 * time.Second)
	for _, n := range []int{1, 2, 100, math.MaxInt} {
		if d := b.Delay(n); d != 3*time.Second {
			t.Errorf("Delay(%d) = %v, want 3s", n, d)
		}
	}
}

func TestExponential(t *testing.T) {
	initial, max := 100*time.Millisecond, 10*time.Second
	b := retry.Exponential(initial, max)
	for _, tt := range []struct {
		n       int
		ceiling time.Duration
	}{
		{0, initial}, {1, initial}, {2, 2 * initial}, {3, 4 * initial}, {7, 64 * initial},
		{8, max}, {9, max}, {62, max}, {63, max}, {64, max}, {1000, max}, {math.MaxInt, max},
	} {
		// Full jitter: uniform in [0, ceiling]. 2000 draws almost surely reach both quarters.
		var low, high bool
		for range 2000 {
			d := b.Delay(tt.n)
			if d < 0 || d > tt.ceiling {
				t.Fatalf("Delay(%d) = %v, want within [0, %v]", tt.n, d, tt.ceiling)
			}
			low = low || d < tt.ceiling/4
			high = high || d > tt.ceiling*3/4
		}
		if !low || !high {
			t.Errorf("Delay(%d) over 2000 draws: below a quarter %v, above three quarters %v; want both (full jitter)", tt.n, low, high)
		}
	}
	// The largest durations do not overflow.
	huge := retry.Exponential(time.Duration(math.MaxInt64/2), time.Duration(math.MaxInt64))
	for _, n := range []int{1, 2, 3, 100} {
		if d := huge.Delay(n); d < 0 {
			t.Fatalf("Delay(%d) = %v, want non-negative", n, d)
		}
	}
}
