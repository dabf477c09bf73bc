package redisq

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tockwheel/tock/internal/testwait"
	"github.com/tockwheel/tock/queue"
)

// overlapReceives is a go-redis hook that holds the first receive script it sees alone, once
// armed, until a second one is sent (or a while has passed), and records whether one was, or
// whether a pipeline carried several: whether a Receive asks its shards at once or one after
// another.
type overlapReceives struct {
	passHook
	armed    atomic.Bool
	held     sync.Once
	inFlight atomic.Int32
	second   chan struct{}
	once     sync.Once
}

func (h *overlapReceives) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !h.armed.Load() || !runsScriptOf(cmd, receiveScript.function()) {
			return next(ctx, cmd)
		}
		if h.inFlight.Add(1) > 1 {
			h.once.Do(func() { close(h.second) })
		}
		defer h.inFlight.Add(-1)
		// Held until a second script is sent, or until the Receive gives up: a Receive that asks
		// one shard after another never sends it, however fast the machine.
		h.held.Do(func() {
			select {
			case <-h.second:
			case <-ctx.Done():
			}
		})
		return next(ctx, cmd)
	}
}

func (h *overlapReceives) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		n := 0
		for _, c := range cmds {
			if runsScriptOf(c, receiveScript.function()) {
				n++
			}
		}
		if h.armed.Load() && n > 1 {
			h.once.Do(func() { close(h.second) })
		}
		return next(ctx, cmds)
	}
}

// overlapped reports whether a second receive script was sent while one was in flight.
func (h *overlapReceives) overlapped() bool {
	select {
	case <-h.second:
		return true
	default:
		return false
	}
}

// putAcrossShards puts n messages of topic due now under IDs whose home shards cover every one of
// q's, and returns how many each shard got.
func putAcrossShards(t *testing.T, ctx context.Context, q *Queue, topic string, n int) []int {
	t.Helper()
	per := make([]int, q.lay.shards())
	for i := range n {
		id := fmt.Sprintf("%s-%d", topic, i)
		if _, err := q.Put(ctx, queue.Message{ID: id, Topic: topic}); err != nil {
			t.Fatal(err)
		}
		per[q.lay.home(id)]++
	}
	for s, c := range per {
		if c == 0 && n >= 10*len(per) {
			t.Fatalf("no message in shard %d of %d: %v", s, len(per), per)
		}
	}
	return per
}

