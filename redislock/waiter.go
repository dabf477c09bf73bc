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
type subscriber struct {
	rdb    redis.UniversalClient
	wheel  *tock.Wheel
	linger time.Duration // 0: drop idle topics at once (used by tests)

	mu struct {
		sync.Mutex
		ps       *redis.PubSub     // nil while no channel is subscribed
		topics   map[string]*topic // by channel; a topic stays until unsubscribed
		sweeping bool              // a sweep of idle topics is scheduled
	}
}

// A topic is one subscribed channel.
type topic struct {
	waiters []*waiter // in arrival order
	// ready is closed when Redis confirmed the subscription: only then is a release sure to be
	// delivered, so a waiter tries to acquire only after it.
	ready     chan struct{}
	confirmed bool
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
		fresh := s.mu.ps == nil
		if fresh {
			s.mu.ps = s.rdb.Subscribe(ctx)
			s.mu.topics = make(map[string]*topic)
		}
		if err := s.mu.ps.Subscribe(ctx, channel); err != nil {
			if fresh {
				_ = s.mu.ps.Close()
				s.mu.ps = nil
			}
			s.mu.Unlock()
			return nil, err
		}
		if fresh {
			go s.read(s.mu.ps)
		}
		t = &topic{ready: make(chan struct{})}
		s.mu.topics[channel] = t
	}
	w := &waiter{wake: make(chan struct{}, 1), channel: channel, t: t}
	t.waiters = append(t.waiters, w)
	ready := t.ready
	s.mu.Unlock()

	select {
	case <-ready:
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
	if len(t.waiters) > 0 {
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
		_ = s.mu.ps.Close()
		s.mu.ps = nil
		return
	}
	// An error leaves subscriptions behind, which costs only unneeded messages; go-redis
	// resubscribes on reconnect only to the channels it still lists.
	_ = s.mu.ps.Unsubscribe(context.Background(), drop...)
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
