package redislock

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tockwheel/tock/internal/rediskit"
)

// nodeFor returns the client of the Redis master that serves key, on which a script and the WAIT
// after it can share a connection: the Locker's client itself for one server or Sentinel, and the
// ClusterClient's client of the key's master for a cluster (by the slot map the ClusterClient
// holds, which may be stale: the master then answers MOVED, or cannot be reached). It returns nil
// for a Ring, whose shards it cannot address: commands then go through the Ring.
func (l *Locker) nodeFor(ctx context.Context, key string) (*redis.Client, error) {
	switch c := l.rdb.(type) {
	case *redis.Client:
		return c, nil
	case *redis.ClusterClient:
		return c.MasterForKey(ctx, key)
	default:
		return nil, nil
	}
}

// masterAt returns the ClusterClient's client of the master at addr, as named by an ASK
// redirection.
func (l *Locker) masterAt(ctx context.Context, addr string) (*redis.Client, error) {
	cc, ok := l.rdb.(*redis.ClusterClient)
	if !ok {
		return nil, errors.New("redislock: redirection from a server outside a cluster")
	}
	var mu sync.Mutex
	var found *redis.Client
	err := cc.ForEachMaster(ctx, func(_ context.Context, c *redis.Client) error {
		if c.Options().Addr == addr {
			mu.Lock()
			found = c
			mu.Unlock()
		}
		return nil
	})
	if err == nil && found == nil {
		err = errors.New("redislock: no master at " + addr)
	}
	return found, err
}

// askTarget returns the address of an ASK redirection, which a master sends for a key of a slot it
// is migrating when the key has moved already.
func askTarget(err error) (string, bool) {
	var rerr redis.Error
	if !errors.As(err, &rerr) {
		return "", false
	}
	f := strings.Fields(rerr.Error())
	if len(f) != 3 || f[0] != "ASK" {
		return "", false
	}
	return f[2], true
}

// transient reports whether err may pass by itself, as rediskit.Transient says (a connection that
// failed, a deployment in transition), or is the package's own errReplicaAppeared. A script's own
// error, a closed client, the caller's context ending and the package's other errors are not.
func transient(err error) bool {
	return rediskit.Transient(err) || errors.Is(err, errReplicaAppeared)
}

// reloadAfter makes a ClusterClient reload its slot map after err, if err suggests the topology
// changed (rediskit.Reloads: a connection that failed, MOVED, CLUSTERDOWN, ...): go-redis
// reloads it by itself only after a redirection or every ClusterStateReloadInterval (60 s by
// default), so without this a Locker would go on calling a master that died, or that was demoted,
// until long after a replica took over. The reload runs in the background.
func (l *Locker) reloadAfter(err error) {
	if cc, ok := l.rdb.(*redis.ClusterClient); ok && rediskit.Reloads(err) {
		cc.ReloadState(context.Background())
	}
}

// Backoff of retries after transient errors: a failover takes seconds, a lost connection
// milliseconds.
const (
	minRetryDelay = 10 * time.Millisecond
	maxRetryDelay = 500 * time.Millisecond
)

// retry calls op until it returns nil or an error that is not transient, until ctx ends, or until
// budget has passed since the first call; it returns op's last error, or ctx's error wrapped with
// it. After each transient error it has a ClusterClient reload its slot map (see reloadAfter) and
// waits before calling op again, minRetryDelay at first and twice as long each time up to
// maxRetryDelay, never past the budget.
func (l *Locker) retry(ctx context.Context, budget time.Duration, op func() error) error {
	end := time.Now().Add(budget)
	delay := minRetryDelay
	for {
		err := op()
		if !transient(err) {
			return err
		}
		l.reloadAfter(err)
		left := time.Until(end)
		if left <= 0 {
			return err
		}
		t := time.NewTimer(min(delay, left))
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return errors.Join(ctx.Err(), err)
		}
		delay = min(2*delay, maxRetryDelay)
	}
}
