package redislock

import (
	"context"
	"errors"
	"fmt"
	"io"
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

func TestTransient(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	cases := []struct {
		err  error
		want bool
	}{
		{nil, false},
		{refused, true},
		{fmt.Errorf("redis: connection pool: failed to dial after 5 attempts: %w", refused), true},
		{&net.OpError{Op: "dial", Err: context.DeadlineExceeded}, true}, // a dial timeout
		{io.EOF, true},
		{fmt.Errorf("read: %w", syscall.ECONNRESET), true},
		{redis.ErrPoolTimeout, true},
		{redisError("CLUSTERDOWN The cluster is down"), true},
		{redisError("TRYAGAIN Multiple keys request during rehashing of slot"), true},
		{redisError("MOVED 3999 127.0.0.1:6381"), true},
		{redisError("ASK 3999 127.0.0.1:6381"), true},
		{redisError("READONLY You can't write against a read only replica."), true},
		{redisError("LOADING Redis is loading the dataset in memory"), true},
		{redisError("MASTERDOWN Link with MASTER is down"), true},
		{redisError("NOREPLICAS Not enough good replicas to write."), true},
		{redisError("BUSY Redis is busy running a script."), true},
		{redisError("WRONGTYPE Operation against a key holding the wrong kind of value"), false},
		{redisError("ERR Error running script"), false},
		{redisError("NOSCRIPT No matching script."), false},
		{redis.ErrClosed, false},
		{context.Canceled, false},
		{context.DeadlineExceeded, false},
		{ErrSlowReply, false},
		{ErrNotReplicated, false},
		{ErrProtocol, false},
		{fmt.Errorf("schedule on the wheel: %w", tock.ErrStopped), false},
		{errReplicaAppeared, true},
		{errors.New("redis: all ring shards are down"), true},
	}
	for _, c := range cases {
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
