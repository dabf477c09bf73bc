package redisq

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tockwheel/tock/internal/testlong"
	"github.com/tockwheel/tock/internal/testwait"
	"github.com/tockwheel/tock/queue"
	"github.com/tockwheel/tock/queue/queuetest"
)

var (
	seedFlag  = flag.Uint64("redisq.seed", 0, "seed of TestRandomOperationsKeepTheLayout (0: a new one)")
	stepsFlag = flag.Int("redisq.steps", 0, "steps of TestRandomOperationsKeepTheLayout (0: 200, 800 with TOCK_LONG=1, 100 with -short)")
)

// TestRandomOperationsKeepTheLayout runs random puts (generated and chosen IDs, batches, due at
// once, soon, or an hour out at the same millisecond), receives, acks, nacks, expiries, cancels,
// deliveries now, requeues, purges, pauses and promotions in small budgets, and checks every
// invariant of the layout after each (checkShards). Batches of up to 250 messages of one topic (in
// one shard) due at one instant, in a few seconds in random or reverse order, or in order, and
// cancels and purges of many of them in small budgets, make the topics' wheels split and merge
// chunks, in the middle and at the tail, and empty and refill their first chunk. At the end,
// Messages must list each topic's scheduled messages exactly as the wheel and the ready sets hold
// them, in order.
func TestRandomOperationsKeepTheLayout(t *testing.T) {
	t.Parallel()
	seed := *seedFlag
	if seed == 0 {
		seed = rand.Uint64()
	}
	t.Logf("seed %d (run again with -redisq.seed=%d)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	s := startServer(t)
	rdb := singleClient(t, s.Addr)
	q := openQueue(t, rdb, WithShards(2), WithMaxAttempts(2), WithBackoff(time.Millisecond, 5*time.Millisecond))
	ctx := testCtx(t, 2*time.Minute)
	topics := []string{"a", "b"}
	hour := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	var ids, receipts []string
	due := func() time.Time {
		switch rng.IntN(4) {
		case 0:
			return time.Time{}
		case 1:
			return hour // many at the same millisecond
		case 2:
			return hour.Add(time.Duration(rng.IntN(5000)) * time.Millisecond)
		}
		return time.Now().Add(time.Duration(rng.IntN(3000)) * time.Millisecond)
	}
	message := func() queue.Message {
		m := queue.Message{Topic: topics[rng.IntN(len(topics))], Payload: []byte("p"), DeliverAt: due()}
		if rng.IntN(3) == 0 {
			// Chosen IDs that are prefixes of each other, and bytes above 0x7f, which Lua's string
			// comparison would order by the locale.
			m.ID = fmt.Sprintf("c%d", rng.IntN(40)) + []string{"", "\x00", "\xff", "0"}[rng.IntN(4)]
		}
		return m
	}
	// bulk returns n messages of one topic for one batch (in one shard), due in an order that
	// fills the wheel's chunks in the middle, at the tail, or in reverse.
	bulk := func(n int) []queue.Message {
		topic := topics[rng.IntN(len(topics))]
		mode := rng.IntN(4)
		base := hour.Add(time.Duration(rng.IntN(5000)) * time.Millisecond)
		ms := make([]queue.Message, n)
		for i := range ms {
			var at time.Time
			switch mode {
			case 0:
				at = hour
			case 1:
				at = hour.Add(time.Duration(rng.IntN(5000)) * time.Millisecond)
			case 2:
				at = base.Add(time.Duration(n-i) * time.Millisecond)
			default:
				at = base.Add(time.Duration(i) * time.Millisecond)
			}
			ms[i] = queue.Message{Topic: topic, Payload: []byte("b"), DeliverAt: at}
		}
		return ms
	}
	pick := func(from []string) string {
		if len(from) == 0 {
			return "none"
		}
		return from[rng.IntN(len(from))]
	}
	steps := testlong.Pick(200, 800)
	if testing.Short() {
		steps = 100
	}
	if *stepsFlag > 0 {
		steps = *stepsFlag
	}
	// The steps' outcomes depend on timing (what a short Receive finds, what fell due), and so
	// does the random stream they draw from: a run may end without a wheel ever needing a second
	// chunk. It then goes on, up to three times as long, until one did.
	maxChunks := int64(0)
	// The contract's model: every answer is checked against it. (The engine's due times are whole
	// milliseconds rounded up, and its clock is Redis's.)
	m := queuetest.NewModel(2, 5*time.Millisecond)
	since := func(start time.Time) queuetest.Span { return queuetest.Span{Start: start, End: time.Now()} }
	for step := 0; step < steps || maxChunks < 2 && step < 3*steps; step++ {
		// Each step is bounded, not the run: a loaded machine makes the run long (over two minutes
		// at load 50), a step that hangs is a bug.
		ctx := testCtx(t, time.Minute)
		var what string
		var verdict error // the model's, on the step
		start := time.Now()
		switch op := rng.IntN(18); op {
		case 0, 1, 2:
			what = "put"
			msg := message()
			id, err := q.Put(ctx, msg)
			if err == nil {
				ids = append(ids, id)
			}
			verdict = m.Put(msg, id, err, since(start))
		case 3:
			what = "batch"
			ms := []queue.Message{message(), message(), message()}
			got, err := q.PutBatch(ctx, ms)
			ids = append(ids, got...)
			verdict = m.PutBatch(ms, got, err, since(start))
		case 4, 5:
			what = "receive"
			topic := topics[rng.IntN(len(topics))]
			if rng.IntN(3) == 0 {
				topic += queue.DeadLetterSuffix
			}
			max, visibility := 1+rng.IntN(5), time.Duration(1+rng.IntN(40))*time.Millisecond
			rctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
			ds, err := q.Receive(rctx, topic, max, visibility)
			cancel()
			for _, d := range ds {
				receipts = append(receipts, d.Receipt)
			}
			verdict = m.Receive(topic, max, visibility, ds, err, since(start))
		case 6:
			what = "ack"
			r := pick(receipts)
			verdict = m.Ack([]string{r}, q.Ack(ctx, r), since(start))
		case 7:
			what = "nack"
			r, delay := pick(receipts), time.Duration(rng.IntN(2))*2*time.Second
			verdict = m.Nack(r, delay, false, q.Nack(ctx, r, delay), since(start))
		case 8:
			what = "cancel"
			id := pick(ids)
			ok, err := q.Cancel(ctx, id)
			verdict = m.Cancel(id, ok, err, since(start))
		case 9:
			what = "deliver now"
			id := pick(ids)
			ok, err := q.DeliverNow(ctx, id)
			verdict = m.DeliverNow(id, ok, err, since(start))
		case 10:
			what = "requeue"
			topic := topics[rng.IntN(len(topics))]
			var some []string
			if rng.IntN(2) == 0 {
				some = []string{pick(ids), pick(ids)}
			}
			n, err := q.Requeue(ctx, topic, some...)
			verdict = m.Requeue(topic, some, n, err, since(start))
		case 11:
			what = "purge"
			state := []queue.State{queue.Scheduled, queue.Due, queue.Dead}[rng.IntN(3)]
			if rng.IntN(4) != 0 {
				continue // purges empty the queue: not too many of them
			}
			topic := topics[rng.IntN(len(topics))]
			n, err := q.Purge(ctx, topic, state)
			verdict = m.Purge(topic, state, n, err, since(start))
		case 12:
			what = "promote"
			lead := []int{0, 2000, 4000}[rng.IntN(3)]
			if rng.IntN(10) == 0 {
				lead = int(2 * time.Hour / time.Millisecond) // the hour's messages too, ahead of their time
			}
			sh := rng.IntN(q.lay.shards())
			if err := tickScript.Run(ctx, rdb, q.lay.lockedKeys(sh), q.withStamp(append(q.cfgArgs(), "", "", lead, 1+rng.IntN(20))...)...).Err(); err != nil {
				t.Fatalf("step %d: tick: %v", step, err)
			}
		case 13:
			what = "pause or resume"
			topic := topics[rng.IntN(len(topics))]
			paused := rng.IntN(2) == 0
			var err error
			if paused {
				err = q.Pause(ctx, topic)
			} else {
				err = q.Resume(ctx, topic)
			}
			if err != nil {
				t.Fatalf("step %d: %s: %v", step, what, err)
			}
			m.Pause(topic, paused)
		case 14, 15:
			what = "bulk put"
			ms := bulk(20 + rng.IntN(230))
			got, err := q.PutBatch(ctx, ms)
			if err != nil {
				t.Fatalf("step %d: PutBatch: %v", step, err)
			}
			ids = append(ids, got...)
			verdict = m.PutBatch(ms, got, err, since(start))
		case 16:
			what = "bulk cancel"
			for range len(ids) / (2 + rng.IntN(4)) {
				id, start := pick(ids), time.Now()
				ok, err := q.Cancel(ctx, id)
				if verdict = m.Cancel(id, ok, err, since(start)); verdict != nil {
					break
				}
			}
		case 17:
			what = "purge in a small budget"
			code := rng.IntN(3)
			sh := rng.IntN(q.lay.shards())
			topic := topics[rng.IntN(len(topics))]
			reply, err := purgeScript.Run(ctx, rdb, q.lay.keys(sh), q.withStamp(topic, []string{"s", "d", "x"}[code], 1+rng.IntN(150))...).Slice()
			if err != nil || len(reply) < 3 {
				t.Fatalf("step %d: purge: %v, %v", step, reply, err)
			}
			state := []queue.State{queue.Scheduled, queue.Due, queue.Dead}[code]
			left := pageInfos(t, ctx, q, topic, state, queue.MaxPage)
			verdict = m.PurgeSome(topic, state, int(reply[2].(int64)), left, since(start))
		}
		if verdict != nil {
			t.Fatalf("step %d (%s): %v", step, what, verdict)
		}
		if step%8 == 0 {
			start := time.Now()
			ts, err := q.Topics(ctx)
			if err == nil {
				err = m.CheckTopics(ts, since(start))
			}
			topic := topics[rng.IntN(len(topics))]
			for _, state := range []queue.State{queue.Scheduled, queue.Due, queue.Leased, queue.Dead} {
				if err == nil {
					start := time.Now()
					err = m.CheckMessages(topic, state, pageInfos(t, ctx, q, topic, state, 1+rng.IntN(50)), since(start))
				}
			}
			if err != nil {
				t.Fatalf("step %d (%s): %v", step, what, err)
			}
		}
		mustCheck(t, ctx, rdb, q, fmt.Sprintf("step %d (%s)", step, what))
		maxChunks = max(maxChunks, chunksOf(t, ctx, rdb, q, topics))
	}
	t.Logf("at most %d chunks in a topic's wheel of a shard", maxChunks)
	ctx = testCtx(t, 2*time.Minute)
	if maxChunks < 2 {
		t.Fatalf("the wheels never held more than %d chunks in %d steps: the test did not split and merge them", maxChunks, 3*steps)
	}
	// What Messages lists of the scheduled ones is what the shards hold, in order, at any page size
	// (those due in the next minute aside, which may fall due while they are compared).
	if err := rdb.Do(ctx, "CLIENT", "PAUSE", 10000, "WRITE").Err(); err != nil {
		t.Fatal(err)
	}
	defer rdb.Do(ctx, "CLIENT", "UNPAUSE")
	cutoff := time.Now().Add(time.Minute)
	for _, topic := range topics {
		want := scheduledOf(t, ctx, rdb, q, topic, cutoff)
		for _, limit := range []int{1, 3, queue.MaxPage} {
			var got []string
			for _, m := range pageInfos(t, ctx, q, topic, queue.Scheduled, limit) {
				if m.DeliverAt.After(cutoff) {
					got = append(got, m.ID)
				}
			}
			if !slices.Equal(got, want) {
				t.Fatalf("Messages(%q, scheduled, %d at a time) = %v; the shards hold %v", topic, limit, got, want)
			}
		}
	}
}

// chunksOf returns the most chunks a wheel of one of topics holds in a shard of q.
func chunksOf(t *testing.T, ctx context.Context, rdb *redis.Client, q *Queue, topics []string) int64 {
	t.Helper()
	most := int64(0)
	for s := range q.lay.shards() {
		for _, topic := range topics {
			most = max(most, rdb.ZCard(ctx, "{"+q.lay.tags[s]+"}:xi:"+topic).Val())
		}
	}
	return most
}

// scheduledOf returns the IDs of topic's scheduled messages due after cutoff, in the wheels and
// ahead of time in the ready sets, in the order of (due time, ID), read from the keys.
func scheduledOf(t *testing.T, ctx context.Context, rdb *redis.Client, q *Queue, topic string, cutoff time.Time) []string {
	t.Helper()
	type m struct {
		due int64
		id  string
	}
	var all []m
	for s := range q.lay.shards() {
		p := "{" + q.lay.tags[s] + "}:"
		kv, _ := rdb.HGetAll(ctx, p+"rec").Result()
		for id, raw := range kv {
			if rec, _ := decodeRecord(raw); rec.topic == topic && rec.due > cutoff.UnixMilli() {
				if leased, _ := rdb.ZScore(ctx, p+"lease", id).Result(); leased == 0 {
					all = append(all, m{rec.due, id})
				}
			}
		}
	}
	slices.SortFunc(all, func(a, b m) int { return cmp.Or(cmp.Compare(a.due, b.due), cmp.Compare(a.id, b.id)) })
	var out []string
	for _, x := range all {
		out = append(out, x.id)
	}
	return out
}

// pages returns the IDs of every message of topic in state, paging limit at a time.
func pages(t *testing.T, ctx context.Context, q *Queue, topic string, state queue.State, limit int) []string {
	t.Helper()
	out := []string{}
	for _, m := range pageInfos(t, ctx, q, topic, state, limit) {
		out = append(out, m.ID)
	}
	return out
}

// pageInfos returns every message of topic in state, paging limit at a time.
func pageInfos(t *testing.T, ctx context.Context, q *Queue, topic string, state queue.State, limit int) []queue.MessageInfo {
	t.Helper()
	var out []queue.MessageInfo
	cursor := ""
	for pages := 0; ; pages++ {
		page, next, err := q.Messages(ctx, topic, state, cursor, limit)
		if err != nil {
			t.Fatalf("Messages(%q, %s, %q, %d): %v", topic, state, cursor, limit, err)
		}
		if len(page) > limit || pages > 100_000 {
			t.Fatalf("Messages(%q, %s, limit %d): a page of %d, page %d", topic, state, limit, len(page), pages)
		}
		out = append(out, page...)
		if next == "" {
			return out
		}
		cursor = next
	}
}

// TestIndexChunksSplitAndMerge puts a thousand messages of one topic due at the same millisecond,
// interleaved with another topic's, so that the topic's index splits into chunks (each a listpack
// of at most 128), lists them in the order of their IDs, then cancels most of them at random, so
// that chunks empty and merge, and lists the rest.
func TestIndexChunksSplitAndMerge(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	rdb := singleClient(t, s.Addr)
	q := openQueue(t, rdb, WithShards(1))
	ctx := testCtx(t, time.Minute)
	at := time.Now().Add(time.Hour)
	var ids []string
	for range 4 {
		var ms []queue.Message
		for range 250 {
			ms = append(ms, queue.Message{Topic: "t", DeliverAt: at}, queue.Message{Topic: "other", DeliverAt: at.Add(time.Duration(len(ms)) * time.Millisecond)})
		}
		got, err := q.PutBatch(ctx, ms)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < len(got); i += 2 {
			ids = append(ids, got[i])
		}
	}
	mustCheck(t, ctx, rdb, q, "the puts")
	chunks := func() int64 { return rdb.ZCard(ctx, "{"+q.lay.tags[0]+"}:xi:t").Val() }
	if n := chunks(); n < 1000/128 || n > 1000/32 {
		t.Fatalf("1000 entries in %d chunks", n)
	}
	slices.Sort(ids)
	if got := pages(t, ctx, q, "t", queue.Scheduled, 77); !slices.Equal(got, ids) {
		t.Fatalf("listed %d messages, not in the order of their IDs (same due time)", len(got))
	}
	before := chunks()
	rng := rand.New(rand.NewPCG(1, 2))
	for _, i := range rng.Perm(len(ids))[:900] {
		if ok, err := q.Cancel(ctx, ids[i]); !ok || err != nil {
			t.Fatalf("Cancel(%q) = %v, %v", ids[i], ok, err)
		}
		ids[i] = ""
	}
	mustCheck(t, ctx, rdb, q, "the cancels")
	ids = slices.DeleteFunc(ids, func(s string) bool { return s == "" })
	if got := pages(t, ctx, q, "t", queue.Scheduled, 7); !slices.Equal(got, ids) {
		t.Fatalf("after the cancels, listed %v; want %v", got, ids)
	}
	t.Logf("%d chunks for 1000 entries, %d for the 100 left", before, chunks())
	if chunks() > before/2 {
		t.Fatalf("%d chunks left for 100 entries; %d held 1000", chunks(), before)
	}
}

// TestLongIDsInTheWheel puts 300 messages with chosen IDs of up to MaxID bytes, due at one instant
// and at random, so that chunks holding IDs over 64 bytes (skip lists, not listpacks) split;
// lists them in order; cancels, delivers now and promotes many; and checks the layout after each.
func TestLongIDsInTheWheel(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	rdb := singleClient(t, s.Addr)
	q := openQueue(t, rdb, WithShards(1))
	ctx := testCtx(t, time.Minute)
	rng := rand.New(rand.NewPCG(3, 4))
	at := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	type m struct {
		due time.Time
		id  string
	}
	var all []m
	for i := range 300 {
		id := fmt.Sprintf("%d-", i) + strings.Repeat(string(rune('a'+i%26)), rng.IntN(MaxID-8))
		due := at
		if i%2 == 1 {
			due = at.Add(time.Duration(rng.IntN(3000)) * time.Millisecond)
		}
		if _, err := q.Put(ctx, queue.Message{ID: id, Topic: "t", DeliverAt: due}); err != nil {
			t.Fatal(err)
		}
		all = append(all, m{due, id})
	}
	mustCheck(t, ctx, rdb, q, "the puts")
	if n := rdb.ZCard(ctx, "{"+q.lay.tags[0]+"}:xi:t").Val(); n < 3 {
		t.Fatalf("300 entries in %d chunks", n)
	}
	slices.SortFunc(all, func(a, b m) int { return cmp.Or(a.due.Compare(b.due), cmp.Compare(a.id, b.id)) })
	want := make([]string, len(all))
	for i, x := range all {
		want[i] = x.id
	}
	if got := pages(t, ctx, q, "t", queue.Scheduled, 33); !slices.Equal(got, want) {
		t.Fatalf("listed %d messages, not in (due time, ID) order", len(got))
	}
	for i, x := range all {
		switch i % 3 {
		case 0:
			if ok, err := q.Cancel(ctx, x.id); !ok || err != nil {
				t.Fatalf("Cancel: %v, %v", ok, err)
			}
		case 1:
			if ok, err := q.DeliverNow(ctx, x.id); !ok || err != nil {
				t.Fatalf("DeliverNow: %v, %v", ok, err)
			}
		}
	}
	mustCheck(t, ctx, rdb, q, "the cancels and deliveries now")
	if err := tickScript.Run(ctx, rdb, q.lay.lockedKeys(0), q.withStamp(append(q.cfgArgs(), "", "", int(2*time.Hour/time.Millisecond), 1000)...)...).Err(); err != nil {
		t.Fatal(err)
	}
	mustCheck(t, ctx, rdb, q, "the promotion")
	if n := rdb.Exists(ctx, "{"+q.lay.tags[0]+"}:xi:t").Val(); n != 0 {
		t.Fatalf("the wheel of t is left after promoting all of it")
	}
}

// TestMessagesPageCostDoesNotGrowWithBacklog pages through a topic's scheduled messages behind a
// small and a large backlog (of its own and another topic's messages, due in the same seconds), and
// checks that a page costs Redis about the same number of commands (scripts' commands included).
func TestMessagesPageCostDoesNotGrowWithBacklog(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	rdb := singleClient(t, s.Addr)
	q := openQueue(t, rdb, WithShards(4))
	ctx := testCtx(t, time.Minute)
	at := time.Now().Add(time.Hour).Truncate(time.Second)
	put := func(n int) {
		for i := 0; i < n; i += 500 {
			var ms []queue.Message
			for k := range 500 {
				d := at.Add(time.Duration(rand.IntN(20_000)) * time.Millisecond)
				ms = append(ms, queue.Message{Topic: []string{"t", "other"}[k%2], DeliverAt: d})
			}
			if _, err := q.PutBatch(ctx, ms); err != nil {
				t.Fatal(err)
			}
		}
	}
	cost := func() int64 {
		page, next, err := q.Messages(ctx, "t", queue.Scheduled, "", 10)
		if err != nil || len(page) != 10 || next == "" {
			t.Fatalf("first page: %d, %q, %v", len(page), next, err)
		}
		before := commandsProcessed(t, rdb)
		page, _, err = q.Messages(ctx, "t", queue.Scheduled, next, 100)
		after := commandsProcessed(t, rdb)
		if err != nil || len(page) != 100 {
			t.Fatalf("page: %d, %v", len(page), err)
		}
		return after - before - 1
	}
	put(1000)
	small := cost()
	put(19_000)
	large := cost()
	t.Logf("a page of 100 costs %d commands behind 1,000 messages, %d behind 20,000", small, large)
	if large > 2*small+50 {
		t.Fatalf("a page of 100 costs %d commands behind 20,000 messages, %d behind 1,000", large, small)
	}
}

// commandsProcessed returns INFO's total_commands_processed, which counts the commands scripts run.
func commandsProcessed(t testing.TB, rdb *redis.Client) int64 {
	t.Helper()
	info, err := rdb.Info(context.Background(), "stats").Result()
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	fmt.Sscan(infoField(info, "total_commands_processed"), &n)
	return n
}

// TestPausedTopicWaitsWithoutPolling pauses a topic with a message due, and checks that Receive
// on it waits without asking Redis again and again (it runs the receive script no more than its
// first look and the re-reads after lost subscriptions need), that the pause
// survives the Queue that made it, and that Resume wakes a Receive of another Queue at once.
func TestPausedTopicWaitsWithoutPolling(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	rdb := singleClient(t, s.Addr)
	prefix := newPrefix()
	ctx := testCtx(t, 30*time.Second)
	q1, err := Open(ctx, rdb, WithPrefix(prefix), WithShards(4))
	if err != nil {
		t.Fatal(err)
	}
	if err := q1.Pause(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	if _, err := q1.Put(ctx, queue.Message{Topic: "t", Payload: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	q1.Close()
	// The waiting Queue's own client counts its receive scripts: Redis's count of all commands
	// holds housekeeping's too, which a loaded machine makes retry.
	receives := &scriptRuns{fn: receiveScript.function()}
	rdb2 := singleClient(t, s.Addr)
	rdb2.AddHook(receives)
	q2 := openQueue(t, rdb2, WithPrefix(prefix))
	got := make(chan []queue.Delivery, 1)
	go func() {
		ds, _ := q2.Receive(ctx, "t", 1, time.Minute)
		got <- ds
	}()
	// Its first look may ask each of the 4 shards, whose heads it does not know yet; after that it
	// asks again only when told (an event, or a subscription made again re-reading every shard).
	// Polling, even once a second, would ask each shard again and again in 3 s.
	const shards = 4
	testwait.Until(t, ctx, "the waiting Receive to run its script once", func() bool { return receives.n.Load() > 0 })
	before, rechecks := receives.n.Load(), metricOf(t, q2, "redis_rechecks_total")
	time.Sleep(3 * time.Second)
	n, again := receives.n.Load()-before, int64(metricOf(t, q2, "redis_rechecks_total")-rechecks)
	if n > shards-1+shards*again {
		t.Fatalf("a Receive waiting on a paused topic ran the receive script %d times in 3 s after its first (%d subscriptions made again)", n, again)
	}
	select {
	case ds := <-got:
		t.Fatalf("a paused topic delivered %v", ds)
	default:
	}
	resumed := time.Now()
	if err := openQueue(t, rdb, WithPrefix(prefix)).Resume(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	select {
	case ds := <-got:
		if len(ds) != 1 || string(ds[0].Payload) != "x" {
			t.Fatalf("after Resume, received %v", ds)
		}
		t.Logf("received %v after another process resumed the topic", time.Since(resumed))
	case <-time.After(5 * time.Second):
		t.Fatal("Resume by another process did not wake the waiting Receive")
	}
}

// scriptRuns is a go-redis hook that counts the runs of one script (FCALL of its function), alone
// or in pipelines.
type scriptRuns struct {
	passHook
	fn string
	n  atomic.Int64
}

func (h *scriptRuns) count(cmd redis.Cmder) {
	if runsScriptOf(cmd, h.fn) {
		h.n.Add(1)
	}
}

// runsScriptOf reports whether cmd runs the script whose function is fn.
func runsScriptOf(cmd redis.Cmder, fn string) bool {
	args := cmd.Args()
	if len(args) < 2 || cmd.Name() != "fcall" {
		return false
	}
	name, _ := args[1].(string)
	return name == fn
}

func (h *scriptRuns) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.count(cmd)
		return next(ctx, cmd)
	}
}

func (h *scriptRuns) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			h.count(c)
		}
		return next(ctx, cmds)
	}
}