// TestReceiveAsksDueShardsAtOnce receives a burst due in every shard: the Receive sends the
// receive scripts of the due shards at once (in one pipeline; a script sent alone is held until a
// second is sent), and takes the whole burst in one call. Before, it asked them one after another, a round trip each, and a
// consumer of 1,000 fires due in the same millisecond over 16 shards waited for 16 round trips.
func TestReceiveAsksDueShardsAtOnce(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	ctx := testCtx(t, time.Minute)
	h := &overlapReceives{second: make(chan struct{})}
	rdb := singleClient(t, s.Addr)
	rdb.AddHook(h)
	q := openQueue(t, rdb, WithShards(16))
	putAcrossShards(t, ctx, q, "t", 160)
	h.armed.Store(true)
	ds, err := q.Receive(ctx, "t", 1000, time.Minute)
	if !h.overlapped() {
		t.Fatalf("the due shards were asked one after another: no receive script was sent while another was in flight (Receive: %v)", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	if len(ds) != 160 {
		t.Errorf("one Receive of up to 1,000 took %d of the 160 due", len(ds))
	}
}

// TestReceiveSharesMaxOverShards receives a burst due in every shard with max below it: each
// Receive leases at most max and at least one (the shards asked at once share it, and those that
// gave their whole share are asked again, earliest head first, while one of them has a message due
// before the latest leased), none twice, earliest due first; the last takes what is left. With as
// many due as max, unevenly over the shards, what one Receive leaves is due no earlier than what
// it took, so that Receives one after another deliver in due order.
func TestReceiveSharesMaxOverShards(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	ctx := testCtx(t, time.Minute)
	q := openQueue(t, singleClient(t, s.Addr), WithShards(16))
	// receive receives from topic until n have come, up to max at a time (the first max first),
	// and checks each batch's order, and across batches too when across is set.
	receive := func(topic string, n int, across bool, max ...int) {
		seen := make(map[string]bool)
		var latest time.Time
		for k := 0; len(seen) < n; k++ {
			m := max[min(k, len(max)-1)]
			ds, err := q.Receive(ctx, topic, m, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			if len(ds) == 0 || len(ds) > m {
				t.Fatalf("Receive of up to %d leased %d", m, len(ds))
			}
			for _, d := range ds {
				if seen[d.ID] {
					t.Fatalf("%q leased twice", d.ID)
				}
				seen[d.ID] = true
				if d.DeliverAt.Before(latest) {
					t.Fatalf("%q, due %v, leased by Receive %d after one due at %v", d.ID, d.DeliverAt, k, latest)
				}
				latest = d.DeliverAt
			}
			if !across {
				latest = time.Time{}
			}
		}
	}
	// The process learns each shard's head from the puts' events once it has receivers for the
	// topic (before, every head is unknown, and a Receive of one asks the first shard).
	known := func(topic string) {
		short, cancel := context.WithTimeout(ctx, time.Millisecond)
		defer cancel()
		_, _ = q.Receive(short, topic, 1, time.Minute)
	}
	known("t")
	putAcrossShards(t, ctx, q, "t", 160)
	receive("t", 160, false, 1, 10, 100, 1000)
	// As many due as max, unevenly over the shards (some have more than their share of max, more
	// of them than the rest of max): the Receives take them in due order. Before 00c566a's
	// second round the shards left waited for the next Receive whatever they held
	// (TestConformanceCluster/OrderByDueTime saw 20 due taken in two out of order).
	for _, n := range []int{17, 20, 23, 31, 40} {
		topic := fmt.Sprintf("u%d", n)
		known(topic)
		putAcrossShards(t, ctx, q, topic, n)
		receive(topic, n, true, n)
	}
}

// failShard is a go-redis hook that fails the receive scripts of one shard (by its meta key),
// alone or in a pipeline, whose other commands it sends.
type failShard struct {
	passHook
	key string
}

// fails reports whether cmd is to fail, and fails it.
func (h *failShard) fails(cmd redis.Cmder) bool {
	if args := cmd.Args(); runsScriptOf(cmd, receiveScript.function()) && len(args) > 3 && args[3] == h.key {
		cmd.SetErr(errors.New("refused by the test"))
		return true
	}
	return false
}

func (h *failShard) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.fails(cmd) {
			return cmd.Err()
		}
		return next(ctx, cmd)
	}
}

func (h *failShard) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		var rest []redis.Cmder
		for _, c := range cmds {
			if !h.fails(c) {
				rest = append(rest, c)
			}
		}
		if len(rest) == 0 {
			return nil
		}
		return next(ctx, rest)
	}
}

// TestReceiveGoesOnPastAFailingShard receives one message with every shard due while the receive
// scripts of the first fail: the Receive asks the other shards and gets one, as it did when it
// asked them one after another; then the rest, with shard 0's script failing in the pipeline of
// the others. A first version of the change that asks them at once gave up
// when the shards of its first round all failed, though it had asked only as many as max.
func TestReceiveGoesOnPastAFailingShard(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	ctx := testCtx(t, time.Minute)
	rdb := singleClient(t, s.Addr)
	q := openQueue(t, rdb, WithShards(4))
	per := putAcrossShards(t, ctx, q, "t", 40)
	rdb.AddHook(&failShard{key: q.lay.metaKey(0)})
	for range 3 {
		ds, err := q.Receive(ctx, "t", 1, time.Minute)
		if err != nil {
			t.Fatalf("Receive with shard 0 failing: %v", err)
		}
		if len(ds) != 1 {
			t.Fatalf("Receive of one with shard 0 failing: %d deliveries", len(ds))
		}
		if q.lay.home(ds[0].ID) == 0 {
			t.Fatalf("Receive delivered %q, of shard 0, whose scripts fail", ds[0].ID)
		}
	}
	// A Receive of more asks the 4 shards in one pipeline, whose script on shard 0 fails: it
	// delivers what the others leased.
	ds, err := q.Receive(ctx, "t", 100, time.Minute)
	if err != nil {
		t.Fatalf("Receive of 100 with shard 0 failing: %v", err)
	}
	want := 40 - 3 - per[0]
	if len(ds) != want {
		t.Fatalf("Receive of 100 with shard 0 failing delivered %d; want the %d of the other shards", len(ds), want)
	}
	for _, d := range ds {
		if q.lay.home(d.ID) == 0 {
			t.Fatalf("Receive delivered %q, of shard 0, whose scripts fail", d.ID)
		}
	}
}

