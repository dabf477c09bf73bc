package redisq

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tockwheel/tock"
	"github.com/tockwheel/tock/internal/rediskit"
	"github.com/tockwheel/tock/queue"
)

// Head values of a topic in a shard, beside due times in Unix milliseconds.
const (
	headUnknown = math.MinInt64 // not known: ask the shard
	headNone    = math.MaxInt64 // nothing ready
)

// maxLeases bounds the messages one receive script leases.
const maxLeases = 1000

// maxFanOut bounds the shards one round of a Receive asks at once (see receiveDue): the others
// due are asked by the next Receive, first, as their heads are the earliest.
const maxFanOut = 16

// minShare is the fewest messages one round of a Receive asks a shard for when it asks several:
// a receive script costs Redis some 25 to 50 us whatever it leases, as much as five to ten
// messages leased, so a Receive of up to 100 asks 4 shards for 25, not 16 for 6 or 7 (and its
// Ack then runs 4 scripts, not 16). A Receive of up to 500 still asks 16 shards at once, each
// for 31 or 32.
const minShare = 25

// A topicState is what this process knows of a topic it has receivers for: per shard, the due
// time of the topic's earliest ready message (its head), and a timer for the earliest head in the
// future. Receivers wait on wake, which is closed (and replaced) when a head may have come due.
type topicState struct {
	name string

	mu      sync.Mutex
	heads   []int64
	wake    chan struct{}
	timer   tock.Timer
	timerAt int64 // the Redis time the timer fires at; 0 when none is set
	// limited: the topic has a delivery limit (see limit.go), so receives ask for permits first;
	// permitAt is the Redis time before which none comes, 0 when not known, and permitTimer wakes
	// the receivers then.
	limited     bool
	permitAt    int64
	permitTimer tock.Timer
	// events counts the events of the topic applied, so that a permit's wait set after an event
	// that came meanwhile is not kept.
	events uint64
	// waiting counts the Receives waiting on wake (see floorHead).
	waiting atomic.Int32
}

// topic returns the state of a topic, making it (with every head unknown) on first use.
func (q *Queue) topic(name string) *topicState {
	q.topics.Lock()
	defer q.topics.Unlock()
	ts := q.topics.m[name]
	if ts == nil {
		ts = &topicState{name: name, heads: make([]int64, q.lay.shards()), wake: make(chan struct{})}
		for i := range ts.heads {
			ts.heads[i] = headUnknown
		}
		q.topics.m[name] = ts
	}
	return ts
}

// topicIfKnown returns the state of a topic this process has receivers for, or nil.
func (q *Queue) topicIfKnown(name string) *topicState {
	q.topics.Lock()
	defer q.topics.Unlock()
	return q.topics.m[name]
}

// topicHeadAtMost lowers the head of topic in shard to ms, from an event or a Put of this process.
func (q *Queue) topicHeadAtMost(topic string, shard int, ms, ver int64) {
	ts := q.topicIfKnown(topic)
	if ts == nil {
		return
	}
	q.shards[shard].observe(ver)
	ts.mu.Lock()
	ts.events++
	if ts.limited {
		ts.permitAt = 0 // maybe a permit came free: ask again
	}
	if ms < ts.heads[shard] {
		ts.heads[shard] = ms
		ts.armLocked(q)
	} else if ts.limited {
		close(ts.wake)
		ts.wake = make(chan struct{})
	}
	ts.mu.Unlock()
}

// waitedTopics returns the topics that Receives of this process wait on.
func (q *Queue) waitedTopics() []string {
	q.topics.Lock()
	defer q.topics.Unlock()
	var out []string
	for name, ts := range q.topics.m {
		if ts.waiting.Load() > 0 {
			out = append(out, name)
		}
	}
	return out
}