// TestDeadLettersKeepTheirStory fails one message by nacks and another by an expired lease, and
// checks what Message and Messages say of each dead letter (topic it died on, attempts, last
// failure), that a dead letter leased from the dead-letter topic is Leased there and not Dead, and
// that Requeue of every dead letter moves the leased one too, whose receipt is stale then.
func TestDeadLettersKeepTheirStory(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	rdb := singleClient(t, s.Addr)
	q := openQueue(t, rdb, WithShards(2), WithMaxAttempts(2), WithBackoff(time.Millisecond, time.Millisecond))
	ctx := testCtx(t, 30*time.Second)
	nacked, err := q.Put(ctx, queue.Message{Topic: "t", Payload: []byte("n")})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		d := receiveOne(t, ctx, q, "t", time.Minute)
		if err := q.Nack(ctx, d.Receipt, 0); err != nil {
			t.Fatal(err)
		}
	}
	expired, err := q.Put(ctx, queue.Message{Topic: "t", Payload: []byte("x")})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		receiveOne(t, ctx, q, "t", time.Millisecond)
	}
	var m queue.MessageInfo
	deadline := time.Now().Add(5 * time.Second)
	for m.State != queue.Dead && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
		m, _ = q.Message(ctx, expired)
	}
	if m.State != queue.Dead || m.Topic != "t" || m.Attempts != 2 || m.LastFailure != "lease expired" || m.FailedAt.IsZero() {
		t.Fatalf("Message of a dead letter whose leases expired: %+v", m)
	}
	if m, err := q.Message(ctx, nacked); err != nil || m.State != queue.Dead || m.LastFailure != "nacked" || string(m.Payload) != "n" {
		t.Fatalf("Message of a nacked dead letter: %+v, %v", m, err)
	}
	// A consumer of the dead-letter topic leases one: it is Leased there, not Dead.
	d := receiveOne(t, ctx, q, "t"+queue.DeadLetterSuffix, time.Hour)
	if d.Attempt != 1 {
		t.Fatalf("first delivery of a dead letter on the dead-letter topic is attempt %d", d.Attempt)
	}
	if m, _ := q.Message(ctx, d.ID); m.State != queue.Leased || m.Topic != "t" || m.Attempts != 3 {
		t.Fatalf("a leased dead letter: %+v", m)
	}
	if got := pages(t, ctx, q, "t", queue.Dead, 10); len(got) != 1 {
		t.Fatalf("dead letters not leased: %v; want the other one", got)
	}
	if got := pages(t, ctx, q, "t"+queue.DeadLetterSuffix, queue.Leased, 10); len(got) != 1 || got[0] != d.ID {
		t.Fatalf("leased on the dead-letter topic: %v; want %q", got, d.ID)
	}
	if ti, _, _ := topicOf(ctx, q, "t"); ti.Dead != 1 {
		t.Fatalf("topic t: %+v; want 1 dead (the other is leased)", ti)
	}
	mustCheck(t, ctx, rdb, q, "a dead letter leased")
	if n, err := q.Requeue(ctx, "t"); n != 2 || err != nil {
		t.Fatalf("Requeue of every dead letter, one leased: %d, %v; want 2", n, err)
	}
	if err := q.Ack(ctx, d.Receipt); !errors.Is(err, queue.ErrUnknownReceipt) {
		t.Fatalf("Ack of the lease of a requeued dead letter: %v; want ErrUnknownReceipt", err)
	}
	mustCheck(t, ctx, rdb, q, "the requeue")
	got := map[string]bool{}
	for range 2 {
		d := receiveOne(t, ctx, q, "t", time.Minute)
		if d.Attempt != 1 {
			t.Fatalf("requeued %q delivered as attempt %d", d.ID, d.Attempt)
		}
		got[d.ID] = true
	}
	if !got[nacked] || !got[expired] {
		t.Fatalf("after Requeue, delivered %v; want %q and %q", got, nacked, expired)
	}
}

