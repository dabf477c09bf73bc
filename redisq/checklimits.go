package redisq

import (
	"context"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
	"github.com/tockwheel/tock/queue"
)

// What Check verifies of the delivery limits (see Limits in the package doc).

// A shardLimits is what one shard holds of the delivery limits: its copy of every topic's limit
// ({T}:lim), and the topics whose bucket ({T}:lb:<topic>) and permits ({T}:lp:<topic>) it holds.
type shardLimits struct {
	limits  map[string]string
	buckets []string
	permits []string
}

// checkShardLimits checks the limit keys of shard s of lay on rdb, the shard's master: each limit
// decodes to one queue.Limit.Check keeps as it is, and a bucket or permits are only of a topic
// with a limit, a bucket holding tok (0 to the burst) and ts, permits lease tokens scored by
// their deadlines. It returns what the shard holds, for checkLimitsAcross.
func checkShardLimits(ctx context.Context, rdb *redis.Client, lay *layout, s int) (shardLimits, error) {
	p := "{" + lay.tags[s] + "}:"
	var sl shardLimits
	lims, err := rdb.HGetAll(ctx, p+"lim").Result()
	if err != nil {
		return sl, err
	}
	sl.limits = lims
	parsed := make(map[string]queue.Limit, len(lims))
	for topic, v := range lims {
		l, err := parseLimit(v)
		if err != nil {
			return sl, broken("limit of %q: %v", topic, err)
		}
		parsed[topic] = l
	}
	for _, kind := range []string{"lb:", "lp:"} {
		keys, err := scanKeys(ctx, rdb, p+kind)
		if err != nil {
			return sl, err
		}
		for _, k := range keys {
			topic := strings.TrimPrefix(k, p+kind)
			l, ok := parsed[topic]
			if !ok {
				return sl, broken("%s of %q, which has no limit", k, topic)
			}
			if kind == "lb:" {
				sl.buckets = append(sl.buckets, topic)
				err = checkBucket(ctx, rdb, k, l)
			} else {
				sl.permits = append(sl.permits, topic)
				err = checkPermits(ctx, rdb, k)
			}
			if err != nil {
				return sl, err
			}
		}
	}
	return sl, nil
}

// parseLimit decodes a limit of {T}:lim, "<rate>,<burst>,<concurrency>", as the scripts write it
// (SetLimit): a limit that queue.Limit.Check keeps as it is, and not the zero limit (which is
// written as no field).
func parseLimit(v string) (queue.Limit, error) {
	f := strings.Split(v, ",")
	if len(f) != 3 {
		return queue.Limit{}, fmt.Errorf("%q: want rate,burst,concurrency", v)
	}
	rate, err1 := strconv.ParseFloat(f[0], 64)
	burst, err2 := strconv.Atoi(f[1])
	conc, err3 := strconv.Atoi(f[2])
	if err1 != nil || err2 != nil || err3 != nil {
		return queue.Limit{}, fmt.Errorf("%q: want rate,burst,concurrency", v)
	}
	l := queue.Limit{Rate: rate, Burst: burst, Concurrency: conc}
	checked, err := l.Check()
	switch {
	case err != nil:
		return l, fmt.Errorf("%q: %v", v, err)
	case checked != l:
		return l, fmt.Errorf("%q: the burst of this rate is %d", v, checked.Burst)
	case l.IsZero():
		return l, fmt.Errorf("%q: no limit", v)
	}
	return l, nil
}

// checkBucket checks the token bucket of a topic limited by l, in key k: tok from 0 to the burst,
// ts a time in milliseconds.
func checkBucket(ctx context.Context, rdb *redis.Client, k string, l queue.Limit) error {
	b, err := rdb.HGetAll(ctx, k).Result()
	if err != nil {
		return err
	}
	tok, err1 := strconv.ParseFloat(b["tok"], 64)
	ts, err2 := strconv.ParseInt(b["ts"], 10, 64)
	switch {
	case len(b) != 2 || err1 != nil || err2 != nil || math.IsNaN(tok):
		return broken("bucket %s is %v: want tok and ts", k, b)
	case tok < 0 || tok > float64(l.Burst) || ts <= 0:
		return broken("bucket %s holds %v tokens at %d ms; the burst is %d", k, tok, ts, l.Burst)
	}
	return nil
}

// checkPermits checks the permits of a topic, in key k: lease tokens scored by their deadlines in
// milliseconds.
func checkPermits(ctx context.Context, rdb *redis.Client, k string) error {
	zs, err := rdb.ZRangeWithScores(ctx, k, 0, -1).Result()
	if err != nil {
		return err
	}
	for _, z := range zs {
		tok, _ := z.Member.(string)
		if n, err := b64.DecodeString(tok); err != nil || len(n) != tokenLen || z.Score <= 0 || z.Score != math.Trunc(z.Score) {
			return broken("permit %q of %s, deadline %v: want a lease token and a time in milliseconds", tok, k, z.Score)
		}
	}
	return nil
}

// checkLimitsAcross checks what the shards hold of the limits together: every shard a copy of
// the same limits (SetLimit writes them shard by shard, so that one that failed halfway, or runs
// now, leaves them differing until it is made again), and each topic's bucket and permits only on
// its home shard. It returns the problems found.
func checkLimitsAcross(lay *layout, per []shardLimits) []string {
	var problems []string
	for s, sl := range per {
		if s > 0 && !maps.Equal(sl.limits, per[0].limits) {
			problems = append(problems, fmt.Sprintf("shard %d: its limits %v are not shard 0's %v: a SetLimit did not reach "+
				"every shard (set the limit again)", s, sl.limits, per[0].limits))
		}
		for _, topic := range slices.Concat(sl.buckets, sl.permits) {
			if home := lay.home(topic); home != s {
				problems = append(problems, fmt.Sprintf("shard %d: holds the bucket or permits of %q, whose home is shard %d", s, topic, home))
			}
		}
	}
	return problems
}
