package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tockwheel/tock"
	"github.com/tockwheel/tock/delayq"
	"github.com/tockwheel/tock/internal/rediskit"
	"github.com/tockwheel/tock/queue"
	"github.com/tockwheel/tock/redisq"
)

// redisConfig is what the -redis flags set.
type redisConfig struct {
	target         string // -redis: empty for the embedded engine
	prefix         string
	shards         int // 0: the deployment's, or redisq.DefaultShards when tockd creates it
	replicas       int // -1: redisq's default, one replica where the master has one
	replicaTimeout time.Duration
}

// openTimeout bounds the opening of the engine on Redis, so that an unreachable deployment fails
// tockd's start rather than hanging it.
const openTimeout = 30 * time.Second

// pingTimeout bounds the first contact with Redis: a Sentinel client that reaches no Sentinel
// retries until its context ends.
const pingTimeout = 10 * time.Second

// openEngine opens the engine the flags ask for, with its timers on wheel: the embedded delayq
// engine in c.data, or redisq on the Redis deployment of c.redis.target. The returned function
// releases what the engine does not own (the Redis client); call it after closing the engine.
func openEngine(ctx context.Context, c config, log *slog.Logger, wheel *tock.Wheel) (queue.Engine, func(), error) {
	if c.redis.target == "" {
		e, err := openDelayq(c, log, wheel)
		return e, func() {}, err
	}
	return openRedisq(ctx, c, log, wheel)
}

// openDelayq opens the embedded engine, which reopens its directory by itself after a full or
// failing disk stopped it (see reopening).
func openDelayq(c config, log *slog.Logger, wheel *tock.Wheel) (queue.Engine, error) {
	opened := time.Now()
	opts := []delayq.Option{
		delayq.WithMaxPayload(int(c.limits.MaxPayload)),
		delayq.WithMaxAttempts(c.maxAttempts),
		delayq.WithLogger(log),
		delayq.WithWheel(wheel),
	}
	if c.noSync {
		opts = append(opts, delayq.WithNoSync())
	}
	q, err := delayq.Open(c.data, opts...)
	if err != nil {
		return nil, fmt.Errorf("cannot open the queue in %s: %w", c.data, err)
	}
	log.Info("queue open", "engine", "delayq", "data", c.data, "took", time.Since(opened).Round(time.Millisecond))
	return newReopening(q, c.data, func() (*delayq.Queue, error) { return delayq.Open(c.data, opts...) }, log), nil
}

// openRedisq opens the engine on Redis.
func openRedisq(ctx context.Context, c config, log *slog.Logger, wheel *tock.Wheel) (queue.Engine, func(), error) {
	opened := time.Now()
	// go-redis logs to stderr on its own (every failed dial); route it to tockd's log, where the
	// errors that matter arrive anyway through redisq, at debug level.
	redis.SetLogger(redisLog{log})
	rt, err := parseRedisTarget(c.redis.target)
	if err != nil {
		return nil, nil, err
	}
	rdb, kind := rt.Client(), rt.Kind
	opts := []redisq.Option{
		redisq.WithPrefix(c.redis.prefix),
		redisq.WithMaxPayload(int(c.limits.MaxPayload)),
		redisq.WithMaxAttempts(c.maxAttempts),
		redisq.WithLogger(log),
		redisq.WithWheel(wheel),
	}
	if c.redis.shards > 0 {
		opts = append(opts, redisq.WithShards(c.redis.shards))
	}
	if c.redis.replicas >= 0 {
		opts = append(opts, redisq.WithReplicaWait(c.redis.replicas, c.redis.replicaTimeout))
	}
	octx, cancel := context.WithTimeout(ctx, openTimeout)
	defer cancel()
	where := redactedTarget(c.redis.target)
	// redisq would report an unreachable Redis as a refusal; say plainly that it is unreachable.
	pctx, pcancel := context.WithTimeout(octx, pingTimeout)
	defer pcancel()
	if err := rdb.Ping(pctx).Err(); err != nil && !strings.Contains(err.Error(), "cluster support disabled") {
		_ = rdb.Close()
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			return nil, nil, fmt.Errorf("cannot reach Redis at %s: no answer within %v", where, pingTimeout)
		}
		return nil, nil, fmt.Errorf("cannot reach Redis at %s: %w", where, err)
	}
	q, err := redisq.Open(octx, rdb, opts...)
	if err != nil {
		_ = rdb.Close()
		switch {
		case errors.Is(err, redisq.ErrMismatch) && c.redis.shards > 0:
			return nil, nil, fmt.Errorf("cannot open the queue on Redis %s: %w (leave out -redis-shards to take the deployment's)", where, err)
		case kind == "cluster" && strings.Contains(err.Error(), "cluster support disabled"):
			return nil, nil, fmt.Errorf("cannot open the queue on Redis %s: %w (host:port addresses name a Cluster; for one server give redis://host:port)", where, err)
		}
		return nil, nil, fmt.Errorf("cannot open the queue on Redis %s: %w", where, err)
	}
	log.Info("queue open", "engine", "redisq", "redis", redactedTarget(c.redis.target), "kind", kind,
		"prefix", c.redis.prefix, "took", time.Since(opened).Round(time.Millisecond))
	return q, func() { _ = rdb.Close() }, nil
}

// parseRedisTarget parses -redis (see rediskit.ParseTarget).
func parseRedisTarget(target string) (rediskit.Target, error) {
	rt, err := rediskit.ParseTarget(target)
	if err != nil {
		return rt, fmt.Errorf("tockd: -redis: %w", err)
	}
	return rt, nil
}

// redactedTarget is target, for logs, with any password in it replaced by xxxxx.
func redactedTarget(target string) string { return rediskit.Redact(target) }

// checkEngineFlags refuses flags that do not apply to the engine the flags choose, and values
// out of the engine's bounds, so that a mistake is a usage error rather than a surprise.
func checkEngineFlags(fs *flag.FlagSet, c *config) error {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	c.redis.target = strings.TrimSpace(c.redis.target)
	if c.redis.target == "" {
		for _, name := range []string{"redis-prefix", "redis-shards", "redis-replicas", "redis-replica-timeout"} {
			if set[name] {
				return fmt.Errorf("tockd: -%s needs -redis", name)
			}
		}
		return nil
	}
	for _, name := range []string{"data", "nosync"} {
		if set[name] {
			return fmt.Errorf("tockd: -%s is for the embedded engine; with -redis the queue is kept in Redis", name)
		}
	}
	if _, err := parseRedisTarget(c.redis.target); err != nil {
		return err
	}
	switch r := c.redis; {
	case r.shards < 0 || r.shards > redisq.MaxShards:
		return fmt.Errorf("tockd: -redis-shards %d is outside 0 to %d", r.shards, redisq.MaxShards)
	case r.replicas < -1:
		return fmt.Errorf("tockd: -redis-replicas %d: want -1 (one where the master has replicas), 0 or more", r.replicas)
	case set["redis-replica-timeout"] && r.replicas < 1:
		return errors.New("tockd: -redis-replica-timeout applies to -redis-replicas 1 or more")
	case r.replicas > 0 && r.replicaTimeout < time.Millisecond:
		return fmt.Errorf("tockd: -redis-replica-timeout %v is below 1ms", r.replicaTimeout)
	}
	return nil
}

// redisLog is go-redis's internal logger writing to tockd's log at debug level.
type redisLog struct{ log *slog.Logger }

func (l redisLog) Printf(ctx context.Context, format string, v ...any) {
	l.log.DebugContext(ctx, "redis client: "+fmt.Sprintf(format, v...))
}