// TestReceiveAfterLibraryFlushed runs each way of calling a script after Redis forgot the
// function library, as a master whose data is restored without it would: every call meets
// "Function not found", the library is loaded, and the call is made again. Grouped Puts (the
// writer's pipelines), a Receive from 4 shards in one pipeline, and an Ack (one script) each
// follow a FUNCTION FLUSH; every message is delivered once and acked.
func TestReceiveAfterLibraryFlushed(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	ctx := testCtx(t, time.Minute)
	rdb := singleClient(t, s.Addr)
	q := openQueue(t, rdb, WithShards(4))
	flush := func() {
		t.Helper()
		if err := rdb.FunctionFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	}
	flush()
	putAcrossShards(t, ctx, q, "t", 40)
	flush()
	ds, err := q.Receive(ctx, "t", 100, time.Minute)
	if err != nil {
		t.Fatalf("Receive after FUNCTION FLUSH: %v", err)
	}
	seen := make(map[string]bool)
	var receipts []string
	for _, d := range ds {
		if seen[d.ID] {
			t.Fatalf("%q delivered twice", d.ID)
		}
		seen[d.ID] = true
		receipts = append(receipts, d.Receipt)
	}
	if len(seen) != 40 {
		t.Fatalf("Receive after FUNCTION FLUSH delivered %d of 40", len(seen))
	}
	flush()
	if err := q.Ack(ctx, receipts...); err != nil {
		t.Fatalf("Ack after FUNCTION FLUSH: %v", err)
	}
	if st, err := q.Stats(ctx); err != nil || st.Scheduled+st.Due+st.Leased != 0 {
		t.Fatalf("%+v left after every ack (%v)", st, err)
	}
}

// spreadN is SPREADN of lua/prelude.lua.
const spreadN = 16

// TestReceiveSpreadsLargeLeases leases many messages of one shard at once, then few: the receive
// script gives the shard's records and lease sets their hashed encodings before it reads and adds
// SPREADN or more (see SPREAD in the prelude), and leaves no trace of how: the sets hold exactly
// the leases, the records exactly the messages. Fewer leave a listpack as it is.
func TestReceiveSpreadsLargeLeases(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	ctx := testCtx(t, time.Minute)
	rdb := singleClient(t, s.Addr)
	if !strings.Contains(lua("prelude"), fmt.Sprintf("\nlocal SPREADN = %d\n", spreadN)) {
		t.Fatalf("lua/prelude.lua's SPREADN is not %d: change spreadN", spreadN)
	}
	q := openQueue(t, rdb, WithShards(1))
	encoding := func(key string) string {
		t.Helper()
		e, err := rdb.ObjectEncoding(ctx, key).Result()
		if err != nil {
			t.Fatalf("OBJECT ENCODING %s: %v", key, err)
		}
		return e
	}
	p := strings.TrimSuffix(q.lay.metaKey(0), "meta")
	for _, c := range []struct {
		topic     string
		n         int
		set, hash string
	}{
		{"a", spreadN - 1, "listpack", "listpack"},
		{"b", spreadN, "skiplist", "hashtable"},
	} {
		due := time.Now().Add(200 * time.Millisecond)
		for i := range c.n {
			// Short records, as a schedule's fires without a payload have: a listpack keeps them.
			m := queue.Message{ID: fmt.Sprintf("%s-%d", c.topic, i), Topic: c.topic, DeliverAt: due}
			if _, err := q.Put(ctx, m); err != nil {
				t.Fatal(err)
			}
		}
		ds, err := q.Receive(ctx, c.topic, c.n, time.Minute)
		if err != nil || len(ds) != c.n {
			t.Fatalf("%s: received %d of %d: %v", c.topic, len(ds), c.n, err)
		}
		if e := encoding(p + "l:" + c.topic); e != c.set {
			t.Errorf("%s: the topic's lease set is a %s, want a %s", c.topic, e, c.set)
		}
		if e := encoding(p + "rec"); e != c.hash {
			t.Errorf("%s: the records are a %s, want a %s", c.topic, e, c.hash)
		}
		leases, err := rdb.ZRange(ctx, p+"l:"+c.topic, 0, -1).Result()
		if err != nil || len(leases) != c.n {
			t.Fatalf("%s: the lease set holds %d members, want the %d leases (%v)", c.topic, len(leases), c.n, err)
		}
		for _, id := range leases {
			if !strings.HasPrefix(id, c.topic+"-") {
				t.Fatalf("%s: the lease set holds %d bytes that are no lease", c.topic, len(id))
			}
		}
	}
	if n, err := rdb.ZCard(ctx, p+"lease").Result(); err != nil || n != 2*spreadN-1 {
		t.Fatalf("the shard's lease set holds %d members, want %d (%v)", n, 2*spreadN-1, err)
	}
	if n, err := rdb.HLen(ctx, p+"rec").Result(); err != nil || n != 2*spreadN-1 {
		t.Fatalf("the shard's records are %d, want %d (%v)", n, 2*spreadN-1, err)
	}
}

