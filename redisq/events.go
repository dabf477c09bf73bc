package redisq

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tockwheel/tock"
)

// An event is one message of a shard's channel (see the package doc).
type event struct {
	kind         byte // 'm', 'n', 'o' or 's'
	ver          int64
	wsec, wcount int64 // -1: none
	lms          int64 // -1: none
	act          int64 // 's': the shard's earliest schedule act time; -1: none
	owner        string
	heads        []topicHead
}

type topicHead struct {
	due   int64
	topic string
}

// parseEvent decodes an event; ok is false for anything else.
func parseEvent(s string) (e event, ok bool) {
	if act, found := strings.CutPrefix(s, "s "); found {
		e.kind, e.act = 's', -1
		if act != "-" {
			n, err := strconv.ParseInt(act, 10, 64)
			if err != nil {
				return e, false
			}
			e.act = n
		}
		return e, true
	}
	if strings.HasPrefix(s, "o ") {
		e.kind, e.owner = 'o', s[2:]
		if e.owner == "-" {
			e.owner = ""
		}
		return e, true
	}
	if len(s) < 2 || (s[0] != 'm' && s[0] != 'n') || s[1] != ' ' {
		return e, false
	}
	e.kind = s[0]
	f := strings.SplitN(s[2:], " ", 6)
	if len(f) < 5 {
		return e, false
	}
	num := func(x string) (int64, bool) {
		if x == "-" {
			return -1, true
		}
		n, err := strconv.ParseInt(x, 10, 64)
		return n, err == nil
	}
	var ok1, ok2, ok3, ok4 bool
	e.ver, ok1 = num(f[0])
	e.wsec, ok2 = num(f[1])
	e.wcount, ok3 = num(f[2])
	e.lms, ok4 = num(f[3])
	if !ok1 || !ok2 || !ok3 || !ok4 {
		return e, false
	}
	if f[4] != "-" {
		e.owner = f[4]
	}
	if len(f) == 6 {
		rest := f[5]
		for rest != "" {
			sp := strings.IndexByte(rest, ' ')
			colon := strings.IndexByte(rest, ':')
			if sp < 0 || colon < sp {
				return e, false
			}
			due, err1 := strconv.ParseInt(rest[:sp], 10, 64)
			n, err2 := strconv.Atoi(rest[sp+1 : colon])
			if err1 != nil || err2 != nil || n < 0 || colon+1+n > len(rest) {
				return e, false
			}
			e.heads = append(e.heads, topicHead{due: due, topic: rest[colon+1 : colon+1+n]})
			rest = strings.TrimPrefix(rest[colon+1+n:], " ")
		}
	}
	return e, true
}

// subscriptions keep this process subscribed to every shard's channel: one subscription per
// shard on a cluster (sharded pub/sub takes the channels of one slot per connection), one for all
// on a single server. Each runs a goroutine that applies the events; a periodic timer pings the
// subscriptions that were quiet for a recheck period, and one silent for two periods is taken for
// dead and made again.
type subscriptions struct {
	q     *Queue
	subs  []*sub
	ping  tock.Timer
	ctx   context.Context
	stopF context.CancelFunc
	wg    sync.WaitGroup
}

// A sub is one subscription.
type sub struct {
	shards   []int
	channels []string
	byName   map[string]int
	lastSeen atomic.Int64 // Unix nanoseconds of the last message, reply or (re)subscription

	mu sync.Mutex
	ps *redis.PubSub
}

// start subscribes to every shard's channel and waits until each subscription is confirmed; the
// shards then read their state.
func (ss *subscriptions) start(ctx context.Context, q *Queue) error {
	ss.q = q
	ss.ctx, ss.stopF = context.WithCancel(context.Background())
	n := q.lay.shards()
	if q.cluster != nil {
		for i := range n {
			ss.subs = append(ss.subs, newSub(q, []int{i}))
		}
	} else {
		all := make([]int, n)
		for i := range all {
			all[i] = i
		}
		ss.subs = append(ss.subs, newSub(q, all))
	}
	for _, s := range ss.subs {
		if err := s.subscribe(ctx, q); err != nil {
			return fmt.Errorf("redisq: Open: subscribe to the shards' events: %w", unavailable(err))
		}
	}
	for _, s := range ss.subs {
		ss.wg.Add(1)
		go ss.run(s)
	}
	// The pings run off the wheel's goroutines: a ping to a dead server waits for its timeout.
	t, err := q.wheel.Every(q.cfg.recheck, func() { go ss.pingQuiet() })
	if err != nil {
		return fmt.Errorf("redisq: Open: %w", err)
	}
	ss.ping = t
	// The shards read their state now that no event can be missed.
	for _, s := range q.shards {
		s.unknown()
	}
	for _, s := range q.sched {
		s.unknown()
	}
	return nil
}

func newSub(q *Queue, shards []int) *sub {
	s := &sub{shards: shards, byName: make(map[string]int)}
	for _, i := range shards {
		ch := q.lay.channel(i)
		s.channels = append(s.channels, ch)
		s.byName[ch] = i
	}
	return s
}

