// Package testlong tells tests whether the suite runs in long mode, the mode that also runs soaks
// and large-scale runs (a day of disk use, a million messages, failover loops).
//
// `go test ./...` runs the suite in a few minutes on a 2-core machine; a test too long for that
// either runs a smaller version of itself by default or skips, and runs whole in long mode. Long
// mode is on when the environment variable TOCK_LONG is 1 (or true); .ci/run sets it, so CI runs
// every test, under the race detector:
//
//	TOCK_LONG=1 go test ./...
//
// A test that runs only in long mode begins with [Skip]; one that grows in long mode picks its size
// with [Pick]. The -short flag is independent of long mode: it trims the default run further.
package testlong

import (
	"fmt"
	"os"
	"strconv"
	"testing"
)

// Env is the environment variable that turns long mode on.
const Env = "TOCK_LONG"

// Enabled reports whether long mode is on: TOCK_LONG is 1 or true (any value [strconv.ParseBool]
// takes as true). It is off when TOCK_LONG is unset, empty, 0 or false. Any other value is a mistake
// that would silently run the short suite, so Enabled panics naming the variable and the value.
func Enabled() bool {
	v, ok := os.LookupEnv(Env)
	if !ok || v == "" {
		return false
	}
	on, err := strconv.ParseBool(v)
	if err != nil {
		panic(fmt.Sprintf("testlong: %s=%q: want 1 (long mode) or 0", Env, v))
	}
	return on
}

// Skip skips the test unless long mode is on, with a message that names the variable that runs it.
// Like [testing.T.Skip], it must be called from the test's goroutine.
func Skip(t testing.TB) {
	t.Helper()
	if !Enabled() {
		t.Skipf("long test: runs with %s=1 (as .ci/run does)", Env)
	}
}

// Pick returns long in long mode and normal otherwise: the size of a test that runs a smaller version
// of itself by default (steps := testlong.Pick(300, 3000)).
func Pick[T any](normal, long T) T {
	if Enabled() {
		return long
	}
	return normal
}