func receiveOne(t *testing.T, ctx context.Context, q *Queue, topic string, vis time.Duration) queue.Delivery {
	t.Helper()
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	ds, err := q.Receive(rctx, topic, 1, vis)
	if err != nil || len(ds) != 1 {
		t.Fatalf("Receive(%q): %v, %v", topic, ds, err)
	}
	return ds[0]
}

func topicOf(ctx context.Context, q *Queue, topic string) (queue.TopicInfo, bool, error) {
	ts, err := q.Topics(ctx)
	for _, t := range ts {
		if t.Topic == topic {
			return t, true, err
		}
	}
	return queue.TopicInfo{}, false, err
}

// TestPurgeOfManyTakesSteps purges more scheduled and dead messages than one script takes, and
// checks they are all gone, in several scripts.
func TestPurgeOfManyTakesSteps(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	rdb := singleClient(t, s.Addr)
	q := openQueue(t, rdb, WithShards(1))
	ctx := testCtx(t, time.Minute)
	n := 3*stepBudget + 7
	var ms []queue.Message
	for i := range n {
		ms = append(ms, queue.Message{Topic: "t", DeliverAt: time.Now().Add(time.Hour + time.Duration(i)*time.Millisecond), Payload: bytes.Repeat([]byte("p"), 10)})
	}
	if _, err := q.PutBatch(ctx, ms); err != nil {
		t.Fatal(err)
	}
	before := commandsProcessed(t, rdb)
	if got, err := q.Purge(ctx, "t", queue.Scheduled); got != n || err != nil {
		t.Fatalf("Purge = %d, %v; want %d", got, err, n)
	}
	t.Logf("purged %d in %d commands", n, commandsProcessed(t, rdb)-before)
	if ti, ok, _ := topicOf(ctx, q, "t"); ok {
		t.Fatalf("after Purge, topic t is listed: %+v", ti)
	}
	mustCheck(t, ctx, rdb, q, "the purge")
}

