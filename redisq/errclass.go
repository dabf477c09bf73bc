package redisq

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/redis/go-redis/v9"
	"github.com/tockwheel/tock/queue"
)

// Redis replies that refuse a command before it runs: the script had no effect, so it may be sent
// again, or elsewhere. Each is reported, when it ends a call, as queue.ErrUnavailable.
var refusals = []string{
	"TRYAGAIN",    // the shard's slot is migrating (see the guard key)
	"ASK",         // the same, asked of the other side
	"MOVED",       // the slot moved: a failover or a finished migration
	"CLUSTERDOWN", // the cluster lost a master and has not failed over yet
	"READONLY",    // the node is a replica now
	"LOADING",     // the node is loading its data after a restart
	"MASTERDOWN",  // a replica lost its master
	"NOREPLICAS",  // min-replicas-to-write is not met
	"OOM",         // maxmemory is reached
	"BUSY",        // another script runs too long
	"NOSCRIPT",    // the script is not loaded (after a restart or a failover)
}

// refused reports whether err is a reply proving the command did not run.
func refused(err error) bool {
	if err == nil {
		return false
	}
	for _, p := range refusals {
		if redis.HasErrorPrefix(err, p) {
			return true
		}
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return true
	}
	return errors.Is(err, syscall.ECONNREFUSED)
}

// transient reports whether err may pass if the command is sent again: a refusal, or a connection
// that failed, after which the command may or may not have run.
func transient(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	if refused(err) && !redis.HasErrorPrefix(err, "OOM") {
		return true
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, redis.ErrClosed) {
		return true
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return true
	}
	return strings.Contains(err.Error(), "connection")
}

// unavailable wraps an error of Redis as queue.ErrUnavailable, saying what it means for the caller;
// context errors and errors that already match are returned as they are.
func unavailable(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded), errors.Is(err, queue.ErrUnavailable):
		return err
	case redis.HasErrorPrefix(err, "OOM"):
		return fmt.Errorf("%w: Redis is out of memory (maxmemory); nothing was written: %v", queue.ErrUnavailable, err)
	case redis.HasErrorPrefix(err, "CLUSTERDOWN"):
		return fmt.Errorf("%w: the Redis cluster is down (a master failed and no replica took over yet): %v", queue.ErrUnavailable, err)
	case redis.HasErrorPrefix(err, "NOREPLICAS"):
		return fmt.Errorf("%w: the Redis master has fewer replicas than min-replicas-to-write; nothing was written: %v", queue.ErrUnavailable, err)
	case refused(err):
		return fmt.Errorf("%w: Redis refused the command (failover or migration in progress); nothing was written: %v", queue.ErrUnavailable, err)
	}
	return fmt.Errorf("%w: %v", queue.ErrUnavailable, err)
}

// reloads reports whether err suggests that the cluster's topology changed, so that the client
// should reload it.
func reloads(err error) bool {
	return err != nil && (redis.HasErrorPrefix(err, "MOVED") || redis.HasErrorPrefix(err, "CLUSTERDOWN") ||
		redis.HasErrorPrefix(err, "READONLY") || redis.HasErrorPrefix(err, "MASTERDOWN") ||
		(transient(err) && !refused(err)) || func() bool {
		var op *net.OpError
		return errors.As(err, &op)
	}())
}
