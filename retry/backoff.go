package retry

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"
)

// A Backoff says how long to wait before the next attempt. Delay(n) is the wait after the n-th
// failure in a row, n >= 1; for a [Queue] the failure that led to [Queue.Add] is the first. Delay
// must be safe for concurrent use: one Backoff serves every key of a Queue, which is why it is
// given the count instead of keeping state.
type Backoff interface {
	Delay(n int) time.Duration
}

// Constant returns a Backoff that waits d after every failure. A negative d makes
// [WithBackoff] invalid.
func Constant(d time.Duration) Backoff {
	return constant{d}
}

type constant struct{ d time.Duration }

func (c constant) Delay(int) time.Duration { return c.d }

func (c constant) String() string { return fmt.Sprintf("Constant(%v)", c.d) }

// validate describes what is wrong with c, or returns "".
func (c constant) validate() string {
	if c.d < 0 {
		return "negative delay"
	}
	return ""
}

// Exponential returns a Backoff with exponential growth and full jitter: after the n-th failure it
// waits a random duration between 0 and min(max, initial·2ⁿ⁻¹), uniformly. The randomness spreads
// out the retries of many keys that failed together, so they do not come back together (the
// "thundering herd"). [WithBackoff] refuses it unless 0 < initial <= max.
func Exponential(initial, max time.Duration) Backoff {
	return exponential{initial, max}
}

type exponential struct{ initial, max time.Duration }

func (e exponential) Delay(n int) time.Duration {
	ceiling := e.max
	if n < 1 {
		n = 1
	}
	if n-1 < 63 && e.initial <= e.max>>(n-1) {
		ceiling = e.initial << (n - 1)
	}
	if ceiling <= 0 {
		return 0
	}
	if ceiling == math.MaxInt64 {
		return rand.N(ceiling) // ceiling+1 would overflow; one nanosecond less is no matter
	}
	return rand.N(ceiling + 1)
}

func (e exponential) String() string { return fmt.Sprintf("Exponential(%v, %v)", e.initial, e.max) }

// validate describes what is wrong with e, or returns "".
func (e exponential) validate() string {
	if e.initial <= 0 || e.max < e.initial {
		return "want 0 < initial <= max"
	}
	return ""
}
