package testwait

import (
	"context"
	"testing"
	"testing/synctest"
	"time"
)

func TestUntilReturnsOnceTheStateHolds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		Until(t, t.Context(), "a second to pass", func() bool { return time.Since(start) >= time.Second })
		if got := time.Since(start); got < time.Second || got > time.Second+Every {
			t.Fatalf("returned after %v; want within a look of 1s", got)
		}
	})
}

// fatalRecorder records a Fatalf instead of ending the test, so that Until's failure can be seen.
type fatalRecorder struct {
	testing.TB
	msg string
}

func (r *fatalRecorder) Helper() {}
func (r *fatalRecorder) Fatalf(format string, args ...any) {
	r.msg = format
	panic(r)
}

func TestUntilFailsWhenTheContextEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		r := &fatalRecorder{TB: t}
		func() {
			defer func() {
				if recover() != r {
					t.Fatal("Until did not fail")
				}
			}()
			Until(r, ctx, "nothing", func() bool { return false })
		}()
		if r.msg == "" {
			t.Fatal("Until did not say what it waited for")
		}
	})
}
