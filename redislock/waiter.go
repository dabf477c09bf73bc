package redislock

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tockwheel/tock"
)

// subscriptionLinger is how long a release channel stays subscribed, and the pub/sub connection
// open, after its last waiter left: a lock that is contended once is usually contended again soon,
// and subscribing anew costs a round trip (and a connection for the first channel).
const subscriptionLinger = 5 * time.Second

// subscriber multiplexes the release channels that a Locker's waiters listen to over one pub/sub
// connection, opened when the first goroutine starts waiting and closed once nobody has waited for
// subscriptionLinger.
//
// Each release message wakes one waiter of the Locker, the one that has waited longest; if it does
// not get the lock (a waiter of another Locker was faster) it waits for the next release. So a
// release does not make every waiting goroutine of a process call Redis at once.
//
// No Redis I/O happens under mu: subscribing, unsubscribing and closing are queued under it, in the
// order decided there, and run by one goroutine (existing only while the queue is not empty) after
// mu is released. So a slow or unreachable Redis delays only the waiters that need a new
// subscription, never a Lock that finds the lock free, a waiter of a channel already subscribed, or
// the delivery of release messages.
type subscriber struct {
	rdb    redis.UniversalClient
	wheel  *tock.Wheel
	linger time.Duration // 0: drop idle topics at once (used by tests)

	mu struct {
		sync.Mutex
		ps       *redis.PubSub     // nil while no channel is subscribed
		topics   map[string]*topic // by channel; a topic stays until unsubscribed
		sweeping bool              // a sweep of idle topics is scheduled
		ops      []pubsubOp        // pub/sub I/O not yet done, in order
		working  bool              // a goroutine runs ops
	}
}

// A topic is one subscribed channel.
type topic struct {
	waiters []*waiter // in arrival order
	// ready is closed when Redis confirmed the subscription, or when it failed (err is then set
	// before): only after a confirmation is a release sure to be delivered, so a waiter tries to
	// acquire only after it.
	ready     chan struct{}
	confirmed bool
	err       error
	idleSince time.Time // when the last waiter left; meaningful only while waiters is empty
}

// A waiter is one goroutine waiting in Lock.
type waiter struct {
	wake    chan struct{} // buffered: a wake-up is never lost and notify never blocks
	channel string
	t       *topic
}

// notify wakes the waiter. It never blocks, so it may run on the wheel or the pub/sub reader.
func (w *waiter) notify() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// A pubsubOp is one pub/sub command queued for the I/O goroutine.
type pubsubOp struct {
	kind     pubsubOpKind
	ps       *redis.PubSub
	channels []string
	t        *topic // subscribe: the topic to fail if the subscription fails
	first    bool   // subscribe: the first on ps, after which ps's reader starts
}

type pubsubOpKind int

const (
	opSubscribe pubsubOpKind = iota
	opUnsubscribe
	opClose
)

// subscribed reports whether channel is subscribed and confirmed, so that join returns at once.
func (s *subscriber) subscribed(channel string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.mu.topics[channel]
	return t != nil && t.confirmed
}

// join registers a waiter on channel and returns once the subscription is confirmed or ctx ends.
func (s *subscriber) join(ctx context.Context, channel string) (*waiter, error) {
	s.mu.Lock()
	t := s.mu.topics[channel]
	if t == nil {
		first := s.mu.ps == nil
		if first {
			// Subscribe without channels does no I/O: the connection is dialed by the first
			// subscription, on the I/O goroutine.
			s.mu.ps = s.rdb.Subscribe(context.Background())
			s.mu.topics = make(map[string]*topic)
		}
		t = &topic{ready: make(chan struct{})}
		s.mu.topics[channel] = t
		s.enqueueLocked(pubsubOp{kind: opSubscribe, ps: s.mu.ps, channels: []string{channel}, t: t, first: first})
	}
	w := &waiter{wake: make(chan struct{}, 1), channel: channel, t: t}
	t.waiters = append(t.waiters, w)
	ready := t.ready
	s.mu.Unlock()

	select {
	case <-ready:
		if t.err != nil {
			s.leave(w)
			return nil, t.err
		}
		return w, nil
	case <-ctx.Done():
		s.leave(w)
		return nil, ctx.Err()
	}
}

// leave unregisters w. A wake-up w received but did not act on passes to the next waiter, so that
// it is not lost.
func (s *subscriber) leave(w *waiter) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := w.t
	t.waiters = slices.DeleteFunc(t.waiters, func(x *waiter) bool { return x == w })
	select {
	case <-w.wake:
		if len(t.waiters) > 0 {
			t.waiters[0].notify()
		}
	default:
	}
	if len(t.waiters) > 0 || t.err != nil {
		return
	}
	t.idleSince = time.Now()
	if s.linger == 0 {
		s.dropIdleLocked(t.idleSince)
		return
	}
	s.scheduleSweepLocked()
}

