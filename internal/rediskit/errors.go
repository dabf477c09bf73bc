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

	"github.com/redis/go-redis/v9"
)

// A knownReply is an error reply with which Redis refuses a command before running it, while a
// deployment changes or cannot take the command; or, where ran is set, one that it sends a
// command that was waiting (WAIT) when the deployment changed.
type knownReply struct {
	code      string // the reply's first words
	transient bool   // passes by itself, or once the caller did what the reply calls for
	reload    bool   // the cluster's topology may have changed
	what      string // what happened, for Describe
	ran       bool   // the command, or those before it on its connection, may have run
}

var knownReplies = []knownReply{
	{"TRYAGAIN", true, false, "the key's slot is migrating between nodes", false},
	{"ASK", true, false, "the key's slot is migrating to another node", false},
	{"MOVED", true, true, "the key's slot has moved to another node (a failover or a finished migration)", false},
	{"CLUSTERDOWN", true, true, "the Redis cluster is down: a master failed and no replica has taken over yet", false},
	{"READONLY", true, true, "the node is a replica now (a failover)", false},
	{"MASTERDOWN", true, true, "the replica has lost its master", false},
	{"LOADING", true, false, "Redis is loading its data after a restart", false},
	{"NOREPLICAS", true, false, "the master has fewer replicas than its min-replicas-to-write", false},
	{"BUSY", true, false, "Redis is busy running another script", false},
	// Transient because the callers load the script and send it again (go-redis's Script.Run
	// sends its source).
	{"NOSCRIPT", true, false, "the script is not loaded on the node (after a restart or a failover)", false},
	// Transient for the same reason: the callers load the function library and call again.
	{"ERR Function not found", true, false, "the function library is not loaded on the node (a master restored or flushed without it)", false},
	// Not transient: memory is freed by someone else, if ever.
	{"OOM", false, false, "Redis is out of memory (maxmemory): nothing more can be written", false},
	// A WAIT (or another blocked command) of a master that became a replica: the writes before it
	// on the connection may or may not be kept.
	{"UNBLOCKED", true, true, "the node changed role while the command waited (a failover)", true},
}

// knownReplyOf returns the knownReply err is, and its reply's text.
func knownReplyOf(err error) (knownReply, string, bool) {
	var rerr redis.Error
	if err == nil || !errors.As(err, &rerr) {
		return knownReply{}, "", false
	}
	msg := rerr.Error()
	for _, r := range knownReplies {
		if msg == r.code || strings.HasPrefix(msg, r.code+" ") {
			return r, msg, true
		}
	}
	return knownReply{}, msg, false
}

// isReply reports whether err is an error reply of Redis.
func isReply(err error) bool {
	var rerr redis.Error
	return errors.As(err, &rerr)
}

// notSent are go-redis's own errors for a command it could not send: no connection to send it on.
var notSent = []error{redis.ErrPoolTimeout, redis.ErrPoolExhausted}

// notSentTexts are the messages of go-redis's unexported errors of the same kind, which can only
// be told by their text.
var notSentTexts = []string{
	"redis: cluster has no nodes",
	"redis: all ring shards are down",
	"redis: connection not available",
}

// lostTexts are the messages of go-redis's unexported errors for a connection that failed.
var lostTexts = []string{
	"redis: connection is not usable",
}

// dialFailure returns the failed dial in err's chain, if any.
func dialFailure(err error) (*net.OpError, bool) {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return op, true
	}
	return nil, false
}

func hasText(err error, texts []string) bool {
	msg := err.Error()
	for _, t := range texts {
		if strings.Contains(msg, t) {
			return true
		}
	}
	return false
}

// Refused reports whether err proves that the command did not run: Redis refused it before
// running it (TRYAGAIN, ASK, MOVED, CLUSTERDOWN, READONLY, MASTERDOWN, LOADING, NOREPLICAS, BUSY,
// NOSCRIPT, Function not found, OOM), or it could not be sent (the dial failed, or no connection was free). A command
// whose connection failed after it was sent is not refused, nor a WAIT that a failover unblocked
// (UNBLOCKED): it may or may not have run.
func Refused(err error) bool {
	if err == nil {
		return false
	}
	if r, _, ok := knownReplyOf(err); ok {
		return !r.ran
	}
	if isReply(err) {
		return false
	}
	if _, ok := dialFailure(err); ok || errors.Is(err, syscall.ECONNREFUSED) {
		return true
	}
	for _, e := range notSent {
		if errors.Is(err, e) {
			return true
		}
	}
	return hasText(err, notSentTexts)
}

