package redisq

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tockwheel/tock/internal/redistest"
	"github.com/tockwheel/tock/queue"
	"github.com/tockwheel/tock/queue/queuetest"
)

// prefixes makes each test's deployment prefix unique, so that tests share servers.
var prefixes atomic.Int64

func newPrefix() string { return fmt.Sprintf("t%d", prefixes.Add(1)) }

// singleClient returns a client of s, closed when the test ends.
func singleClient(t testing.TB, addr string) *redis.Client {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// clusterClient returns a cluster client of c, closed when the test ends, with the settings the
// package doc recommends.
func clusterClient(t testing.TB, addrs []string) *redis.ClusterClient {
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, ClusterStateReloadInterval: time.Second})
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// conformanceOptions are the options queuetest asks for.
func conformanceOptions() []Option {
	return []Option{
		WithMaxAttempts(queuetest.MaxAttempts),
		WithBackoff(queuetest.Backoff, 4*queuetest.Backoff),
		WithMaxPayload(queuetest.MaxPayload),
	}
}

// openQueue opens a queue on rdb under a fresh prefix with opts, closed when the test ends.
func openQueue(t testing.TB, rdb redis.UniversalClient, opts ...Option) *Queue {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	q, err := Open(ctx, rdb, append([]Option{WithPrefix(newPrefix())}, opts...)...)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = q.Close() })
	return q
}

// opener returns a queuetest.Opener of queues on rdb.
func opener(rdb redis.UniversalClient, opts ...Option) queuetest.Opener {
	return func(t *testing.T) queue.Engine {
		return openQueue(t, rdb, append(conformanceOptions(), opts...)...)
	}
}

// startServer starts a redis-server for the test.
func startServer(t testing.TB, args ...string) *redistest.Server {
	t.Helper()
	return redistest.Start(t, args...)
}

// passHook passes dials, commands and pipelines through: a test's go-redis hook embeds it and
// overrides the one it watches.
type passHook struct{}

func (passHook) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (passHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (passHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
