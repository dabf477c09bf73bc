package tock

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// TestDivTick checks the reciprocal division against the division operator on both sides of
// multiples of the tick and at the ends of the range, for awkward ticks.
func TestDivTick(t *testing.T) {
	for _, tick := range []time.Duration{time.Microsecond, 999 * time.Microsecond, time.Millisecond,
		1_000_003, 7 * time.Second, time.Hour, 1<<40 + 1} {
		w := New(WithTick(tick))
		tk := int64(tick)
		check := func(ns int64) {
			q, rem := w.divTick(ns)
			if q != ns/tk || rem != ns%tk {
				t.Fatalf("tick %d: divTick(%d) = %d, %d; want %d, %d", tk, ns, q, rem, ns/tk, ns%tk)
			}
			up := ns / tk
			if up*tk < ns {
				up++
			}
			if got := w.tickAt(ns); got != up {
				t.Fatalf("tick %d: tickAt(%d) = %d, want %d", tk, ns, got, up)
			}
		}
		for _, ns := range []int64{0, 1, tk - 1, tk, tk + 1, math.MaxInt64 - 1, math.MaxInt64} {
			check(ns)
		}
		for k := int64(1); k < math.MaxInt64/tk && k > 0; k = k*3 + 1 {
			for _, ns := range []int64{k*tk - 1, k * tk, k*tk + 1} {
				check(ns)
			}
		}
		r := rand.New(rand.NewPCG(1, uint64(tk)))
		for range 100_000 {
			check(r.Int64())
		}
	}
}
