package redisq

import (
	"context"
	"crypto/rand"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tockwheel/tock"
	"github.com/tockwheel/tock/internal/rediskit"
	"github.com/tockwheel/tock/queue"
	"github.com/tockwheel/tock/redislock"
)

// layoutVersion is the version of the key layout and scripts, kept in the deployment's config.
// Version 2 added the per-topic indexes and counters of the admin operations, and the origin and
// last failure of a message to its record; version 3 the reasons of failures ({T}:why), the
// failures of a consumer's dead letter ('d'), the extend script and the delivery limits; version 4
// added schedules, and made the home shard of a schedule's fire ID the home of the schedule's name
// (see the package doc); version 5 a message's headers in its record (an eleventh field of its
// header, and the headers between its topic and its payload). Open upgrades a deployment of
// version 2, 3 or 4 in place (see upgradable), and refuses one of any other version, as a process
// of an older version then refuses it.
const layoutVersion = "5"

// A Queue is a delay queue in Redis: a [queue.Engine] and a [queue.Reporter]. Open one per process
// and share it; it is safe for concurrent use by any number of goroutines, and any number of
// processes may open the same deployment.
type Queue struct {
	rdb     redis.UniversalClient
	cluster *redis.ClusterClient // rdb, when it is a cluster client
	cfg     config
	lay     *layout
	dep     deploymentState
	wheel   *tock.Wheel
	locker  *redislock.Locker
	owner   string // this process's owner token in the shards' locks and events
	log     *slog.Logger

	clock   clock
	writer  writer
	subs    subscriptions
	shards  []*shard
	sched   []*schedShard
	metrics metrics

	topics struct {
		sync.Mutex
		m map[string]*topicState
	}

	closed atomic.Bool
	done   chan struct{} // closed when Close begins
	wg     sync.WaitGroup

	testHookBatch       func(step string) error // called between the steps of a cross-shard batch; nil outside tests
	testHookNoCandidacy atomic.Bool             // take no free shard ahead of its time (only when late); tests set it
}

var (
	_ queue.Engine   = (*Queue)(nil)
	_ queue.Reporter = (*Queue)(nil)
	_ queue.Admin    = (*Queue)(nil)
)

