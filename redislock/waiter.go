package redislock

import (
	"context"
	"sync"

	"github.com/redis/go-redis/v9"
)

// subscriber multiplexes the release channels that a Locker's waiters listen to over one pub/sub
// connection, opened when the first goroutine starts waiting and closed when the last one stops.
type subscriber struct {
	rdb redis.UniversalClient

	mu struct {
		sync.Mutex
		ps     *redis.PubSub     // nil while nobody waits
		topics map[string]*topic // by channel; a topic stays until unsubscribed
	}
}

// A topic is one subscribed channel.
type topic struct {
	waiters map[*waiter]struct{}
	// ready is closed when Redis confirmed the subscription: only then is a release sure to be
	// delivered, so a waiter tries to acquire only after it.
	ready     chan struct{}
	confirmed bool
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
		t = &topic{waiters: make(map[*waiter]struct{}), ready: make(chan struct{})}
		s.mu.topics[channel] = t
	}
	w := &waiter{wake: make(chan struct{}, 1), channel: channel, t: t}
	t.waiters[w] = struct{}{}
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

// leave unregisters w, unsubscribing its channel if it was the last waiter on it and closing the
// connection if no channel is left.
func (s *subscriber) leave(w *waiter) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(w.t.waiters, w)
	s.maybeUnsubscribeLocked(w.channel, w.t)
}

// maybeUnsubscribeLocked drops a topic nobody waits on. A topic whose subscription is not yet
// confirmed stays until the confirmation arrives, so that a confirmation can never be taken for a
// later subscription to the same channel.
func (s *subscriber) maybeUnsubscribeLocked(channel string, t *topic) {
	if len(t.waiters) > 0 || !t.confirmed || s.mu.topics[channel] != t {
		return
	}
	delete(s.mu.topics, channel)
	if len(s.mu.topics) == 0 {
		_ = s.mu.ps.Close()
		s.mu.ps = nil
		return
	}
	// Errors leave a subscription behind, which costs only unneeded messages; go-redis
	// resubscribes on reconnect only to the channels it still lists.
	_ = s.mu.ps.Unsubscribe(context.Background(), channel)
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
				// missed meanwhile, so let the waiters look.
				for w := range t.waiters {
					w.notify()
				}
				break
			}
			t.confirmed = true
			close(t.ready)
			s.maybeUnsubscribeLocked(m.Channel, t)
		case *redis.Message:
			if t := s.mu.topics[m.Channel]; t != nil {
				for w := range t.waiters {
					w.notify()
				}
			}
		}
		s.mu.Unlock()
	}
}
