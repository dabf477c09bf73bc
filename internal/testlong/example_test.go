package testlong_test

import (
	"testing"

	"github.com/tockwheel/tock/internal/testlong"
)

// A soak that runs only in long mode, and a randomized test that runs more steps in it.
func Example() {
	_ = func(t *testing.T) {
		testlong.Skip(t) // skipped unless TOCK_LONG=1
		// ... a day of simulated puts and acks
	}
	_ = func(t *testing.T) {
		steps := testlong.Pick(300, 10_000)
		_ = steps // ... random operations against the model
	}
}
