package redisq

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tockwheel/tock/queue"
)

// Delivery limits (queue.Limiter), decided in scripts by Redis's clock. Every shard keeps a copy
// of each topic's limit in {T}:lim, which its receive script reads: it leases nothing of a
// limited topic to a caller that holds no permits, and says so. The permits live on the topic's
// home shard (its name's shard, as for a chosen ID): a token bucket for the rate ({T}:lb:<topic>)
// and the leases granted for the concurrency ({T}:lp:<topic>, lease token -> deadline). A Receive
// on a limited topic first asks the home shard for permits (the permit script), then leases with
// the permits' tokens as its lease tokens, and gives back the permits it did not use; an ack or
// nack gives its permit back, an extension extends it, and a permit of a lease that ends otherwise
// (expiry, a consumer that died) runs out at its deadline, a margin after the lease's. When none
// is granted, the script says when the next comes (the next token, or the earliest permit's end):
// the Receive waits for that time on the wheel, or for the event the home shard publishes when a
// permit comes free, whichever is first.

var _ queue.Limiter = (*Queue)(nil)

// permitMargin is how much longer a permit lasts than the lease it covers: the shards' clocks may
// differ by that much (on a Cluster, each master has its own), and a permit must not end before
// its lease, or the concurrency could be passed.
const permitMargin = time.Second

// SetLimit sets topic's delivery limit (see [queue.Limiter.SetLimit]) in every shard, as a pause
// is; it returns once every shard has it (if it fails, call it again). A new rate's bucket starts
// full. Permits granted under an earlier limit count until their leases end.
func (q *Queue) SetLimit(ctx context.Context, topic string, l queue.Limit) error {
	if err := q.usable(); err != nil {
		return err
	}
	if err := checkTopic("limit", topic); err != nil {
		return err
	}
	l, err := l.Check()
	if err != nil {
		return fmt.Errorf("redisq: limit: %w", err)
	}
	rate := ""
	if !l.IsZero() {
		rate = strconv.FormatFloat(l.Rate, 'g', -1, 64)
	}
	home := q.lay.home(topic)
	err = q.allShards(ctx, func(ctx context.Context, s int) error {
		isHome := "0"
		if s == home {
			isHome = "1"
		}
		r := &request{kind: opScript, shard: s, script: limitScript, args: func(int, bool) []any {
			return []any{topic, rate, l.Burst, l.Concurrency, isHome}
		}}
		if err := q.writer.do(ctx, r); err != nil {
			return q.writeErr("limit", err)
		}
		if head, _ := first(r.reply).(int64); head >= 0 {
			q.topicHeadAtMost(topic, s, head, r.ver)
		}
		return nil
	})
	if ts := q.topicIfKnown(topic); ts != nil {
		ts.mu.Lock()
		ts.limited, ts.permitAt = !l.IsZero(), 0
		ts.mu.Unlock()
	}
	return err
}

// Limits returns every topic's limit (see [queue.Limiter.Limits]), read from shard 0's copy.
func (q *Queue) Limits(ctx context.Context) ([]queue.TopicLimit, error) {
	if err := q.usable(); err != nil {
		return nil, err
	}
	m, err := q.rdb.HGetAll(ctx, "{"+q.lay.tags[0]+"}:lim").Result()
	if err != nil {
		return nil, fmt.Errorf("redisq: limits: %w", unavailable(err))
	}
	out := make([]queue.TopicLimit, 0, len(m))
	for topic, v := range m {
		f := strings.Split(v, ",")
		if len(f) != 3 {
			return nil, fmt.Errorf("%w: limit %q of %q", ErrProtocol, v, topic)
		}
		rate, err1 := strconv.ParseFloat(f[0], 64)
		burst, err2 := strconv.Atoi(f[1])
		conc, err3 := strconv.Atoi(f[2])
		if err1 != nil || err2 != nil || err3 != nil {
			return nil, fmt.Errorf("%w: limit %q of %q", ErrProtocol, v, topic)
		}
		out = append(out, queue.TopicLimit{Topic: topic, Limit: queue.Limit{Rate: rate, Burst: burst, Concurrency: conc}})
	}
	slices.SortFunc(out, func(a, b queue.TopicLimit) int { return cmp.Compare(a.Topic, b.Topic) })
	return out, nil
}

