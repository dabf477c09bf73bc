package redislock

import (
	"errors"
	"fmt"
	"net"
	"syscall"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/tockwheel/tock"
)

// redisError is an error as Redis replies it.
type redisError string

func (e redisError) Error() string { return string(e) }
func (redisError) RedisError()     {}

// TestTransient checks what the Locker adds to rediskit.Transient, whose own tests hold the
// classification of go-redis's errors: its errReplicaAppeared passes, its other errors do not.
func TestTransient(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{&net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}, true},
		{redisError("CLUSTERDOWN The cluster is down"), true},
		{redis.ErrClosed, false},
		{ErrSlowReply, false},
		{ErrNotReplicated, false},
		{ErrProtocol, false},
		{fmt.Errorf("schedule on the wheel: %w", tock.ErrStopped), false},
		{errReplicaAppeared, true},
		{fmt.Errorf("acquire: %w", errReplicaAppeared), true},
	} {
		if got := transient(c.err); got != c.want {
			t.Errorf("transient(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

func TestAskTarget(t *testing.T) {
	if addr, ok := askTarget(redisError("ASK 3999 127.0.0.1:6381")); !ok || addr != "127.0.0.1:6381" {
		t.Errorf("askTarget(ASK ...) = %q, %v", addr, ok)
	}
	for _, err := range []error{nil, redisError("MOVED 3999 127.0.0.1:6381"), errors.New("ASK 3999 127.0.0.1:6381"), redisError("ASK")} {
		if addr, ok := askTarget(err); ok {
			t.Errorf("askTarget(%v) = %q, true; want false", err, addr)
		}
	}
}
