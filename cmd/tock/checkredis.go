package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/tockwheel/tock/internal/rediskit"
	"github.com/tockwheel/tock/redisq"
)

// checkRedisFlags are the flags of tock check -redis.
type checkRedisFlags struct {
	target, prefix *string
}

func addCheckRedisFlags(fs *flag.FlagSet) checkRedisFlags {
	return checkRedisFlags{
		target: fs.String("redis", "", "verify the deployment in the Redis at this `URL`, given as to tockd -redis, instead of a directory"),
		prefix: fs.String("redis-prefix", redisq.DefaultPrefix, "with -redis: the deployment's `name`, the prefix of its keys"),
	}
}

// given reports whether fs set a flag of f.
func (f checkRedisFlags) given(fs *flag.FlagSet) bool {
	set := false
	fs.Visit(func(fl *flag.Flag) { set = set || fl.Name == "redis" || fl.Name == "redis-prefix" })
	return set
}

// checkRedisTimeout bounds tock check -redis: a deployment of millions of messages takes seconds.
const checkRedisTimeout = 10 * time.Minute

// checkRedis verifies a deployment of package redisq with redisq.Check: each broken invariant,
// then a line of counts; exit 1 when there is a problem or Redis cannot be read.
func checkRedis(ctx context.Context, fs *flag.FlagSet, f checkRedisFlags, stdout, stderr io.Writer) int {
	if fs.NArg() != 0 || *f.target == "" {
		fs.Usage()
		return exitUsage
	}
	rt, err := rediskit.ParseTarget(*f.target)
	if err != nil {
		fmt.Fprintf(stderr, "tock check: -redis %v\n", err)
		return exitUsage
	}
	rdb := rt.Client()
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(ctx, checkRedisTimeout)
	defer cancel()
	where := rediskit.Redact(*f.target)
	rep, err := redisq.Check(ctx, rdb, *f.prefix)
	if err != nil {
		fmt.Fprintf(stderr, "tock check: %s: %v\n", where, err)
		if errors.Is(err, redisq.ErrNotFound) {
			fmt.Fprintln(stderr, "tock check: name the deployment's prefix with -redis-prefix (tockd's -redis-prefix)")
		}
		return exitFailed
	}
	for _, p := range rep.Problems {
		fmt.Fprintf(stdout, "broken: %s\n", p)
	}
	verdict := "ok"
	if len(rep.Problems) > 0 {
		verdict = fmt.Sprintf("%d %s with problems", len(rep.Problems), plural(len(rep.Problems), "shard", "shards"))
	}
	fmt.Fprintf(stdout, "%s prefix %q: %s; %d %s, %d %s\n", where, rep.Prefix, verdict,
		rep.Shards, plural(rep.Shards, "shard", "shards"), rep.Messages, plural(rep.Messages, "message", "messages"))
	if len(rep.Problems) > 0 {
		return exitFailed
	}
	return exitOK
}
