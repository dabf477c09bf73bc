// Package testwait waits, in tests, for a state that processes reach in their own time.
//
// A test that sleeps a guessed while before it looks fails on a busy machine, and one that gives
// up after a guessed while does too. [Until] looks again and again until the state holds, and
// only the test's context bounds it: a test that gives its context the bound its promise allows
// (or a generous one, where the promise says nothing of time) fails only when the state never
// comes.
package testwait

import (
	"context"
	"testing"
	"time"
)

// Every is how often [Until] looks.
const Every = 10 * time.Millisecond

// Until calls cond until it returns true, every [Every], and fails the test, naming what, if ctx
// ends first. It must be called from the test's goroutine, as t.Fatal must.
func Until(t testing.TB, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(Every)
	defer tick.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v", what, ctx.Err())
		case <-tick.C:
		}
	}
}