// Transient reports whether err may pass when the command is sent again: a knownReply that passes as
// the deployment settles (all but OOM; NOSCRIPT and Function not found once the script or library is
// loaded again), a WAIT that a
// failover unblocked (UNBLOCKED), or a connection that failed (refused, reset, closed, timed out, a pool without a free connection), after which
// the command may or may not have run. Other error replies (a script's own error, WRONGTYPE), a
// client closed by its program (redis.ErrClosed) and the caller's context ending are not.
func Transient(err error) bool {
	if err == nil || errors.Is(err, redis.ErrClosed) {
		return false
	}
	if r, _, ok := knownReplyOf(err); ok {
		return r.transient
	}
	if isReply(err) {
		return false
	}
	// A failed dial may wrap the dial timeout's context error: it is still the network's failure.
	var op *net.OpError
	if errors.As(err, &op) {
		return true
	}
	// context.DeadlineExceeded is a net.Error too.
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return true
	}
	for _, e := range []error{io.EOF, io.ErrUnexpectedEOF, syscall.ECONNRESET, syscall.ECONNREFUSED, syscall.EPIPE} {
		if errors.Is(err, e) {
			return true
		}
	}
	for _, e := range notSent {
		if errors.Is(err, e) {
			return true
		}
	}
	return hasText(err, notSentTexts) || hasText(err, lostTexts)
}

// Reloads reports whether err suggests that the cluster's topology changed, so that a cluster
// client should reload it (go-redis does on its own only after a redirection, and every
// ClusterStateReloadInterval): MOVED, CLUSTERDOWN, READONLY, MASTERDOWN, UNBLOCKED, or a
// connection that failed.
func Reloads(err error) bool {
	if r, _, ok := knownReplyOf(err); ok {
		return r.reload
	}
	return !isReply(err) && Transient(err)
}

// Describe says what err means happened, for an error message: which node could not be reached
// and why, or what state of the deployment Redis's knownReply reports. An error it does not know is
// described by its own text.
func Describe(err error) string {
	if err == nil {
		return "no error"
	}
	if r, msg, ok := knownReplyOf(err); ok {
		what := r.what
		if f := strings.Fields(msg); (r.code == "MOVED" || r.code == "ASK") && len(f) == 3 {
			what += ": " + f[2]
		}
		return what + " (" + r.code + ")"
	}
	if op, ok := dialFailure(err); ok {
		return fmt.Sprintf("cannot connect to Redis at %s: %s", opAddr(op), cause(op))
	}
	var op *net.OpError
	if errors.As(err, &op) {
		if op.Timeout() {
			return fmt.Sprintf("no reply from Redis at %s in time (%s)", opAddr(op), cause(op))
		}
		return fmt.Sprintf("the connection to Redis at %s failed: %s", opAddr(op), cause(op))
	}
	switch {
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "Redis closed the connection (a restart, a failover, or its client timeout): " + err.Error()
	case errors.Is(err, redis.ErrPoolTimeout), errors.Is(err, redis.ErrPoolExhausted):
		return "no connection to Redis was free in time (the client's pool is exhausted): " + err.Error()
	case errors.Is(err, redis.ErrClosed):
		return "the Redis client is closed"
	}
	return err.Error()
}

// opAddr is the remote address of a failed network operation.
func opAddr(op *net.OpError) string {
	if op.Addr != nil {
		return op.Addr.String()
	}
	return "an unknown address"
}

// cause is what failed in op, without the system call's name: "connection refused".
func cause(op *net.OpError) string {
	var se *os.SyscallError
	if errors.As(op.Err, &se) {
		return se.Err.Error()
	}
	return op.Err.Error()
}