// floorHead is the receivers' floor: it lowers the head of topic in shard to head (-1: none), the
// due time of the topic's earliest ready message as the schedule driver's periodic read of the
// shard found it at Redis time nowMs, when this process knew of none so early. That read runs at
// least every recheck period (WithRecheck) while the process is open, and names the topics that
// Receives wait on: a process that came to believe wrongly that a shard has nothing ready of a
// topic (as a lost event would make it) would otherwise wait for good, since the events of the
// shard's later messages tell only of heads earlier than the one there. Its cost is a command per
// shard and topic waited on in each of those reads (an idle deployment of three processes and 16
// shards reads each shard every 30 s: about 0.5 commands a second per process and topic), not a
// receive script per receiver and shard (the floor of 9651c77, reverted by de11e0c, cost 84 a
// second). A message found there due more than a recheck period before the read is logged as a
// warning: no event told of it, which is a defect.
func (q *Queue) floorHead(topic string, shard int, head, nowMs int64) {
	ts := q.topicIfKnown(topic)
	if head < 0 || ts == nil {
		return
	}
	ts.mu.Lock()
	was := ts.heads[shard]
	if head >= was {
		ts.mu.Unlock()
		return
	}
	ts.heads[shard] = head
	ts.armLocked(q)
	ts.mu.Unlock()
	if head < nowMs-q.cfg.recheck.Milliseconds() {
		state := "none"
		if was != headNone {
			state = time.UnixMilli(was).UTC().Format(time.RFC3339Nano)
		}
		q.logger().Warn("redisq: the periodic read of a shard found a message ready that no event told of",
			"topic", topic, "shard", shard, "due", time.UnixMilli(head).UTC(), "head_known", state, "shard_state", q.shards[shard].String())
	}
}

// forgetShard makes every head of shard unknown, after its events may have been lost.
func (q *Queue) forgetShard(shard int) {
	q.topics.Lock()
	tss := make([]*topicState, 0, len(q.topics.m))
	for _, ts := range q.topics.m {
		tss = append(tss, ts)
	}
	q.topics.Unlock()
	for _, ts := range tss {
		ts.mu.Lock()
		ts.heads[shard] = headUnknown
		ts.armLocked(q)
		ts.mu.Unlock()
	}
}

// setHead records the head a script reported for shard: as it is when the reply is not older than
// an event applied since (fresh), and otherwise only if it is earlier.
func (ts *topicState) setHead(q *Queue, shard int, head int64, fresh bool) {
	if head < 0 {
		head = headNone
	}
	ts.mu.Lock()
	if fresh || head < ts.heads[shard] {
		ts.heads[shard] = head
	}
	ts.armLocked(q)
	ts.mu.Unlock()
}

// armLocked wakes the receivers if a head has come due, and otherwise sets the timer for the
// earliest head.
func (ts *topicState) armLocked(q *Queue) {
	earliest := int64(headNone)
	for _, h := range ts.heads {
		earliest = min(earliest, h)
	}
	if earliest == headNone {
		return
	}
	if earliest <= q.clock.now() {
		close(ts.wake)
		ts.wake = make(chan struct{})
		return
	}
	if ts.timerAt != 0 && ts.timerAt <= earliest {
		return
	}
	ts.timer.Stop()
	ts.timerAt = earliest
	t, err := q.wheel.AfterFunc(q.clock.until(earliest), func() {
		ts.mu.Lock()
		defer ts.mu.Unlock()
		if ts.timerAt != earliest {
			return
		}
		ts.timerAt = 0
		close(ts.wake)
		ts.wake = make(chan struct{})
	})
	if err != nil {
		// The wheel is stopped (Close, or a shared wheel stopped by its owner): wake the receivers,
		// which see the Queue closed or ask Redis.
		ts.timerAt = 0
		close(ts.wake)
		ts.wake = make(chan struct{})
		return
	}
	ts.timer = t
}

// armPermitLocked sets a timer for permitAt, when the next permit comes, which wakes the
// receivers.
func (ts *topicState) armPermitLocked(q *Queue) {
	at := ts.permitAt
	ts.permitTimer.Stop()
	t, err := q.wheel.AfterFunc(q.clock.until(at), func() {
		ts.mu.Lock()
		defer ts.mu.Unlock()
		if ts.permitAt == at {
			close(ts.wake)
			ts.wake = make(chan struct{})
		}
	})
	if err == nil {
		ts.permitTimer = t
	}
}

// dueLocked returns the shards whose head has come by now, earliest first.
func (ts *topicState) dueLocked(now int64) []int {
	var out []int
	for s, h := range ts.heads {
		if h <= now {
			out = append(out, s)
		}
	}
	slices.SortFunc(out, func(a, b int) int {
		switch {
		case ts.heads[a] < ts.heads[b]:
			return -1
		case ts.heads[a] > ts.heads[b]:
			return 1
		}
		return a - b
	})
	return out
}

