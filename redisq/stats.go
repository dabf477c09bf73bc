package redisq

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tockwheel/tock/queue"
)

// Stats reports the deployment's counts, added over every shard's counters with one read-only
// script per shard, sent in one pipeline (one per master on a cluster). Scheduled counts the
// messages promoted ahead of their due time too. Lateness is measured by the scripts that make
// messages due, for the whole deployment (see Timing in the package doc): Count and Sum since the
// deployment was created, P50, P99 and Max over the messages made due since the oldest of this
// process's Stats calls of the last minute, each to the upper bound of its histogram bucket.
func (q *Queue) Stats(ctx context.Context) (queue.Stats, error) {
	if err := q.usable(); err != nil {
		return queue.Stats{}, err
	}
	replies, err := q.eachShard(ctx, statsScript, func(int) []any { return nil })
	if err != nil {
		return queue.Stats{}, fmt.Errorf("redisq: stats: %w", unavailable(err))
	}
	var st queue.Stats
	var lat latenessTotals
	lat.buckets = make([]uint64, len(latenessBounds)+1)
	const head = 8 // sched, ready, leased, early, NOW, n, sum, max
	for _, v := range replies {
		if len(v) != head+len(lat.buckets) {
			return queue.Stats{}, fmt.Errorf("%w: stats script replied %v", ErrProtocol, v)
		}
		n := make([]int64, len(v))
		for i := range n {
			n[i], _ = v[i].(int64)
		}
		st.Scheduled += n[0] + n[3]
		st.Due += n[1] - n[3]
		st.Leased += n[2]
		lat.add(n[5], n[6], n[7], n[head:])
	}
	st.Lateness = q.metrics.lateness.summary(time.Now(), lat)
	return st, nil
}

// DueCounts returns how many messages wait for their due time in each of n steps of step from
// from; see [queue.Engine.DueCounts]. It counts per second: the wheel's seconds (as each shard's
// {T}:sc counts them) and the messages promoted to their ready sets ahead of their due time (a ZCOUNT
// per second of each topic that has some, a second or two ahead, or more for large seconds), each
// in the step where its due second begins.
func (q *Queue) DueCounts(ctx context.Context, from time.Time, step time.Duration, n int) ([]int, error) {
	if err := q.usable(); err != nil {
		return nil, err
	}
	if n <= 0 || step <= 0 {
		return nil, nil
	}
	start := from.Unix()
	if from.Nanosecond() > 0 {
		start++ // a second that begins before from is not in any step
	}
	end := from.Add(step * time.Duration(n))
	stop := end.Unix()
	if end.Nanosecond() > 0 {
		stop++
	}
	replies, err := q.eachShard(ctx, dueScript, func(int) []any { return []any{start, stop} })
	if err != nil {
		return nil, fmt.Errorf("redisq: due counts: %w", unavailable(err))
	}
	counts := make([]int, n)
	for _, v := range replies {
		for i := 0; i+1 < len(v); i += 2 {
			sec, _ := v[i].(int64)
			c, _ := v[i+1].(int64)
			k := int(time.Unix(sec, 0).Sub(from) / step)
			if k >= 0 && k < n {
				counts[k] += int(c)
			}
		}
	}
	return counts, nil
}

// eachShard runs a read-only script on every shard in one pipeline and returns the replies.
func (q *Queue) eachShard(ctx context.Context, s *script, args func(shard int) []any) ([][]any, error) {
	all := make([]int, q.lay.shards())
	for i := range all {
		all[i] = i
	}
	return q.onShards(ctx, s, all, args)
}

// onShards runs a read-only script on the given shards in one pipeline (one per master on a
// cluster) and returns the replies, in the order of shards. A shard's refusal of the stamp
// reconciles the deployment, and the script runs once more.
func (q *Queue) onShards(ctx context.Context, s *script, shards []int, args func(shard int) []any) ([][]any, error) {
	out, err := q.onShardsOnce(ctx, s, shards, args)
	if again, err := q.afterStampErr(ctx, err); !again {
		return out, err
	}
	return q.onShardsOnce(ctx, s, shards, args)
}

func (q *Queue) onShardsOnce(ctx context.Context, s *script, shards []int, args func(shard int) []any) ([][]any, error) {
	start := time.Now()
	cmds := q.pipeScripts(ctx, s, shards, func(i int) []any { return q.withStamp(args(shards[i])...) })
	q.metrics.observeScript(time.Since(start))
	out := make([][]any, len(shards))
	for i, c := range cmds {
		v, err := c.Slice()
		if err != nil {
			return nil, err
		}
		out[i] = v
	}
	return out, nil
}

// pipeScripts runs script s on each shard of shards, with the arguments args(i) for shards[i], in
// one pipeline (one per master on a cluster), and returns each script's command, which carries
// its reply or its own error. When a node has not the library (a restarted, promoted or flushed
// master), the library is loaded and the scripts it refused are sent again once.
func (q *Queue) pipeScripts(ctx context.Context, s *script, shards []int, args func(i int) []any) []*redis.Cmd {
	cmds := make([]*redis.Cmd, len(shards))
	run := func(which []int) {
		_, _ = q.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, i := range which {
				cmds[i] = s.call(ctx, p, q.lay.keys(shards[i]), args(i)...)
			}
			return nil
		}) // each command carries its own error
	}
	all := make([]int, len(shards))
	for i := range all {
		all[i] = i
	}
	run(all)
	var again []int
	for i, c := range cmds {
		if notLoaded(c.Err()) {
			again = append(again, i)
		}
	}
	if len(again) > 0 && loadLibrary(ctx, q.rdb) == nil {
		run(again)
	}
	return cmds
}