// TestOpenRefusesLayoutVersion1 checks that a deployment made by the first version of the layout
// (main's before this one) is refused with ErrIncompatible (an ErrMismatch) and a message naming
// both versions and saying what to do, not read as if it were this one, and that it is left as it
// was; and that a deployment of a newer layout is refused too.
func TestOpenRefusesLayoutVersion1(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	rdb := singleClient(t, s.Addr)
	ctx := testCtx(t, 10*time.Second)
	prefix := newPrefix()
	if err := rdb.HSet(ctx, "{"+prefix+"}:config", "version", "1", "shards", "16", "secret", "00112233445566778899aabbccddeeff").Err(); err != nil {
		t.Fatal(err)
	}
	_, err := Open(ctx, rdb, WithPrefix(prefix))
	if !errors.Is(err, ErrIncompatible) || !errors.Is(err, ErrMismatch) {
		t.Fatalf("Open of a deployment of layout version 1: %v; want ErrIncompatible", err)
	}
	for _, want := range []string{"layout version 1", "only layout version 5", "does not migrate", "delete its keys", "WithPrefix"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Open of a deployment of layout version 1: %q; want it to say %q", err, want)
		}
	}
	if v, _ := rdb.HGet(ctx, "{"+prefix+"}:config", "version").Result(); v != "1" {
		t.Errorf("the refused deployment's version is now %q", v)
	}
	newer := newPrefix()
	rdb.HSet(ctx, "{"+newer+"}:config", "version", "6", "shards", "16", "secret", "00112233445566778899aabbccddeeff")
	if _, err := Open(ctx, rdb, WithPrefix(newer)); !errors.Is(err, ErrIncompatible) || !strings.Contains(err.Error(), "newer version") {
		t.Fatalf("Open of a deployment of layout version 6: %v; want ErrIncompatible", err)
	}
	// Versions 4 and 5 only add to version 3: Open upgrades it in place.
	older := newPrefix()
	rdb.HSet(ctx, "{"+older+"}:config", "version", "3", "shards", "16", "secret", "00112233445566778899aabbccddeeff")
	q, err := Open(ctx, rdb, WithPrefix(older))
	if err != nil {
		t.Fatalf("Open of a deployment of layout version 3: %v; want it upgraded", err)
	}
	q.Close()
	if v, _ := rdb.HGet(ctx, "{"+older+"}:config", "version").Result(); v != layoutVersion {
		t.Errorf("the upgraded deployment's version is %q; want %s", v, layoutVersion)
	}
}