// permit runs the permit script on topic's home shard (see lua/permit.lua) and returns its
// count, for an acquire when the next permit comes (Redis ms; -1: at a lease's end), and the
// script's clock (Redis ms).
func (q *Queue) permit(ctx context.Context, mode, topic string, args ...any) (n, next, now int64, err error) {
	r := &request{kind: opScript, shard: q.lay.home(topic), script: permitScript, args: func(int, bool) []any {
		return append([]any{mode, topic}, args...)
	}}
	if err := q.writer.do(ctx, r); err != nil {
		return 0, 0, 0, q.writeErr("permit", err)
	}
	if len(r.reply) < 2 {
		return 0, 0, 0, fmt.Errorf("%w: permit script replied %v", ErrProtocol, r.reply)
	}
	n, _ = r.reply[0].(int64)
	next, _ = r.reply[1].(int64)
	return n, next, r.now, nil
}

// givePermitsBack gives back, in the background, the permits of leases that ended (acked or
// nacked), grouped by topic. A permit not given back runs out at its deadline.
func (q *Queue) givePermitsBack(byTopic map[string][]any) {
	for topic, tokens := range byTopic {
		q.wg.Add(1)
		go func() {
			defer q.wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if _, _, _, err := q.permit(ctx, "r", topic, append([]any{0, 0}, tokens...)...); err != nil {
				q.logger().Warn("redisq: give permits back; they run out at their deadlines", "topic", topic, "error", err)
			}
		}()
	}
}

// receiveLimited leases up to max messages of a limited topic from the shards due, under permits
// of its home shard: it acquires them, leases with their tokens, and gives back those unused.
// granted is -1 when the topic has no limit any more, 0 when no permit was granted (the topic's
// permitAt then says when to ask again).
func (q *Queue) receiveLimited(ctx context.Context, ts *topicState, due []int, max int, vis int64) (out []queue.Delivery, granted int64, err error) {
	want := min(max, maxLeases)
	tokens := make([]any, want)
	for i := range tokens {
		tokens[i] = newToken()
	}
	ts.mu.Lock()
	events := ts.events
	ts.mu.Unlock()
	granted, next, at, err := q.permit(ctx, "a", ts.name, append([]any{want, vis, permitMargin.Milliseconds()}, tokens...)...)
	if err != nil || granted <= 0 {
		if granted == 0 && err == nil {
			ts.mu.Lock()
			if next < 0 {
				next = q.clock.now() + vis // only a lease's end frees one: its event, or at worst this
			}
			if ts.events == events { // else an event since may have freed one: ask again at once
				ts.permitAt = next
			}
			ts.mu.Unlock()
		}
		return nil, granted, err
	}
	held := make([]string, granted)
	for i := range held {
		held[i], _ = tokens[i].(string)
	}
	free := held
	for _, s := range due {
		if len(free) == 0 {
			break
		}
		ds, rerr := q.receiveShard(ctx, ts, s, len(free), vis, free)
		out = append(out, ds...)
		if rerr != nil {
			err = rerr
			break
		}
		used := make(map[string]bool, len(ds))
		for _, d := range ds {
			if rc, ok := q.signer().verify(d.Receipt, q.lay.shards()); ok {
				used[rc.token] = true
			}
		}
		rest := free[:0:0]
		for _, t := range free {
			if !used[t] {
				rest = append(rest, t)
			}
		}
		free = rest
	}
	if len(free) > 0 {
		// Given back with when they were granted: the bucket takes back less the refill it may
		// have lost meanwhile (see lua/permit.lua).
		back := make([]any, 0, len(free)+2)
		back = append(back, len(free), at)
		for _, t := range free {
			back = append(back, t)
		}
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		_, _, _, rerr := q.permit(rctx, "r", ts.name, back...)
		cancel()
		if rerr != nil && err == nil && len(out) == 0 {
			err = rerr
		}
	}
	return out, granted, err
}