// metrics are this process's measurements, reported by Metrics.
type metrics struct {
	retries             atomic.Uint64 // grouped writes sent again
	replicaWaitFailures atomic.Uint64 // WAITs that returned fewer replicas than asked
	reconnects          atomic.Uint64 // subscriptions lost
	reclaims            atomic.Uint64 // receive scripts whose reply was lost, their leases asked for
	rechecks            atomic.Uint64 // subscriptions made again, and their shards re-read
	pings               atomic.Uint64
	events              atomic.Uint64
	peeks               atomic.Uint64
	ticks               atomic.Uint64
	fallbackTicks       atomic.Uint64 // ticks in an absent owner's place
	fenced              atomic.Uint64 // ticks refused for a stale fencing token
	acquisitions        atomic.Uint64
	owned               atomic.Int64
	promoted            atomic.Uint64
	deploymentLost      atomic.Uint64 // the configuration or shards found gone from Redis
	deploymentAdopted   atomic.Uint64 // configurations made anew by another process, adopted

	scripts  histogram
	lateness latenessWindow
}

func (m *metrics) init() {
	m.scripts.bounds = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1}
	m.scripts.counts = make([]uint64, len(m.scripts.bounds))
}

func (m *metrics) observeScript(d time.Duration) { m.scripts.observe(d.Seconds()) }

// histogram is a Prometheus-shaped histogram.
type histogram struct {
	mu     sync.Mutex
	bounds []float64
	counts []uint64 // not cumulative
	count  uint64
	sum    float64
}

func (h *histogram) observe(v float64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.count++
	h.sum += v
	for i, b := range h.bounds {
		if v <= b {
			h.counts[i]++
			break
		}
	}
}

func (h *histogram) metric(name, help string) queue.Metric {
	h.mu.Lock()
	defer h.mu.Unlock()
	m := queue.Metric{Name: name, Help: help, Kind: queue.Histogram, Count: h.count, Sum: h.sum}
	var c uint64
	for i, b := range h.bounds {
		c += h.counts[i]
		m.Buckets = append(m.Buckets, queue.Bucket{UpperBound: b, Count: c})
	}
	return m
}

// Metrics reports this process's measurements of the engine, for /metrics: script round trips,
// subscription losses and re-reads, housekeeping ticks (as owner and in an absent owner's place),
// the shards it owns, fencing refusals, grouped writes retried, replica waits that failed, and
// what it found of a deployment Redis forgot (see [Queue.Ready]).
func (q *Queue) Metrics(ctx context.Context) ([]queue.Metric, error) {
	if q.closed.Load() {
		return nil, errClosedWrap
	}
	m := &q.metrics
	counter := func(name, help string, v uint64) queue.Metric {
		return queue.Metric{Name: name, Help: help, Kind: queue.Counter, Value: float64(v)}
	}
	return []queue.Metric{
		m.scripts.metric("redis_script_duration_seconds", "Round trips of the engine's scripts and pipelines to Redis."),
		counter("redis_write_retries_total", "Grouped writes sent again after a refusal or a connection failure.", m.retries.Load()),
		counter("redis_replica_wait_failures_total", "Grouped writes that fewer replicas than required confirmed in time.", m.replicaWaitFailures.Load()),
		counter("redis_pubsub_reconnects_total", "Event subscriptions lost (connection failed, silent, or slot moved).", m.reconnects.Load()),
		counter("redis_receive_reclaims_total", "Receive scripts whose reply was lost (the connection failed after the script was sent), "+
			"whose leases were asked for again.", m.reclaims.Load()),
		counter("redis_rechecks_total", "Event subscriptions made again, after which their shards were re-read.", m.rechecks.Load()),
		counter("redis_pubsub_pings_total", "Pings of quiet event subscriptions.", m.pings.Load()),
		counter("redis_events_total", "Shard events received.", m.events.Load()),
		counter("redis_ticks_total", "Housekeeping ticks run by this process.", m.ticks.Load()),
		counter("redis_fallback_ticks_total", "Housekeeping ticks run in the place of an owner that was late.", m.fallbackTicks.Load()),
		counter("redis_fenced_ticks_total", "Ticks refused because this process's fencing token was stale.", m.fenced.Load()),
		counter("redis_shard_acquisitions_total", "Shards this process took ownership of.", m.acquisitions.Load()),
		counter("redis_promoted_total", "Messages this process promoted from the wheel to the ready sets.", m.promoted.Load()),
		{Name: "redis_owned_shards", Help: "Shards whose housekeeping this process owns.", Kind: queue.Gauge, Value: float64(m.owned.Load())},
		counter("redis_deployment_lost_total", "Times this process found the deployment's configuration, or shards' data, gone from Redis "+
			"(a restart without persistence, FLUSHALL) and wrote them again.", m.deploymentLost.Load()),
		counter("redis_deployment_adopted_total", "Configurations of the deployment made anew by another process that this process adopted.",
			m.deploymentAdopted.Load()),
		{Name: "redis_deployment_stale", Help: "1 while this process refuses to serve a deployment made anew with another shard count or layout " +
			"(restart it), else 0.", Kind: queue.Gauge, Value: float64(boolInt(q.staleErr() != nil))},
	}, nil
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
