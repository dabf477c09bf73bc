package client

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
)

// settling is a batch of calls just answered, none of whose callers has returned yet, and the
// queue its next calls join.
type settling struct {
	co    *coalescer
	q     *callQueue
	batch []*call
}

func newSettling(n int) *settling {
	s := &settling{co: newCoalescer(1, nil), q: &callQueue{inFlight: 1}, batch: make([]*call, n)}
	r := newReturns(n)
	for i := range s.batch {
		s.batch[i] = &call{ctx: context.Background(), taken: true, returns: r, done: make(chan struct{})}
	}
	return s
}

// rejoin makes the caller of s.batch[i] return from its call and, when again is set, call
// again: it joins the waiting calls.
func (s *settling) rejoin(i int, again bool) {
	s.batch[i].returns.done()
	if again {
		s.co.mu.Lock()
		s.q.waiting = append(s.q.waiting, &call{ctx: context.Background(), done: make(chan struct{})})
		s.co.mu.Unlock()
	}
}

// TestSettleWaitsForCallersToReturn checks that settle does not take the next batch while a
// caller of the batch it answered has not returned from its call, and then yields until a yield
// brings no caller back; and that it stops at once when every caller is back.
func TestSettleWaitsForCallersToReturn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSettling(3)
		var yields atomic.Int32
		s.co.yield = func() { yields.Add(1) }
		var settled atomic.Bool
		go func() {
			s.co.settle(s.q, s.batch)
			settled.Store(true)
		}()
		synctest.Wait()
		s.rejoin(0, true)
		s.rejoin(1, true)
		synctest.Wait()
		if settled.Load() || yields.Load() != 0 {
			t.Fatalf("settle went on (settled %v, %d yields) while a caller of its batch had not returned", settled.Load(), yields.Load())
		}
		s.rejoin(2, false) // returns, and does not call again
		synctest.Wait()
		if !settled.Load() || yields.Load() != 1 {
			t.Fatalf("once every caller returned: settled %v after %d yields; want settled after 1", settled.Load(), yields.Load())
		}
	})

	// The last callers come back during the yields: settle goes on until a
	// yield brings none.
	s := newSettling(4)
	s.rejoin(0, true)
	s.rejoin(1, false)
	s.rejoin(2, false)
	s.rejoin(3, false)
	yields := 0
	s.co.yield = func() {
		yields++
		switch yields {
		case 1, 2:
			s.co.mu.Lock()
			s.q.waiting = append(s.q.waiting, &call{ctx: context.Background(), done: make(chan struct{})})
			s.co.mu.Unlock()
		}
	}
	s.co.settle(s.q, s.batch)
	if yields != 3 {
		t.Errorf("with callers back at the 1st and 2nd yield, settle yielded %d times; want 3", yields)
	}

	// Every caller back before settle: it stops at the first yield.
	s = newSettling(3)
	for i := range 3 {
		s.rejoin(i, true)
	}
	yields = 0
	s.co.yield = func() { yields++ }
	s.co.settle(s.q, s.batch)
	if yields != 1 {
		t.Errorf("with every caller back, settle yielded %d times; want 1", yields)
	}
}