// Open opens the queue kept in rdb under the prefix of WithPrefix, creating the deployment if it
// does not exist yet. rdb is a *redis.Client (one server, or a Sentinel failover client) or a
// *redis.ClusterClient; other clients are refused with ErrInvalidOption, as is any invalid option.
// Open fails with ErrMismatch when the deployment exists with another shard count, with
// ErrIncompatible when it has another layout version (an older one is not migrated), with an error
// matching queue.ErrUnavailable when Redis cannot be reached or is older than 7.0, and with the
// context's error if ctx ends first. It returns once the Queue is subscribed to every shard's
// events and knows their state. Open panics on a nil rdb.
func Open(ctx context.Context, rdb redis.UniversalClient, opts ...Option) (*Queue, error) {
	if rdb == nil {
		panic("redisq: Open: nil Redis client")
	}
	cfg := defaultConfig()
	shardsGiven := false
	for _, o := range opts {
		if o != nil {
			before := cfg.shards
			o(&cfg)
			if cfg.shards != before {
				shardsGiven = true
			}
		}
	}
	if cfg.err != nil {
		return nil, cfg.err
	}
	q := &Queue{rdb: rdb, cfg: cfg, log: cfg.logger, done: make(chan struct{})}
	q.clock.offset.Store(noOffset)
	switch c := rdb.(type) {
	case *redis.ClusterClient:
		q.cluster = c
		if iv := c.Options().ClusterStateReloadInterval; iv > 10*time.Second {
			q.logger().Warn("redisq: the cluster client reloads the cluster's state every " + iv.String() +
				"; set ClusterOptions.ClusterStateReloadInterval to a few seconds so that a failover is noticed in time")
		}
		if c.Options().MaxRetries > 0 {
			q.logger().Warn("redisq: the cluster client retries commands (ClusterOptions.MaxRetries); " +
				"leave it unset: a write retried by the client after a lost reply, rather than by the engine, can store a Put twice")
		}
	case *redis.Client:
	default:
		return nil, fmt.Errorf("%w: Open: client of type %T; want a *redis.Client or a *redis.ClusterClient", ErrInvalidOption, rdb)
	}
	if err := checkVersion(ctx, rdb); err != nil {
		return nil, err
	}
	if err := q.loadLibrary(ctx); err != nil {
		return nil, err
	}
	shards, v, upgrade, err := q.deployment(ctx, shardsGiven)
	if err != nil {
		return nil, err
	}
	q.lay = newLayout(cfg.prefix, shards)
	q.dep.view.Store(v)
	// Every shard is stamped before Open returns, so that a shard without a stamp always means
	// lost data; a cluster in transition (a failover, CLUSTERDOWN) is waited for.
	unstamped, restamped, err := q.stampShards(ctx, v)
	for delay := 50 * time.Millisecond; err != nil && rediskit.Transient(err); delay = min(2*delay, time.Second) {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("redisq: Open: %w (after %w)", ctx.Err(), unavailable(err))
		case <-time.After(delay):
		}
		if q.cluster != nil && rediskit.Reloads(err) {
			q.cluster.ReloadState(ctx)
		}
		unstamped, restamped, err = q.stampShards(ctx, v)
	}
	if err != nil {
		return nil, fmt.Errorf("redisq: Open: %w", unavailable(err))
	}
	if len(restamped) > 0 {
		q.logger().Error("redisq: shards of the deployment were stamped by a process with an older configuration; they are the current one's now",
			"prefix", cfg.prefix, "shards", restamped)
	}
	if len(unstamped) > 0 && len(unstamped) < shards {
		q.metrics.deploymentLost.Add(1)
		q.logger().Error("redisq: shards of the deployment had lost their data (a restart of their Redis without persistence, or FLUSHALL); "+
			"their messages are gone", "prefix", cfg.prefix, "shards", unstamped)
	}
	if upgrade != "" {
		if err := q.finishUpgrade(ctx, upgrade, v); err != nil {
			return nil, err
		}
	}
	q.wheel = cfg.wheel
	if q.wheel == nil {
		q.wheel = tock.New()
	}
	q.owner = rand.Text()[:16]
	q.locker = redislock.New(rdb, redislock.WithWheel(q.wheel),
		redislock.WithWatchdogTimeout(cfg.ownerLease), redislock.WithLogger(q.logger()))
	q.topics.m = make(map[string]*topicState)
	q.testHookNoCandidacy.Store(cfg.noCandidacy)
	q.metrics.init()
	q.writer.init(q)
	q.shards = make([]*shard, shards)
	q.sched = make([]*schedShard, shards)
	for i := range q.shards {
		q.shards[i] = newShard(q, i)
		q.sched[i] = newSchedShard(q, i)
	}
	if err := q.subs.start(ctx, q); err != nil {
		q.shutdown()
		return nil, err
	}
	return q, nil
}

func (q *Queue) logger() *slog.Logger {
	if q.log == nil {
		return slog.Default()
	}
	return q.log
}

// checkVersion refuses a Redis older than 7.0.
func checkVersion(ctx context.Context, rdb redis.UniversalClient) error {
	info, err := rdb.Info(ctx, "server").Result()
	if err != nil {
		return fmt.Errorf("redisq: Open: %w", unavailable(err))
	}
	v := infoField(info, "redis_version")
	major, _ := strconv.Atoi(strings.SplitN(v, ".", 2)[0])
	if major < 7 {
		return fmt.Errorf("redisq: Open: Redis %s is older than 7.0: %w", v, queue.ErrUnavailable)
	}
	return nil
}

// infoField returns a field of an INFO reply.
func infoField(info, field string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return v
		}
	}
	return ""
}

// loadLibrary loads the function library on every master, so that FCALL finds it and a library
// that Redis cannot compile fails Open.
func (q *Queue) loadLibrary(ctx context.Context) error {
	if err := loadLibrary(ctx, q.rdb); err != nil {
		return fmt.Errorf("redisq: Open: %w", unavailable(err))
	}
	return nil
}

// usable returns ErrClosed after Close, and the refusal of a deployment made anew that this
// process cannot serve (see reconcile).
func (q *Queue) usable() error {
	if q.closed.Load() {
		return fmt.Errorf("redisq: %w", queue.ErrClosed)
	}
	return q.staleErr()
}