// TestStatsLatenessCountsEveryDueMessage checks that Stats.Lateness counts the messages made due by
// any script of any process (here: puts due at once, and a promotion by another process), not only
// this process's promotions.
func TestStatsLatenessCountsEveryDueMessage(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	rdb := singleClient(t, s.Addr)
	prefix := newPrefix()
	q := openQueue(t, rdb, WithPrefix(prefix), WithShards(2))
	other := openQueue(t, rdb, WithPrefix(prefix))
	ctx := testCtx(t, 30*time.Second)
	begin := time.Now()
	for range 5 {
		if _, err := other.Put(ctx, queue.Message{Topic: "t"}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := other.Put(ctx, queue.Message{Topic: "t", DeliverAt: time.Now().Add(1500 * time.Millisecond)}); err != nil {
		t.Fatal(err)
	}
	receiveN(t, ctx, other, "t", 6)
	st, err := q.Stats(ctx)
	// No message can be later than the time since the first was put, however slow the machine.
	if err != nil || st.Lateness.Count != 6 || st.Lateness.Max > time.Since(begin) {
		t.Fatalf("Stats = %+v, %v; want the lateness of 6 messages, none later than the %v since the first was put",
			st, err, time.Since(begin))
	}
}

// TestStatsLatenessSumsLateMessages checks that Stats.Lateness.Sum, Count and Max add up what the
// shards measured: a message promoted late (its Queue is closed, so no process promotes it; the
// tick runs by hand 600 ms after its due time) counts once, late by that much, in the Stats of
// another Queue. It waits for the Redis server's clock.
func TestStatsLatenessSumsLateMessages(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	rdb := singleClient(t, s.Addr)
	ctx := testCtx(t, time.Minute)
	// The message must still wait in the wheel when the queue closes: its second is promoted a
	// lead (250 ms) before it starts, and a message put after that goes straight to a ready set,
	// where no tick makes it late. Due half a second into the second after next, it leaves the
	// Put and Close at least 750 ms; a machine too busy for that tries again with a new queue.
	var prefix string
	var q *Queue
	var at time.Time
	for attempt := 1; ; attempt++ {
		prefix = newPrefix()
		q = openQueue(t, rdb, WithPrefix(prefix), WithShards(1))
		at = time.Now().Truncate(time.Second).Add(2500 * time.Millisecond)
		if _, err := q.Put(ctx, queue.Message{Topic: "t", DeliverAt: at}); err != nil {
			t.Fatal(err)
		}
		q.Close()
		if rdb.ZCard(ctx, "{"+q.lay.tags[0]+"}:r:t").Val() == 0 {
			break
		}
		if attempt == 10 {
			t.Fatal("in 10 attempts, the message was promoted before its queue closed every time")
		}
		t.Logf("attempt %d: the message was promoted before its queue closed; again", attempt)
	}
	time.Sleep(time.Until(at.Add(600 * time.Millisecond)))
	if err := tickScript.Run(ctx, rdb, q.lay.lockedKeys(0), q.withStamp(append(q.cfgArgs(), "", "", 0, 100)...)...).Err(); err != nil {
		t.Fatal(err)
	}
	sum, err := rdb.HGet(ctx, "{"+q.lay.tags[0]+"}:lat", "sum").Int64()
	if err != nil || sum < 500 {
		t.Fatalf("the shard's lateness sum is %d ms, %v; want the message's, 600 ms or so", sum, err)
	}
	st, err := openQueue(t, rdb, WithPrefix(prefix)).Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if l := st.Lateness; l.Count != 1 || l.Sum != time.Duration(sum)*time.Millisecond || l.Max < 500*time.Millisecond {
		t.Fatalf("Stats.Lateness = %+v; want Count 1, Sum %d ms, Max above 500 ms", l, sum)
	}
}

// TestDueCountsCountPromotedMessages checks that DueCounts counts the messages promoted to the
// ready sets ahead of their due time, which the wheel's seconds no longer hold.
func TestDueCountsCountPromotedMessages(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	rdb := singleClient(t, s.Addr)
	q := openQueue(t, rdb, WithShards(1))
	ctx := testCtx(t, 30*time.Second)
	// An hour out, so that none falls due while the test runs, however slowly.
	from := time.Now().Truncate(time.Second).Add(time.Hour)
	for i := range 4 {
		if _, err := q.Put(ctx, queue.Message{Topic: "t", DeliverAt: from.Add(time.Duration(i) * 300 * time.Millisecond)}); err != nil {
			t.Fatal(err)
		}
	}
	// Promote them now, ahead of time, as a busy owner would (a lead of two hours).
	if err := tickScript.Run(ctx, rdb, q.lay.lockedKeys(0), q.withStamp(append(q.cfgArgs(), "", "", 2*3600*1000, 100)...)...).Err(); err != nil {
		t.Fatal(err)
	}
	if n := rdb.ZCard(ctx, "{"+q.lay.tags[0]+"}:r:t").Val(); n != 4 {
		t.Fatalf("%d messages promoted; want 4", n)
	}
	counts, err := q.DueCounts(ctx, from, time.Second, 3)
	if err != nil || !slices.Equal(counts, []int{4, 0, 0}) {
		t.Fatalf("DueCounts = %v, %v; want [4 0 0]", counts, err)
	}
}