// subscribe makes the subscription and waits for Redis to confirm every channel.
func (s *sub) subscribe(ctx context.Context, q *Queue) error {
	ps := q.rdb.SSubscribe(ctx, s.channels...)
	want := len(s.channels)
	for want > 0 {
		m, err := ps.Receive(ctx)
		if err != nil {
			_ = ps.Close()
			return err
		}
		if sm, ok := m.(*redis.Subscription); ok && sm.Kind == "ssubscribe" {
			want--
		}
	}
	s.mu.Lock()
	s.ps = ps
	s.mu.Unlock()
	s.lastSeen.Store(time.Now().UnixNano())
	return nil
}

// run receives one subscription's messages until stop.
func (ss *subscriptions) run(s *sub) {
	defer ss.wg.Done()
	q := ss.q
	failures := 0
	for {
		s.mu.Lock()
		ps := s.ps
		s.mu.Unlock()
		if ss.ctx.Err() != nil {
			return
		}
		if ps == nil {
			// Make the subscription again, after a backoff.
			if !ss.sleep(min(50*time.Millisecond<<min(failures, 5), 2*time.Second)) {
				return
			}
			if q.cluster != nil {
				q.cluster.ReloadState(context.Background())
			}
			ctx, cancel := context.WithTimeout(ss.ctx, actTimeout)
			err := s.subscribe(ctx, q)
			cancel()
			if err != nil {
				failures++
				continue
			}
			failures = 0
			ss.resubscribed(s)
			continue
		}
		m, err := ps.ReceiveTimeout(ss.ctx, 2*q.cfg.recheck)
		if ss.ctx.Err() != nil {
			return
		}
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() && time.Since(time.Unix(0, s.lastSeen.Load())) < 2*q.cfg.recheck {
				continue
			}
			// The connection failed or went silent: events may be lost until it is made again.
			q.metrics.reconnects.Add(1)
			ss.lost(s)
			continue
		}
		s.lastSeen.Store(time.Now().UnixNano())
		switch m := m.(type) {
		case *redis.Message:
			i, ok := s.byName[m.Channel]
			if !ok {
				continue
			}
			e, ok := parseEvent(m.Payload)
			if !ok {
				q.logger().Warn("redisq: an event in an unknown format", "channel", m.Channel, "event", m.Payload)
				continue
			}
			q.metrics.events.Add(1)
			q.applyEvent(i, e)
		case *redis.Subscription:
			if m.Kind == "sunsubscribe" {
				// Redis drops sharded subscriptions of a slot that moved to another master.
				q.metrics.reconnects.Add(1)
				ss.lost(s)
			}
		}
	}
}

// lost closes a subscription that failed, so that run makes it again, and forgets what its shards'
// events said, since some may be lost.
func (ss *subscriptions) lost(s *sub) {
	s.mu.Lock()
	if s.ps != nil {
		_ = s.ps.Close()
		s.ps = nil
	}
	s.mu.Unlock()
	for _, i := range s.shards {
		ss.q.forgetShard(i)
	}
}

// resubscribed re-reads the shards of a subscription made again.
func (ss *subscriptions) resubscribed(s *sub) {
	ss.q.metrics.rechecks.Add(1)
	for _, i := range s.shards {
		ss.q.forgetShard(i)
		ss.q.shards[i].unknown()
		ss.q.sched[i].unknown()
	}
}

// sleep waits d, or returns false when the subscriptions stop first.
func (ss *subscriptions) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ss.ctx.Done():
		return false
	}
}

// pingQuiet pings the subscriptions that received nothing for a recheck period: the reply proves
// that no event was lost on the connection; no reply within another period makes run give it up.
func (ss *subscriptions) pingQuiet() {
	for _, s := range ss.subs {
		if time.Since(time.Unix(0, s.lastSeen.Load())) < ss.q.cfg.recheck {
			continue
		}
		s.mu.Lock()
		ps := s.ps
		s.mu.Unlock()
		if ps != nil {
			ss.q.metrics.pings.Add(1)
			ctx, cancel := context.WithTimeout(ss.ctx, time.Second)
			_ = ps.Ping(ctx)
			cancel()
		}
	}
}

// stop ends the subscriptions.
func (ss *subscriptions) stop() {
	if ss.stopF == nil {
		return
	}
	ss.ping.Stop()
	ss.stopF()
	for _, s := range ss.subs {
		s.mu.Lock()
		if s.ps != nil {
			_ = s.ps.Close()
			s.ps = nil
		}
		s.mu.Unlock()
	}
	ss.wg.Wait()
}

// applyEvent applies an event of shard i.
func (q *Queue) applyEvent(i int, e event) {
	if e.kind == 's' {
		q.sched[i].event(e.act)
		return
	}
	for _, h := range e.heads {
		q.topicHeadAtMost(h.topic, i, h.due, e.ver)
	}
	q.shards[i].event(e)
}
