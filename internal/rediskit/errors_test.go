package rediskit

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// reply is an error as Redis replies it.
type reply string

func (e reply) Error() string { return string(e) }
func (reply) RedisError()     {}

// TestClassification is the one answer redislock and redisq give for each error: whether it
// proves the command did not run, whether sending it again may pass, and whether the cluster's
// topology should be reloaded. (They had drifted: redislock took any *net.OpError for transient
// and redisq any error whose text said "connection".)
func TestClassification(t *testing.T) {
	refusedDial := &net.OpError{Op: "dial", Net: "tcp", Addr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 6390},
		Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	reset := &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}
	for _, c := range []struct {
		err                        error
		refused, transient, reload bool
	}{
		{nil, false, false, false},
		{refusedDial, true, true, true},
		{fmt.Errorf("redis: connection pool: failed to dial after 5 attempts: %w", refusedDial), true, true, true},
		{&net.OpError{Op: "dial", Err: context.DeadlineExceeded}, true, true, true}, // a dial timeout
		{syscall.ECONNREFUSED, true, true, true},
		{reset, false, true, true},
		{io.EOF, false, true, true},
		{io.ErrUnexpectedEOF, false, true, true},
		{fmt.Errorf("write: %w", syscall.EPIPE), false, true, true},
		{redis.ErrPoolTimeout, true, true, true},
		{redis.ErrPoolExhausted, true, true, true},
		{errors.New("redis: cluster has no nodes"), true, true, true},
		{errors.New("redis: all ring shards are down"), true, true, true},
		{errors.New("redis: connection is not usable"), false, true, true},
		{reply("CLUSTERDOWN The cluster is down"), true, true, true},
		{reply("TRYAGAIN Multiple keys request during rehashing of slot"), true, true, false},
		{reply("MOVED 3999 127.0.0.1:6381"), true, true, true},
		{fmt.Errorf("redisq: put: %w", reply("MOVED 3999 127.0.0.1:6381")), true, true, true},
		{reply("ASK 3999 127.0.0.1:6381"), true, true, false},
		{reply("READONLY You can't write against a read only replica."), true, true, true},
		{reply("LOADING Redis is loading the dataset in memory"), true, true, false},
		{reply("MASTERDOWN Link with MASTER is down"), true, true, true},
		{reply("NOREPLICAS Not enough good replicas to write."), true, true, false},
		{reply("BUSY Redis is busy running a script."), true, true, false},
		{reply("NOSCRIPT No matching script."), true, true, false},
		{reply("ERR Function not found"), true, true, false},
		{reply("ERR Function not foundation"), false, false, false}, // a reply's words, not its letters
		{reply("OOM command not allowed when used memory > 'maxmemory'."), true, false, false},
		// A WAIT unblocked by a failover (seen under load in redisq's conformance test on a cluster).
		{reply("UNBLOCKED force unblock from blocking operation, instance state changed (master -> replica?)"), false, true, true},
		{reply("WRONGTYPE Operation against a key holding the wrong kind of value"), false, false, false},
		{reply("ERR Error running script"), false, false, false},
		{reply("ERR connection lost in a script's message"), false, false, false}, // a reply, whatever its text
		{reply("MOVEDX not a redirection"), false, false, false},
		{redis.ErrClosed, false, false, false},
		{context.Canceled, false, false, false},
		{context.DeadlineExceeded, false, false, false},
		{errors.New("a connection of the caller's own"), false, false, false},
	} {
		if got := Refused(c.err); got != c.refused {
			t.Errorf("Refused(%v) = %v, want %v", c.err, got, c.refused)
		}
		if got := Transient(c.err); got != c.transient {
			t.Errorf("Transient(%v) = %v, want %v", c.err, got, c.transient)
		}
		if got := Reloads(c.err); got != c.reload {
			t.Errorf("Reloads(%v) = %v, want %v", c.err, got, c.reload)
		}
	}
}

// TestDescribeNamesTheNode dials a port where nothing listens, through go-redis as the engines
// do: the description says which address refused the connection, not "failover or migration in
// progress" as redisq's did for a node of a cluster that was down.
func TestDescribeNamesTheNode(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second})
	defer rdb.Close()
	err = rdb.Ping(context.Background()).Err()
	if err == nil {
		t.Fatal("PING to a closed port succeeded")
	}
	want := "cannot connect to Redis at " + addr + ": connection refused"
	if got := Describe(err); got != want {
		t.Errorf("Describe(%v) = %q, want %q", err, got, want)
	}
	if !Refused(err) || !Transient(err) {
		t.Errorf("a refused connection: Refused %v, Transient %v; want both", Refused(err), Transient(err))
	}
}

func TestDescribe(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string
	}{
		{reply("MOVED 3999 127.0.0.1:6381"), "moved to another node (a failover or a finished migration): 127.0.0.1:6381 (MOVED)"},
		{reply("CLUSTERDOWN The cluster is down"), "the Redis cluster is down"},
		{reply("OOM command not allowed"), "out of memory"},
		{&net.OpError{Op: "read", Net: "tcp", Addr: &net.TCPAddr{IP: net.IPv4(10, 0, 0, 2), Port: 6379},
			Err: os.NewSyscallError("read", syscall.ECONNRESET)}, "the connection to Redis at 10.0.0.2:6379 failed: connection reset by peer"},
		{io.EOF, "Redis closed the connection"},
		{errors.New("something else"), "something else"},
	} {
		if got := Describe(c.err); !strings.Contains(got, c.want) {
			t.Errorf("Describe(%v) = %q, want it to say %q", c.err, got, c.want)
		}
	}
}
