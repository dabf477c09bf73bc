package redislock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// acquire runs the acquire script until Redis answers, retrying transient errors (a connection
// lost, a failover or resharding in progress) for up to the lease. It returns the Lock when
// acquired, and otherwise the holder's remaining time to live (negative if the key has no expiry).
//
// A retry uses the same hold field, which the script counts once, and the lease of the Lock
// returned is counted from the start of the attempt that was answered: whichever attempt reached
// Redis first, the one answered set the lease to at least lease from when it ran.
func (l *Locker) acquire(ctx context.Context, name string, c *lockConfig) (*Lock, time.Duration, error) {
	lease := l.timeout
	if c.lease > 0 {
		lease = c.lease
	}
	var lk *Lock
	var ttl time.Duration
	err := l.retry(ctx, lease, func() error {
		var err error
		lk, ttl, err = l.acquireOnce(ctx, name, c, lease)
		return err
	})
	if err != nil {
		return nil, 0, fmt.Errorf("redislock: lock %q: %w", name, err)
	}
	return lk, ttl, nil
}

// acquireOnce is one attempt of acquire.
func (l *Locker) acquireOnce(ctx context.Context, name string, c *lockConfig, lease time.Duration) (*Lock, time.Duration, error) {
	key := lockKey(name)
	start := time.Now()
	r, err := l.runAcquire(ctx, []string{key, fenceKey(name)}, c.owner, c.hold, millis(lease))
	if err != nil {
		return nil, 0, err
	}
	if !r.acquired {
		if r.n < 0 {
			return nil, -1, nil
		}
		return nil, time.Duration(r.n) * time.Millisecond, nil
	}
	lk := &Lock{
		l:      l,
		name:   name,
		key:    key,
		owner:  c.owner,
		hold:   c.hold,
		token:  r.n,
		lost:   make(chan struct{}),
		unlock: make(chan struct{}, 1),
	}
	if r.waited && r.acked == 0 {
		// A failover now would lose the acquisition, and with it the lock.
		l.release(ctx, lk, lease)
		return nil, 0, fmt.Errorf("%w: none of %d acknowledged it within %v", ErrNotReplicated, r.replicas, l.replicaWait)
	}
	// The lease was set when the script ran, after start: counting from start errs on the safe side.
	deadline := start.Add(lease)
	lostAt := deadline.Add(-lostMargin(lease))
	if took := time.Since(start); !start.Add(took).Before(lostAt) {
		// A Lock returned now would be lost already, while Redis holds the key with a lease
		// that began when the script ran.
		l.release(ctx, lk, lease)
		return nil, 0, fmt.Errorf("%w: reply after %v for a lease of %v", ErrSlowReply, took, lease)
	}
	if c.lease > 0 {
		err = lk.expireAt(lostAt)
	} else {
		err = l.dog.add(lk, deadline)
	}
	if err != nil {
		// The lock cannot be kept, so do not keep it.
		l.release(ctx, lk, lease)
		return nil, 0, fmt.Errorf("schedule on the wheel: %w", err)
	}
	return lk, 0, nil
}

// acquireReply is what one run of the acquire script, and the WAIT after it, told.
type acquireReply struct {
	acquired bool
	n        int64 // the token if acquired, and otherwise the holder's time to live in ms
	replicas int   // replicas connected to the master and in sync when the script ran
	waited   bool  // the Locker waited for a replica to acknowledge the acquisition
	acked    int64 // how many did, when waited
}