// Receive waits until a message of topic is due and leases up to max due messages for visibility
// (rounded up to a millisecond); see [queue.Engine.Receive]. It asks Redis only when a shard's
// earliest message of the topic has come due by what this process knows (from replies and the
// shards' events), and then the shards in the order of those due times.
func (q *Queue) Receive(ctx context.Context, topic string, max int, visibility time.Duration) ([]queue.Delivery, error) {
	if err := q.usable(); err != nil {
		return nil, err
	}
	switch {
	case topic == "" || len(topic) > MaxTopic:
		return nil, fmt.Errorf("redisq: receive: topic of %d bytes: %w", len(topic), queue.ErrInvalid)
	case max < 1:
		return nil, fmt.Errorf("redisq: receive: max %d: %w", max, queue.ErrInvalid)
	case visibility <= 0:
		return nil, fmt.Errorf("redisq: receive: visibility %v: %w", visibility, queue.ErrInvalid)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("redisq: receive: %w", err)
	}
	ts := q.topic(topic)
	vis := millis(visibility)
	for {
		if q.closed.Load() {
			return nil, errClosedWrap
		}
		ts.mu.Lock()
		wake := ts.wake
		now := q.clock.now()
		due := ts.dueLocked(now)
		limited := ts.limited
		if len(due) == 0 {
			ts.armLocked(q)
		} else if limited && ts.permitAt > now {
			due = nil // due, but no permit comes before permitAt
			ts.armPermitLocked(q)
		}
		ts.mu.Unlock()
		if len(due) == 0 {
			ts.waiting.Add(1)
			select {
			case <-wake:
				ts.waiting.Add(-1)
				continue
			case <-ctx.Done():
				ts.waiting.Add(-1)
				return nil, fmt.Errorf("redisq: receive: %w", ctx.Err())
			case <-q.done:
				ts.waiting.Add(-1)
				return nil, errClosedWrap
			}
		}
		if limited {
			out, granted, err := q.receiveLimited(ctx, ts, due, max, vis)
			switch {
			case len(out) > 0:
				slices.SortStableFunc(out, func(a, b queue.Delivery) int { return a.DeliverAt.Compare(b.DeliverAt) })
				return out, nil
			case ctx.Err() != nil:
				return nil, fmt.Errorf("redisq: receive: %w", ctx.Err())
			case err != nil:
				return nil, fmt.Errorf("redisq: receive: %w", unavailable(err))
			case granted < 0:
				ts.mu.Lock()
				ts.limited = false // no limit any more
				ts.mu.Unlock()
			}
			continue
		}
		out, err := q.receiveDue(ctx, ts, due, max, vis)
		if serr := q.staleErr(); serr != nil {
			return nil, serr // this process refuses to serve the deployment (a script found it stale)
		}
		if len(out) > 0 {
			slices.SortStableFunc(out, func(a, b queue.Delivery) int { return a.DeliverAt.Compare(b.DeliverAt) })
			return out, nil
		}
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("redisq: receive: %w", err)
		}
		if err != nil {
			return nil, fmt.Errorf("redisq: receive: %w", unavailable(err))
		}
	}
}

// receiveDue leases up to max messages of the topic from the shards due (earliest head first),
// asking them at once (up to maxFanOut of them, the earliest, and no more than leaves each a
// share of minShare), each for its share of max: one
// round trip, not one per shard, which is what a burst due in every shard at the same instant
// waits for (1,000 fires of one second over 16 shards took a consumer 16 round trips, in the
// same order as every other consumer of the process). While max is not reached, it asks again the
// shards that gave their whole share and still have messages due by their reply, and those it did
// not ask yet, earliest head first, as long as one of them has a message due before the latest it
// leased. When none has (a burst due in the
// same millisecond: every share is met, and other consumers empty the shards meanwhile), it
// returns what it leased rather than hold it for another round trip, which mostly found nothing
// and made the messages of the first round (489 of 500 for 1,000 fires of one second) 5 to 10 ms
// later. A shard that failed is not asked again. It returns an error only when it leased nothing
// and every shard it asked failed.
func (q *Queue) receiveDue(ctx context.Context, ts *topicState, due []int, max int, vis int64) ([]queue.Delivery, error) {
	var out []queue.Delivery
	var lastErr error
	asked, failed := 0, 0
	for len(due) > 0 && len(out) < max && ctx.Err() == nil {
		want := max - len(out)
		ask := due[:min(len(due), (want+minShare-1)/minShare, maxFanOut)]
		share := func(i int) int {
			n := want / len(ask)
			if i < want%len(ask) {
				n++
			}
			return min(n, maxLeases)
		}
		var res []shardReceipt
		if len(ask) == 1 {
			ds, err := q.receiveShard(ctx, ts, ask[0], share(0), vis, nil)
			res = []shardReceipt{{ds, err}}
		} else {
			shares := make([]int, len(ask))
			for i := range ask {
				shares[i] = share(i)
			}
			res = q.receiveShards(ctx, ts, ask, shares, vis)
		}
		var full []int
		for i, r := range res {
			out = append(out, r.ds...)
			switch {
			case r.err != nil:
				lastErr = r.err
				failed++
			case len(r.ds) == share(i):
				full = append(full, ask[i])
			}
		}
		asked += len(ask)
		var latest int64
		for _, d := range out {
			if ms := d.DeliverAt.UnixMilli(); ms > latest {
				latest = ms
			}
		}
		ts.mu.Lock()
		now := q.clock.now()
		var next []int
		for _, s := range full {
			if ts.heads[s] <= now {
				next = append(next, s)
			}
		}
		next = append(next, due[len(ask):]...)
		slices.SortStableFunc(next, func(a, b int) int { return cmp.Compare(ts.heads[a], ts.heads[b]) })
		earlier := len(out) == 0
		for _, s := range next {
			earlier = earlier || ts.heads[s] < latest
		}
		ts.mu.Unlock()
		if !earlier {
			break
		}
		due = next
	}
	if len(out) == 0 && failed > 0 && failed == asked {
		return nil, lastErr
	}
	return out, nil
}