// scheduleSweepLocked makes sure idle topics are dropped once they have lingered.
func (s *subscriber) scheduleSweepLocked() {
	if s.mu.sweeping {
		return
	}
	if _, err := s.wheel.AfterFunc(s.linger, func() { go s.sweep() }); err != nil {
		// The wheel was stopped: drop idle topics now rather than keep them forever.
		s.dropIdleLocked(time.Now())
		return
	}
	s.mu.sweeping = true
}

// sweep drops the topics idle for the linger time and schedules itself again for the others.
func (s *subscriber) sweep() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mu.sweeping = false
	s.dropIdleLocked(time.Now().Add(-s.linger))
	if s.mu.ps != nil {
		s.scheduleSweepLocked()
	}
}

// dropIdleLocked unsubscribes every confirmed topic without waiters that has been idle since
// before or at cutoff, and closes the connection if no topic is left. A topic whose subscription is
// not confirmed stays until its confirmation arrives, so that a confirmation can never be taken for
// a later subscription to the same channel.
func (s *subscriber) dropIdleLocked(cutoff time.Time) {
	var drop []string
	for ch, t := range s.mu.topics {
		if len(t.waiters) == 0 && t.confirmed && !t.idleSince.After(cutoff) {
			drop = append(drop, ch)
		}
	}
	if len(drop) == 0 {
		return
	}
	for _, ch := range drop {
		delete(s.mu.topics, ch)
	}
	if len(s.mu.topics) == 0 {
		s.enqueueLocked(pubsubOp{kind: opClose, ps: s.mu.ps})
		s.mu.ps = nil
		return
	}
	s.enqueueLocked(pubsubOp{kind: opUnsubscribe, ps: s.mu.ps, channels: drop})
}

// enqueueLocked queues op for the I/O goroutine, starting it if none runs.
func (s *subscriber) enqueueLocked(op pubsubOp) {
	s.mu.ops = append(s.mu.ops, op)
	if !s.mu.working {
		s.mu.working = true
		go s.work()
	}
}

// work runs the queued pub/sub commands in order, each without holding mu, and returns when the
// queue is empty.
func (s *subscriber) work() {
	ctx := context.Background()
	for {
		s.mu.Lock()
		if len(s.mu.ops) == 0 {
			s.mu.working = false
			s.mu.Unlock()
			return
		}
		op := s.mu.ops[0]
		s.mu.ops = s.mu.ops[1:]
		stale := op.kind == opSubscribe && op.ps != s.mu.ps
		s.mu.Unlock()
		switch {
		case stale:
			// The connection failed before this subscription's turn; its topic failed with it.
		case op.kind == opSubscribe:
			if err := op.ps.Subscribe(ctx, op.channels...); err != nil {
				s.subscribeFailed(op, err)
			} else if op.first {
				go s.read(op.ps)
			}
		case op.kind == opUnsubscribe:
			// An error leaves subscriptions behind, which costs only unneeded messages;
			// go-redis resubscribes on reconnect only to the channels it still lists.
			_ = op.ps.Unsubscribe(ctx, op.channels...)
		case op.kind == opClose:
			_ = op.ps.Close()
		}
	}
}

// subscribeFailed fails the waiters of a subscription that Redis did not take. If it was the
// connection's first, no reader runs on the connection to confirm the others queued on it, so
// they fail too and the connection is dropped; a later join starts afresh.
func (s *subscriber) subscribeFailed(op pubsubOp, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	failed := []*topic{op.t}
	if op.first && s.mu.ps == op.ps {
		failed = failed[:0]
		for _, t := range s.mu.topics {
			failed = append(failed, t)
		}
		s.mu.topics = nil
		s.mu.ps = nil
		s.enqueueLocked(pubsubOp{kind: opClose, ps: op.ps})
	}
	for _, t := range failed {
		for ch, x := range s.mu.topics {
			if x == t {
				delete(s.mu.topics, ch)
			}
		}
		if !t.confirmed && t.err == nil {
			t.err = err
			close(t.ready)
		}
	}
}

// read delivers confirmations and release messages of ps until ps is closed.
func (s *subscriber) read(ps *redis.PubSub) {
	for m := range ps.ChannelWithSubscriptions() {
		s.mu.Lock()
		if s.mu.ps != ps {
			s.mu.Unlock()
			continue // closed; drain until go-redis closes the channel
		}
		switch m := m.(type) {
		case *redis.Subscription:
			t := s.mu.topics[m.Channel]
			if m.Kind != "subscribe" || t == nil {
				break
			}
			if t.confirmed {
				// go-redis reconnected and subscribed again: a release may have been
				// missed meanwhile, so let every waiter look.
				for _, w := range t.waiters {
					w.notify()
				}
				break
			}
			t.confirmed = true
			close(t.ready)
			if len(t.waiters) == 0 {
				// Everyone left before the confirmation.
				t.idleSince = time.Now()
				if s.linger == 0 {
					s.dropIdleLocked(t.idleSince)
				} else {
					s.scheduleSweepLocked()
				}
			}
		case *redis.Message:
			if t := s.mu.topics[m.Channel]; t != nil && len(t.waiters) > 0 {
				t.waiters[0].notify()
			}
		}
		s.mu.Unlock()
	}
}