// countReceives is a go-redis hook that counts the receive scripts sent, alone or in pipelines.
type countReceives struct {
	passHook
	n atomic.Int32
}

func (h *countReceives) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if runsScriptOf(cmd, receiveScript.function()) {
			h.n.Add(1)
		}
		return next(ctx, cmd)
	}
}

func (h *countReceives) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			if runsScriptOf(c, receiveScript.function()) {
				h.n.Add(1)
			}
		}
		return next(ctx, cmds)
	}
}

// TestReceiveReturnsABurstOfOneInstantAfterOneRound receives a burst due in the same millisecond
// in every shard, unevenly, with max below it and above what one round can lease (some shards
// hold less than their share of max, others more): the Receive returns what its one round of
// scripts leased, since nothing it leaves is due earlier than what it took, and the next takes the
// rest. Before, it asked the shards that gave their whole share again: with several consumers
// those were mostly emptied meanwhile, and the messages of the first round waited for the second
// (1,000 fires of one second over three tockds and four consumers: 5 to 10 ms).
func TestReceiveReturnsABurstOfOneInstantAfterOneRound(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	ctx := testCtx(t, time.Minute)
	h := &countReceives{}
	rdb := singleClient(t, s.Addr)
	rdb.AddHook(h)
	const shards, max = 16, 16 * minShare
	q := openQueue(t, rdb, WithShards(shards))
	// Due in the same millisecond (a due time in the past would be the put's).
	at := time.Now().Add(time.Second).Truncate(time.Millisecond)
	// 10, 30 or 50 messages in each shard, around the share of minShare (25).
	per, n, total := make([]int, shards), 0, 0
	for s := range shards {
		total += 10 + s%3*20
	}
	var batch []queue.Message
	for i := 0; n < total; i++ {
		id := fmt.Sprintf("b-%d", i)
		s := q.lay.home(id)
		if per[s] == 10+s%3*20 {
			continue
		}
		batch = append(batch, queue.Message{ID: id, Topic: "b", DeliverAt: at})
		per[s]++
		n++
	}
	// At once, so that they are put before their due time (PutBatch would put them in one shard).
	errs := make(chan error, len(batch))
	for _, m := range batch {
		go func() {
			_, err := q.Put(ctx, m)
			errs <- err
		}()
	}
	for range batch {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	share, want, over := max/shards, 0, false
	for _, c := range per {
		want += min(c, share)
		over = over || c > share
	}
	if want >= max || !over {
		t.Fatalf("premise: the shards hold %v; one round of shares of %d should lease less than %d and leave some", per, share, max)
	}
	time.Sleep(time.Until(at))
	seen := make(map[string]bool)
	ds, err := q.Receive(ctx, "b", max, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range ds {
		if !d.DeliverAt.Equal(at) {
			t.Fatalf("%q is due at %v, not at %v with the others", d.ID, d.DeliverAt, at)
		}
	}
	if len(ds) != want || h.n.Load() != shards {
		t.Errorf("the first Receive of up to %d leased %d with %d receive scripts; want %d with one per shard (%d)", max, len(ds), h.n.Load(), want, shards)
	}
	for _, d := range ds {
		seen[d.ID] = true
	}
	for len(seen) < n {
		ds, err := q.Receive(ctx, "b", max, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range ds {
			if seen[d.ID] {
				t.Fatalf("%q leased twice", d.ID)
			}
			seen[d.ID] = true
		}
	}
}

// TestReceiveFloorFindsWhatNoEventTold makes a process believe that a shard holds nothing ready of a
// topic while a message is there, as a lost event would (no event tells of it again: the events of
// later messages tell only of heads earlier than the one there), and receives: the schedule
// driver's periodic read of the shard, at least once a recheck period, finds the message for the
// waiting Receive, and warns that no event told of it. Without the floor the Receive waited for
// good (TestHTTPConformanceRedis/ScheduleEveryTimeOnce once saw no fire for 120 s).
func TestReceiveFloorFindsWhatNoEventTold(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	ctx := testCtx(t, time.Minute)
	var log logBuffer
	const recheck = 500 * time.Millisecond
	q := openQueue(t, singleClient(t, s.Addr), WithShards(1), WithRecheck(recheck), WithLogger(log.logger()))
	ts := q.topic("t")
	for round := 1; ; round++ {
		if round > 5 {
			t.Fatal("the subscription was lost in each of 5 rounds")
		}
		ts.mu.Lock()
		told := ts.events + 1
		ts.mu.Unlock()
		id, err := q.Put(ctx, queue.Message{Topic: "t"})
		if err != nil {
			t.Fatal(err)
		}
		testwait.Until(t, ctx, "the Put's event", func() bool {
			ts.mu.Lock()
			defer ts.mu.Unlock()
			return ts.events >= told
		})
		// Due more than a recheck period before the floor's read finds it (which warns then), and
		// then forgotten.
		time.Sleep(recheck + 100*time.Millisecond)
		ts.mu.Lock()
		ts.heads[0] = headNone
		ts.mu.Unlock()
		lost := metricOf(t, q, "redis_pubsub_reconnects_total")
		ds, err := q.Receive(ctx, "t", 1, time.Minute)
		if err != nil {
			t.Fatalf("Receive with the shard's head forgotten: %v (the floor did not find it)", err)
		}
		if err := q.Ack(ctx, ds[0].Receipt); err != nil {
			t.Fatal(err)
		}
		if metricOf(t, q, "redis_pubsub_reconnects_total") != lost {
			t.Logf("round %d: the subscription was lost meanwhile, which made the heads unknown; again", round)
			continue
		}
		if ds[0].ID != id {
			t.Fatalf("received %q; want %q", ds[0].ID, id)
		}
		if !strings.Contains(log.String(), "no event told of") {
			t.Fatalf("received, but the floor's find is not in the log (the test's premise):\n%s", log.String())
		}
		return
	}
}

// lateReply is a go-redis hook that lets receive scripts run and holds their replies for delay,
// then fails the call if its context ended meanwhile, as go-redis does with a reply that comes
// after the context's deadline (the read's deadline is the context's), though the script ran.
type lateReply struct {
	passHook
	delay time.Duration
}

func (h lateReply) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if err != nil || !runsScriptOf(cmd, receiveScript.function()) {
			return err
		}
		time.Sleep(h.delay)
		if err := ctx.Err(); err != nil {
			cmd.SetErr(err)
			return err
		}
		return nil
	}
}

// TestReceiveReturnsWhatItLeasedAfterItsDeadline receives a due message with a context that ends
// while the receive script's reply is on its way: the Receive returns the message the script
// leased. Before, it failed with the context's error, and the message stayed leased to no one
// until its visibility ran out (a consumer of tockd whose long poll ended in a burst lost fires
// so, until they came again as second attempts).
func TestReceiveReturnsWhatItLeasedAfterItsDeadline(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	ctx := testCtx(t, time.Minute)
	rdb := singleClient(t, s.Addr)
	rdb.AddHook(lateReply{delay: 300 * time.Millisecond})
	q := openQueue(t, rdb, WithShards(1))
	id, err := q.Put(ctx, queue.Message{Topic: "t"})
	if err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	ds, err := q.Receive(short, "t", 1, time.Hour)
	if err != nil || len(ds) != 1 || ds[0].ID != id {
		t.Fatalf("Receive whose context ended while its script's reply came = %v, %v; want %q", ds, err, id)
	}
}

// TestLeasedSplicesAsParseAndEncode checks the receive script's splice of a record it leases
// (leased, in the prelude) against what parse and encode made of it before: the same record, its
// attempts counted and its token replaced, for records of every shape (headers, an origin, a
// failure, aliases, commas and semicolons in the topic, headers and payload), and the same answer
// to whether it is a dead letter's.
func TestLeasedSplicesAsParseAndEncode(t *testing.T) {
	t.Parallel()
	out := runOnRecords(t, `
for i = 2, #ARGV do
  local rec, tok = ARGV[i], ARGV[1]
  local r = parse(rec)
  r.att = r.att + 1
  r.tok = tok
  local want = encode(r, payload(rec, r))
  local got, dead = leased(rec, tok)
  if got ~= want then return {'record', rec, got, want} end
  if dead ~= (r.origin ~= '') then return {'dead', rec, tostring(dead)} end
end
return {'ok'}`)
	if out[0] != "ok" {
		t.Fatalf("leased(%q) differs from parse and encode (%s): %q", out[1], out[0], out[2:])
	}
}

// TestParseAckAsParse checks the ack script's decoding of a record, which reads only the fields
// an ack needs, against parse, on random records of every form.
func TestParseAckAsParse(t *testing.T) {
	t.Parallel()
	out := runOnRecords(t, `
for i = 2, #ARGV do
  local rec = ARGV[i]
  local r, a = parse(rec), parse_ack(rec)
  for _, f in ipairs({'due', 'tok', 'aux', 'nonce', 'fail', 'origin', 'topic'}) do
    if a[f] ~= r[f] then return {f, rec, tostring(a[f]), tostring(r[f])} end
  end
end
return {'ok'}`)
	if out[0] != "ok" {
		t.Fatalf("parse_ack(%q).%s = %q; parse has %q", out[1], out[0], out[2], out[3])
	}
}

// runOnRecords runs body after the prelude on a fresh Redis, with a lease token then 500 random
// records of every form (origins, topics and headers with commas and semicolons, failures, dead
// letters) as ARGV, and returns its reply.
func runOnRecords(t *testing.T, body string) []string {
	t.Helper()
	s := startServer(t)
	ctx := testCtx(t, time.Minute)
	rdb := singleClient(t, s.Addr)
	const stamp = "s1"
	if err := rdb.HSet(ctx, "{lt}:meta", "dep", stamp).Err(); err != nil {
		t.Fatal(err)
	}
	pick := func(r *rand.Rand, vs ...string) string { return vs[r.IntN(len(vs))] }
	text := func(r *rand.Rand, n int) string {
		const alphabet = "ab,;-_0123456789\x00\xff"
		b := make([]byte, r.IntN(n+1))
		for i := range b {
			b[i] = alphabet[r.IntN(len(alphabet))]
		}
		return string(b)
	}
	r := rand.New(rand.NewPCG(1, 2))
	var recs []string
	for range 500 {
		origin, topic, hdr := pick(r, "", "", "orders", "a,b;c"), "t"+text(r, 8), pick(r, "", text(r, 12))
		h := ""
		if hdr != "" {
			h = "," + strconv.Itoa(len(hdr))
		}
		header := strings.Join([]string{
			pick(r, "1764282478001", "0", "-5", "9214646400000"),
			pick(r, "", "1764282478000", "-7"),
			strconv.Itoa(r.IntN(1000)),
			pick(r, "", newToken()),
			pick(r, "", "3."+newToken()),
			pick(r, "", "y"+newNonce(), "n"+newNonce()),
			pick(r, "", "x1764282478001", "N17"),
			pick(r, "", "1764282478001.3"),
			strconv.Itoa(len(origin)),
			strconv.Itoa(len(topic)),
		}, ",")
		recs = append(recs, header+h+";"+origin+topic+hdr+text(r, 40))
	}
	// The prelude's own KEYS and ARGV hide EVAL's from the lines after it.
	script := redis.NewScript("#!lua\nlocal keys, argv = KEYS, ARGV\n" + lua("prelude") +
		"\nlocal refused = begin(keys, argv)\nif refused then return refused end\n" + body)
	out, err := script.Run(ctx, rdb, []string{"{lt}:meta", "{lt}:guard"}, append([]any{stamp, newToken()}, anySlice(recs)...)...).StringSlice()
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func anySlice(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

// putOneShard puts n messages of topic "t" in one batch, which one shard holds (a batch's
// messages share their shard), and returns that shard.
func putOneShard(t *testing.T, ctx context.Context, q *Queue, n int) int {
	t.Helper()
	msgs := make([]queue.Message, n)
	for i := range msgs {
		msgs[i] = queue.Message{ID: fmt.Sprintf("m%d", i), Topic: "t", Payload: []byte("p")}
	}
	if _, err := q.PutBatch(ctx, msgs); err != nil {
		t.Fatal(err)
	}
	return q.lay.home(msgs[0].ID)
}

// TestReceiveTokensDiffer leases 300 messages of one shard with one receive script, twice over
// (the first leases nacked): every lease token differs from every other, within a script (the
// caller's base and the lease's rank) and across scripts (another base), and the receipts made
// from them ack each message once.
func TestReceiveTokensDiffer(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	ctx := testCtx(t, time.Minute)
	q := openQueue(t, singleClient(t, s.Addr))
	const n = 300
	shard := putOneShard(t, ctx, q, n)
	tokens := make(map[string]bool)
	lease := func() []queue.Delivery {
		ds, err := q.receiveShard(ctx, q.topic("t"), shard, n, time.Minute.Milliseconds(), nil)
		if err != nil || len(ds) != n {
			t.Fatalf("the receive script leased %d of %d: %v", len(ds), n, err)
		}
		for _, d := range ds {
			rc, ok := q.signer().verify(d.Receipt, q.lay.shards())
			if !ok {
				t.Fatalf("the receipt of %q does not verify", d.ID)
			}
			if tokens[rc.token] {
				t.Fatalf("lease token %q given twice", rc.token)
			}
			tokens[rc.token] = true
		}
		return ds
	}
	first := lease()
	for _, d := range first {
		if err := q.Nack(ctx, d.Receipt, time.Millisecond); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(10 * time.Millisecond)
	second := lease()
	for _, d := range first {
		if err := q.Ack(ctx, d.Receipt); !errors.Is(err, queue.ErrUnknownReceipt) {
			t.Fatalf("Ack of %q by the receipt of its first lease, while its second is current: %v", d.ID, err)
		}
	}
	receipts := make([]string, 0, n)
	for _, d := range second {
		receipts = append(receipts, d.Receipt)
	}
	if err := q.Ack(ctx, receipts...); err != nil {
		t.Fatal(err)
	}
	if st, err := q.Stats(ctx); err != nil || st.Leased+st.Due+st.Scheduled != 0 {
		t.Fatalf("after the acks: %+v, %v", st, err)
	}
}

// TestAckInChunksAsOneAtATime acks 1,200 leases of one shard in one Ack (one ack script, taken a
// thousand receipts at a time), with receipts repeated across the chunks' boundary and a stale one
// before its message's current receipt: each is answered as one receipt at a time would be (the
// repeated ones find their message done, the stale one fails alone), nothing is left leased or
// due, and the tombstones of the messages acked make a retry of their Put a duplicate no longer.
func TestAckInChunksAsOneAtATime(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	ctx := testCtx(t, time.Minute)
	q := openQueue(t, singleClient(t, s.Addr))
	const n = 1200
	shard := putOneShard(t, ctx, q, n)
	var ds []queue.Delivery
	for len(ds) < n {
		got, err := q.receiveShard(ctx, q.topic("t"), shard, 600, time.Minute.Milliseconds(), nil)
		if err != nil || len(got) == 0 {
			t.Fatalf("the receive script leased %d: %v", len(got), err)
		}
		ds = append(ds, got...)
	}
	// Message 5 is leased again: its first receipt is stale.
	if err := q.Nack(ctx, ds[5].Receipt, time.Millisecond); err != nil {
		t.Fatal(err)
	}
	var again []queue.Delivery
	for len(again) == 0 {
		got, err := q.receiveShard(ctx, q.topic("t"), shard, 1, time.Minute.Milliseconds(), nil)
		if err != nil {
			t.Fatal(err)
		}
		again = got
	}
	if again[0].ID != ds[5].ID {
		t.Fatalf("leased %q again, want %q", again[0].ID, ds[5].ID)
	}
	stale := ds[5].Receipt
	receipts := []string{stale}
	for i, d := range ds {
		if i != 5 {
			receipts = append(receipts, d.Receipt)
		}
		if i == 7 {
			receipts = append(receipts, ds[2].Receipt) // repeated in the same chunk
		}
	}
	receipts = append(receipts, again[0].Receipt, ds[0].Receipt, ds[999].Receipt, ds[1000].Receipt)
	err := q.Ack(ctx, receipts...)
	var ae *queue.AckError
	if !errors.As(err, &ae) || len(ae.Failed) != 1 || ae.Failed[0].Receipt != stale {
		t.Fatalf("Ack: %v; want only the stale receipt of %q failed", err, ds[5].ID)
	}
	if st, err := q.Stats(ctx); err != nil || st.Leased+st.Due+st.Scheduled != 0 {
		t.Fatalf("after the acks: %+v, %v", st, err)
	}
	// Each message acked left its tombstone (its Put was due within the window), in sets that
	// expire.
	rdb := singleClient(t, s.Addr)
	keys, err := rdb.Keys(ctx, "{"+q.lay.prefix+"/*}:done:*").Result()
	if err != nil {
		t.Fatal(err)
	}
	var tombs int64
	for _, k := range keys {
		tombs += rdb.SCard(ctx, k).Val()
		if ttl := rdb.TTL(ctx, k).Val(); ttl <= 0 {
			t.Errorf("tombstones %s expire in %v", k, ttl)
		}
	}
	if tombs != n {
		t.Errorf("%d tombstones in %v, want %d", tombs, keys, n)
	}
}

// loseReceiveReplies is a go-redis hook that lets the receive scripts it is armed for reach Redis
// and run, and then reports a lost connection instead of their replies (alone, or every reply of
// the pipeline that carried them): a reply lost after the script ran, as go-redis's ReadTimeout
// can lose one of several MiB on a busy machine.
type loseReceiveReplies struct {
	passHook
	armed atomic.Int32 // the number of calls still to cut
	lost  atomic.Int32
}

func (h *loseReceiveReplies) take(cmds []redis.Cmder) bool {
	for _, c := range cmds {
		if runsScriptOf(c, receiveScript.function()) {
			if h.armed.Add(-1) < 0 {
				h.armed.Add(1)
				return false
			}
			h.lost.Add(1)
			return true
		}
	}
	return false
}

func (h *loseReceiveReplies) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if !h.take([]redis.Cmder{cmd}) {
			return err
		}
		cmd.SetErr(io.ErrUnexpectedEOF)
		return io.ErrUnexpectedEOF
	}
}

func (h *loseReceiveReplies) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		if !h.take(cmds) {
			return err
		}
		for _, c := range cmds {
			c.SetErr(io.ErrUnexpectedEOF)
		}
		return io.ErrUnexpectedEOF
	}
}