// receiveShard runs the receive script on shard s, for up to n messages: with the tokens of n
// permits of the topic's limit, or, when permits is nil, new tokens (and then a limited topic
// leases nothing, and the topic is marked limited): a random base that the script completes with
// each lease's rank (see tokenBase), not n tokens, which Redis parsed for every script, leasing or
// not.
func (q *Queue) receiveShard(ctx context.Context, ts *topicState, s, n int, vis int64, permits []string) ([]queue.Delivery, error) {
	var base string
	if permits == nil {
		base = newToken()[:tokenBase]
	}
	args := q.receiveArgs(ts, n, vis, permits, base)
	sent := q.shards[s].version()
	// The script is waited for whatever becomes of ctx (up to actTimeout): go-redis fails a call
	// whose context ends before its reply comes, and the messages the script leased would then be
	// leased to no one until their visibility ran out, and come again as a second attempt. The
	// Receive returns them, late, instead (tockd hands them to its client, or releases them when the
	// client went away).
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), actTimeout)
	defer cancel()
	start := time.Now()
	lo := q.clock.now()
	v, err := receiveScript.Run(sctx, q.rdb, q.lay.keys(s), args...).Slice()
	q.metrics.observeScript(time.Since(start))
	if base != "" && lostReply(err) {
		v, err = q.reclaim(ts, s, base, lo, vis)
	}
	return q.receiveReply(ctx, ts, s, sent, start, v, err)
}

// receiveArgs returns the receive script's arguments (see receiveShard), the stamp first: the
// tokens of permits, or else the random base of new tokens.
func (q *Queue) receiveArgs(ts *topicState, n int, vis int64, permits []string, base string) []any {
	args := q.cfgArgs()
	permitted := "0"
	if permits != nil {
		permitted = "1"
	}
	args = append(args, ts.name, n, vis, permitted)
	if permits != nil {
		for i := range n {
			args = append(args, permits[i])
		}
	} else {
		args = append(args, base)
	}
	return q.withStamp(args...)
}

// lostReply reports whether err says that a script's reply was lost after it was sent (the
// connection failed or timed out: go-redis's ReadTimeout, 3 s by default, can end the read of a
// reply of several MiB on a busy machine), so that the script may have run. An error reply of
// Redis or of the script, and a command Redis refused or that was never sent, are not.
func lostReply(err error) bool {
	var rerr redis.Error
	return err != nil && !errors.As(err, &rerr) && !rediskit.Refused(err) && !errors.Is(err, redis.ErrClosed)
}

// reclaimSlack is how far before this process's estimate of the Redis server's clock, when a
// receive script was sent, reclaim looks for its leases: the estimate is a lower bound of the
// clock of the server that replied last, and a cluster's masters' clocks differ a little.
const reclaimSlack = 10_000

// reclaim asks shard s for the messages that a receive script sent when this process's estimate
// of the Redis server's clock read lo (ms) leased under token base, its reply lost (see
// lostReply): the script ran or it did not, and those it leased are returned now rather than left
// leased to no one until their visibility vis runs out, to come again as a second attempt. It
// returns the reclaim script's reply (as the receive script's) or its error.
func (q *Queue) reclaim(ts *topicState, s int, base string, lo, vis int64) ([]any, error) {
	ctx, cancel := context.WithTimeout(context.Background(), actTimeout)
	defer cancel()
	q.metrics.reclaims.Add(1)
	return reclaimScript.Run(ctx, q.rdb, q.lay.keys(s), q.withStamp(ts.name, base, lo+vis-reclaimSlack, vis)...).Slice()
}

