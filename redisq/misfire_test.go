package redisq

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tockwheel/tock/queue"
)

// TestMisfireOverlap is delayq's TestMisfireOverlap on redisq, whose clock is Redis's: an "@every
// 1h" schedule of each misfire and overlap policy, every process of the deployment closed for ten
// and a half periods, then a process opens it. The nominal times that passed meanwhile fire as
// queue.Schedule's docs say, alike under both overlap policies: each (all), the latest (once), or
// none (skip: the latest is half an hour late, past queue.MisfireGrace), due at once; the
// misfires are counted. The only difference is what was decided before: an OverlapAllow schedule
// had put its first time ahead (delivered late, as any message), an OverlapSkip one puts each at
// its time, so its first is missed with the others. Rather than wait ten hours, the test sets the
// deployment back: each schedule's anchor, next time and act time, and the fire put ahead, ten
// and a half hours earlier, which is what Redis holds when the schedules were set that long ago
// and every process died just after.
func TestMisfireOverlap(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	rdb := singleClient(t, s.Addr)
	ctx := testCtx(t, time.Minute)
	prefix := newPrefix()
	q := openQueue(t, rdb, WithPrefix(prefix), WithShards(1))
	const period, back = time.Hour, 10*time.Hour + 30*time.Minute
	type schedCase struct {
		name    string
		overlap queue.Overlap
		misfire queue.Misfire
	}
	var cases []schedCase
	for _, o := range []queue.Overlap{queue.OverlapAllow, queue.OverlapSkip} {
		for _, m := range []queue.Misfire{queue.MisfireAll, queue.MisfireOnce, queue.MisfireSkip} {
			c := schedCase{string(o) + "-" + string(m), o, m}
			cases = append(cases, c)
			sc := queue.Schedule{Name: c.name, Topic: c.name, Spec: "@every 1h", Misfire: m, Overlap: o}
			if _, err := q.SetSchedule(ctx, sc); err != nil {
				t.Fatal(err)
			}
		}
	}
	starts := map[string]time.Time{} // each schedule's anchor, set back
	recs := map[string]schedRecord{}
	acts := map[string]float64{}
	for _, c := range cases {
		raw, err := rdb.HGet(ctx, q.lay.schedKey(0), c.name).Result()
		if err != nil {
			t.Fatal(err)
		}
		r, err := decodeSchedRecord(raw)
		if err != nil {
			t.Fatal(err)
		}
		start := time.UnixMilli(r.start).Add(-back)
		starts[c.name] = start
		r.start, r.next = start.UnixMilli(), time.UnixMilli(r.next).Add(-back).UnixMilli()
		if c.overlap == queue.OverlapAllow {
			// The fire put ahead, of the first time after the anchor.
			if ok, err := q.Cancel(ctx, r.last); !ok || err != nil {
				t.Fatalf("Cancel of the fire %q put ahead: %v, %v", r.last, ok, err)
			}
			r.last = queue.FireID(c.name, start.Add(period), false)
			if _, err := q.Put(ctx, queue.Message{ID: r.last, Topic: c.name, DeliverAt: start.Add(period)}); err != nil {
				t.Fatal(err)
			}
		}
		recs[c.name] = r
		act, err := rdb.ZScore(ctx, q.lay.schedActKey(0), c.name).Result()
		if err != nil {
			t.Fatal(err)
		}
		acts[c.name] = float64(time.UnixMilli(int64(act)).Add(-back).UnixMilli())
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		if err := rdb.HSet(ctx, q.lay.schedKey(0), c.name, recs[c.name].encode()).Err(); err != nil {
			t.Fatal(err)
		}
		if err := rdb.ZAdd(ctx, q.lay.schedActKey(0), redis.Z{Score: acts[c.name], Member: c.name}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	q = openQueue(t, rdb, WithPrefix(prefix))
	for _, c := range cases {
		start := starts[c.name]
		at := func(k int) time.Time { return start.Add(time.Duration(k) * period) }
		var want, missed []time.Time
		for k := 2; k <= 10; k++ {
			missed = append(missed, at(k))
		}
		if c.overlap == queue.OverlapAllow {
			want = append(want, at(1)) // put ahead before every process died
		} else {
			missed = append([]time.Time{at(1)}, missed...)
		}
		var fired []time.Time
		switch c.misfire {
		case queue.MisfireAll:
			fired = missed
		case queue.MisfireOnce:
			fired = missed[len(missed)-1:]
		}
		want = append(want, fired...)
		var got []time.Time
		if len(want) > 0 {
			for _, d := range receiveN(t, ctx, q, c.name, len(want)) {
				_, nominal, ok := queue.ParseFireID(d.ID)
				if !ok {
					t.Fatalf("%s: delivered %q, not a fire", c.name, d.ID)
				}
				got = append(got, nominal)
				if err := q.Ack(ctx, d.Receipt); err != nil {
					t.Fatal(err)
				}
			}
		}
		slices.SortFunc(got, time.Time.Compare)
		// Nothing more: the next time is half an hour away.
		rctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		ds, _ := q.Receive(rctx, c.name, 10, time.Minute)
		cancel()
		for _, d := range ds {
			_, nominal, _ := queue.ParseFireID(d.ID)
			got = append(got, nominal)
		}
		if !slices.EqualFunc(got, want, time.Time.Equal) {
			t.Errorf("%s: fires %v; want %v", c.name, hours(start, got), hours(start, want))
		}
		info, err := q.Schedule(ctx, c.name)
		if err != nil || info.Misfires != uint64(len(missed)-len(fired)) {
			t.Errorf("%s: Schedule = %+v, %v; want %d misfires", c.name, info, err, len(missed)-len(fired))
		}
	}
	mustCheck(t, ctx, rdb, q, "schedules fired after every process was closed")
}

// hours returns ts as hours after start, for messages.
func hours(start time.Time, ts []time.Time) []string {
	var out []string
	for _, t := range ts {
		out = append(out, fmt.Sprintf("%gh", t.Sub(start).Hours()))
	}
	return out
}
