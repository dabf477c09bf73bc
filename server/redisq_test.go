package server

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tockwheel/tock/redisq"
)

// redisPrefixes makes each test's redisq deployment its own.
var redisPrefixes atomic.Int64

func newRedisPrefix() string { return fmt.Sprintf("server%d", redisPrefixes.Add(1)) }

// openRedisq opens a redisq queue on the redis-server at addr with opts
// (under a prefix of its own unless opts name one). The test closes its
// client when it ends; closing the queue is the caller's.
func openRedisq(t testing.TB, addr string, opts ...redisq.Option) *redisq.Queue {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { rdb.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	q, err := redisq.Open(ctx, rdb, append([]redisq.Option{redisq.WithPrefix(newRedisPrefix())}, opts...)...)
	if err != nil {
		t.Fatalf("redisq.Open: %v", err)
	}
	return q
}
