package redisq

import (
	"math/rand/v2"
	"testing"
	"testing/synctest"
	"time"
)

// TestClockTakesTheTightestBound checks the estimate of the Redis clock against a server whose
// clock is a known offset from the process's, with replies that take from 0 to 20 ms to be sent
// and as long to come back: the estimate is never ahead of the server's clock, comes within a
// millisecond of it once a reply was fast, and is not pulled back by the slow replies after it
// (taking each reply's clock as it came, it was up to a reply's round trip behind).
func TestClockTakesTheTightestBound(t *testing.T) {
	for _, offset := range []time.Duration{0, 37 * time.Millisecond, -250 * time.Millisecond, 3500 * time.Microsecond} {
		synctest.Test(t, func(t *testing.T) {
			var c clock
			c.offset.Store(noOffset)
			server := func() int64 { return time.Now().Add(offset).UnixMilli() }
			call := func(there, back time.Duration) {
				sent := time.Now()
				time.Sleep(there)
				ms := server()
				time.Sleep(back)
				c.observe(ms, sent)
			}
			check := func(when string) {
				t.Helper()
				if ahead := c.nowMicro() - time.Now().Add(offset).UnixMicro(); ahead > 0 {
					t.Fatalf("offset %v, %s: the estimate is %d µs ahead of the server's clock", offset, when, ahead)
				}
			}
			call(15*time.Millisecond, 15*time.Millisecond)
			check("after a slow reply")
			call(0, 0)
			check("after a fast reply")
			if behind := time.Now().Add(offset).UnixMicro() - c.nowMicro(); behind > 1000 {
				t.Fatalf("offset %v: after a reply without delay the estimate is %d µs behind", offset, behind)
			}
			best := c.offset.Load()
			r := rand.New(rand.NewPCG(1, 2))
			for range 200 {
				call(time.Duration(r.IntN(20_000))*time.Microsecond, time.Duration(r.IntN(20_000))*time.Microsecond)
				check("after random replies")
			}
			if got := c.offset.Load(); got < best {
				t.Fatalf("offset %v: slow replies pulled the estimate back from %d to %d µs", offset, best, got)
			}
		})
	}
}

// TestClockFollowsAServerThatStepsBack checks that the estimate follows the server's clock when it
// steps back (a failover to a server whose clock is behind): it is never ahead after the first
// reply that proves it, so that receivers do not ask over and over for a time that has not come.
func TestClockFollowsAServerThatStepsBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var c clock
		c.offset.Store(noOffset)
		offset := 100 * time.Millisecond
		call := func() {
			sent := time.Now()
			time.Sleep(time.Millisecond)
			ms := time.Now().Add(offset).UnixMilli()
			time.Sleep(time.Millisecond)
			c.observe(ms, sent)
		}
		call()
		if got := c.now() - time.Now().UnixMilli(); got < 98 || got > 100 {
			t.Fatalf("offset 100 ms: the estimate's is %d ms", got)
		}
		offset = -40 * time.Millisecond
		call()
		if ahead := c.nowMicro() - time.Now().Add(offset).UnixMicro(); ahead > 0 {
			t.Fatalf("after the server stepped back 140 ms, the estimate is %d µs ahead of it", ahead)
		}
		if c.until(time.Now().Add(offset).UnixMilli()+10) < 9*time.Millisecond {
			t.Fatalf("until a time 10 ms ahead of the server: %v", c.until(time.Now().Add(offset).UnixMilli()+10))
		}
	})
}