// TestReceiveReclaimsLeasesOfALostReply loses the replies of a Receive's scripts after they ran:
// those of a pipeline to 4 shards, then that of a script sent alone. The Receive asks each shard
// for the leases its script made under its token base and returns them, each once and as a first
// attempt. Before, they stayed leased to no one until their visibility ran out (a minute here) and
// the Receive waited, and TestLargePayloads failed so at load 10.
func TestReceiveReclaimsLeasesOfALostReply(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	ctx := testCtx(t, time.Minute)
	rdb := singleClient(t, s.Addr)
	h := &loseReceiveReplies{}
	rdb.AddHook(h)
	q := openQueue(t, rdb, WithShards(4))
	for _, c := range []struct {
		topic string
		n     int
	}{{"pipeline", 40}, {"alone", 1}} {
		putAcrossShards(t, ctx, q, c.topic, c.n)
		before := h.lost.Load()
		h.armed.Store(1)
		seen := make(map[string]bool)
		for len(seen) < c.n {
			rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			ds, err := q.Receive(rctx, c.topic, 100, time.Minute)
			cancel()
			if err != nil {
				t.Fatalf("%s: Receive after %d of %d, a reply lost: %v (the rest leased to no one)", c.topic, len(seen), c.n, err)
			}
			for _, d := range ds {
				if seen[d.ID] || d.Attempt != 1 {
					t.Fatalf("%s: %q delivered again (attempt %d)", c.topic, d.ID, d.Attempt)
				}
				seen[d.ID] = true
			}
		}
		if h.lost.Load() == before {
			t.Fatalf("%s: no receive reply was lost: the test did not test", c.topic)
		}
	}
	if q.metrics.reclaims.Load() == 0 {
		t.Fatal("no reclaim counted")
	}
}