// A shardReceipt is what one shard's receive script leased, or its error.
type shardReceipt struct {
	ds  []queue.Delivery
	err error
}

// receiveShards runs the receive script on each shard of ask, for up to n[i] messages of shard
// ask[i] with new tokens, in one pipeline (one per master on a cluster): a burst due in every
// shard at the same instant is one write and one read for the process, not one connection, write
// and read per shard (the writes of 16 scripts on as many connections, from as many goroutines,
// took tockd 2 to 4 ms of CPU at each instant of 1,000 schedules' fires, before Redis ran the
// first script). Redis runs the scripts one after another as it did, and the Receive waited for
// every reply then too. The scripts are waited for whatever becomes of ctx, as in receiveShard.
func (q *Queue) receiveShards(ctx context.Context, ts *topicState, ask, n []int, vis int64) []shardReceipt {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), actTimeout)
	defer cancel()
	sent := make([]int64, len(ask))
	for i, s := range ask {
		sent[i] = q.shards[s].version()
	}
	start := time.Now()
	bases := make([]string, len(ask))
	for i := range bases {
		bases[i] = newToken()[:tokenBase]
	}
	lo := q.clock.now()
	cmds := q.pipeScripts(sctx, receiveScript, ask, func(i int) []any { return q.receiveArgs(ts, n[i], vis, nil, bases[i]) })
	q.metrics.observeScript(time.Since(start))
	out := make([]shardReceipt, len(ask))
	for i, c := range cmds {
		v, err := c.Slice()
		if lostReply(err) {
			v, err = q.reclaim(ts, ask[i], bases[i], lo, vis)
		}
		out[i].ds, out[i].err = q.receiveReply(ctx, ts, ask[i], sent[i], start, v, err)
	}
	return out
}

// receiveReply takes the reply v (or error err) of a receive script on shard s, sent at start when
// the shard's event count was sent: it learns the shard's head and events from it and returns the
// deliveries it leased.
func (q *Queue) receiveReply(ctx context.Context, ts *topicState, s int, sent int64, start time.Time, v []any, err error) ([]queue.Delivery, error) {
	sh := q.shards[s]
	if again, serr := q.afterStampErr(ctx, err); again {
		// The deployment is reconciled: ask the shard again at once, with the stamp now held.
		ts.mu.Lock()
		ts.heads[s] = headUnknown
		ts.mu.Unlock()
		return nil, nil
	} else if serr != err {
		return nil, serr // this process refuses to serve the deployment, or Redis failed
	}
	if err != nil {
		if q.cluster != nil && rediskit.Reloads(err) {
			q.cluster.ReloadState(context.Background())
		}
		// Ask again a little later rather than at once.
		ts.mu.Lock()
		if ts.heads[s] <= q.clock.now() {
			ts.heads[s] = q.clock.now() + 250
		}
		ts.armLocked(q)
		ts.mu.Unlock()
		return nil, err
	}
	if len(v) < 7 || (len(v)-7)%2 != 0 {
		return nil, fmt.Errorf("%w: receive script replied %d values", ErrProtocol, len(v))
	}
	nums := make([]int64, 7)
	for i := range nums {
		nums[i], _ = v[i].(int64)
	}
	now, ver, head, wsec, wcount, lms, more := nums[0], nums[1], nums[2], nums[3], nums[4], nums[5], nums[6]
	q.clock.observe(now, start)
	if head == -2 {
		// Limited: ask for permits, at once.
		ts.mu.Lock()
		ts.limited, ts.permitAt = true, 0
		ts.mu.Unlock()
		head = now
	}
	fresh := sh.observeReply(ver, sent)
	ts.setHead(q, s, head, fresh)
	sh.learn(fresh, wsec, wcount, lms, more == 1)
	var out []queue.Delivery
	for i := 7; i+1 < len(v); i += 2 {
		id, _ := v[i].(string)
		raw, _ := v[i+1].(string)
		rec, err := decodeRecord(raw)
		if err != nil {
			return out, err
		}
		out = append(out, queue.Delivery{
			Message: queue.Message{ID: id, Topic: rec.topic, Payload: rec.payload, Headers: rec.headers, DeliverAt: time.UnixMilli(rec.due)},
			Receipt: q.signer().issue(s, rec.tok, id),
			Attempt: rec.att,
		})
	}
	return out, nil
}