// Ready returns nil when every master of the deployment answers a PING and the deployment's
// configuration in Redis is the one this process serves; an error matching queue.ErrUnavailable
// when a master does not answer, or when the deployment was made anew with another shard count
// or layout version (see the package doc, Durability: this process then refuses to serve it, and
// Ready names the cause until it is restarted); and queue.ErrClosed after Close. A configuration
// that Redis lost, or that another process made anew with the same shard count, is written again
// or adopted, as a script that meets a lost shard does, and Ready returns nil.
func (q *Queue) Ready(ctx context.Context) error {
	if err := q.usable(); err != nil {
		return err
	}
	var err error
	if q.cluster != nil {
		err = q.cluster.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
			return c.Ping(ctx).Err()
		})
	} else {
		err = q.rdb.Ping(ctx).Err()
	}
	if err != nil {
		return fmt.Errorf("redisq: ready: %w", unavailable(err))
	}
	if err := q.checkConfig(ctx, true); err != nil {
		if serr := q.staleErr(); serr != nil {
			return serr
		}
		return fmt.Errorf("redisq: ready: %w", err)
	}
	return nil
}

// Close stops the Queue: waiting Receive calls return queue.ErrClosed, and so does every later call.
// It gives up the shards this process owns, so that others take them over at once, and waits for
// the writes in flight. Messages leased through it and not acked are delivered again after their
// visibility timeout. A second Close returns queue.ErrClosed.
func (q *Queue) Close() error {
	if !q.closed.CompareAndSwap(false, true) {
		return fmt.Errorf("redisq: %w", queue.ErrClosed)
	}
	q.shutdown()
	return nil
}

// shutdown stops everything Open started.
func (q *Queue) shutdown() {
	q.closed.Store(true)
	close(q.done)
	for _, s := range q.shards {
		s.stop()
	}
	for _, s := range q.sched {
		s.stop()
	}
	q.subs.stop()
	q.writer.stop()
	q.wg.Wait()
	if q.cfg.wheel == nil && q.wheel != nil {
		q.wheel.Stop()
	}
}

// clock estimates the Redis server's clock from the script replies, which carry it: a reply's
// NOW is the server's millisecond when the script ran, some time between the call's send and the
// reply's arrival, so it bounds the offset from this process's clock on both sides: at least NOW
// − arrival, at most NOW + 1 ms − send. The estimate is the greatest lower bound seen, so that it
// is never ahead of the server's clock (a timer that fires early costs a script call that says
// when to come back) and as close to it as the fastest reply allows; taking each reply's lower
// bound as it came, as before, put it behind by that reply's round trip, and a receiver's timer
// fired that much late (up to 9 ms after a burst of scripts at a quiet moment). A reply whose
// upper bound is below the estimate proves it ahead (the server's clock stepped back, a failover
// to a server whose clock is behind, or drift): the estimate falls to that reply's lower bound.
type clock struct {
	offset atomic.Int64 // microseconds; noOffset until the first reply (Open sets it; 0 reads as 0)
}

// noOffset marks a clock that has observed no reply yet: it reads as this process's clock.
const noOffset = math.MinInt64

// observe takes the clock of a script's reply, redisMs, from a call sent at sent.
func (c *clock) observe(redisMs int64, sent time.Time) {
	lo := redisMs*1000 - time.Now().UnixMicro()
	hi := (redisMs+1)*1000 - sent.UnixMicro()
	for {
		cur := c.offset.Load()
		next := max(cur, lo)
		if cur != noOffset && hi < cur {
			next = lo
		}
		if next == cur || c.offset.CompareAndSwap(cur, next) {
			return
		}
	}
}

// nowMicro returns the estimate of the Redis server's clock, in Unix microseconds.
func (c *clock) nowMicro() int64 {
	off := c.offset.Load()
	if off == noOffset {
		off = 0
	}
	return time.Now().UnixMicro() + off
}

// now returns the estimate of the Redis server's clock, in Unix milliseconds, rounded down.
func (c *clock) now() int64 { return c.nowMicro() / 1000 }

// until returns how long until the Redis server's clock reads ms.
func (c *clock) until(ms int64) time.Duration {
	return max(time.Duration(ms*1000-c.nowMicro())*time.Microsecond, 0)
}

// errClosedWrap is the error of a call interrupted by Close.
var errClosedWrap = fmt.Errorf("redisq: %w", queue.ErrClosed)