// runAcquire runs the acquire script on the master that serves keys and, if it was acquired and
// the master has replicas, waits for one of them to acknowledge it (unless WithReplicaWait(0)).
//
// WAIT covers the writes made on its own connection, so the script and the WAIT are sent as one
// pipeline to that master, which go-redis sends on one connection. Whether to send WAIT is decided
// before the reply says how many replicas the master has: by what the last reply of that master
// said, or, the first time, by asking it (INFO). If the reply shows a replica that was not known,
// the acquisition cannot be confirmed and counts as a transient failure: the retry waits. An ASK
// redirection (the lock's slot is being migrated and its keys have moved) is followed to the master
// that imports them. With a Ring there is no such master to address, and so no waiting.
func (l *Locker) runAcquire(ctx context.Context, keys []string, args ...any) (acquireReply, error) {
	var r acquireReply
	node, err := l.nodeFor(ctx, keys[0])
	if err != nil {
		return r, err
	}
	if node == nil {
		v, err := acquireScript.Run(ctx, l.rdb, keys, args...).Result()
		if err == nil {
			r.acquired, r.n, r.replicas, err = parseAcquire(v)
		}
		return r, err
	}
	wait, err := l.waitOn(ctx, node)
	if err != nil {
		return r, err
	}
	var v any
	var acked *redis.Cmd
	if wait {
		v, acked, err = l.sendAcquire(ctx, node, keys, args, false, false, true)
		if isNoScript(err) {
			v, acked, err = l.sendAcquire(ctx, node, keys, args, true, false, true)
		}
	} else {
		v, err = acquireScript.Run(ctx, node, keys, args...).Result()
	}
	if addr, ok := askTarget(err); ok {
		if node, err = l.masterAt(ctx, addr); err != nil {
			return r, err
		}
		if wait, err = l.waitOn(ctx, node); err != nil {
			return r, err
		}
		v, acked, err = l.sendAcquire(ctx, node, keys, args, true, true, wait)
	}
	if err != nil {
		return r, err
	}
	if r.acquired, r.n, r.replicas, err = parseAcquire(v); err != nil {
		return r, err
	}
	l.dog.noteReplicas(node, r.replicas)
	if !r.acquired || r.replicas == 0 || l.replicaWait == 0 {
		return r, nil
	}
	if !wait {
		return r, errReplicaAppeared
	}
	r.waited = true
	r.acked, err = acked.Int64()
	return r, err
}

// waitOn reports whether an acquisition on node is to be followed by WAIT.
func (l *Locker) waitOn(ctx context.Context, node *redis.Client) (bool, error) {
	if l.replicaWait == 0 {
		return false, nil
	}
	n, err := l.dog.replicasOf(ctx, node)
	return n > 0, err
}

// errReplicaAppeared fails an acquisition made without WAIT on a master that turned out to have a
// replica. It is transient: the retry, knowing of the replica, waits for it.
var errReplicaAppeared = errors.New("redislock: the master has a replica it did not have before")

// sendAcquire sends the acquire script, as EVALSHA or (eval) EVAL, preceded by ASKING if asking,
// and followed by a WAIT for one replica if wait, in one pipeline on node.
func (l *Locker) sendAcquire(ctx context.Context, node *redis.Client, keys []string, args []any, eval, asking, wait bool) (any, *redis.Cmd, error) {
	var script, acked *redis.Cmd
	_, _ = node.Pipelined(ctx, func(p redis.Pipeliner) error {
		if asking {
			p.Do(ctx, "ASKING")
		}
		if eval {
			script = acquireScript.Eval(ctx, p, keys, args...)
		} else {
			script = acquireScript.EvalSha(ctx, p, keys, args...)
		}
		if wait {
			// The client's ReadTimeout, not replicaWait, bounds a pipeline's reads: it must be
			// longer.
			acked = p.Do(ctx, "WAIT", 1, l.replicaWait.Milliseconds())
		}
		return nil
	})
	v, err := script.Result()
	if err == nil && acked != nil {
		err = acked.Err()
	}
	return v, acked, err
}

// release removes the hold of an acquisition that is not returned to the caller, retrying
// transient errors for up to lease. Should it fail, the acquisition frees itself when its lease
// ends.
func (l *Locker) release(ctx context.Context, lk *Lock, lease time.Duration) {
	ctx = context.WithoutCancel(ctx)
	_ = l.retry(ctx, lease, func() error {
		return releaseScript.Run(ctx, l.rdb, lk.releaseKeys(), lk.releaseArgs()...).Err()
	})
}

// releaseKeys and releaseArgs are the KEYS and ARGV of the release script for lk.
func (lk *Lock) releaseKeys() []string { return []string{lk.key, fenceKey(lk.name)} }
func (lk *Lock) releaseArgs() []any {
	return []any{lk.token, lk.hold, channelName(lk.name), lk.owner}
}
