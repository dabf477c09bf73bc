package redisq

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tockwheel/tock/internal/redistest"
	"github.com/tockwheel/tock/internal/testwait"
	"github.com/tockwheel/tock/queue"
)

// receiveN receives from topic until n messages have come or ctx ends, acking each, and returns
// them; it fails the test on an error or a delivery before its due time.
func receiveN(t testing.TB, ctx context.Context, q *Queue, topic string, n int) []queue.Delivery {
	t.Helper()
	ds, _ := receiveTimed(t, ctx, q, topic, n)
	return ds
}

// receiveTimed is receiveN that also returns when each delivery was received.
func receiveTimed(t testing.TB, ctx context.Context, q *Queue, topic string, n int) ([]queue.Delivery, []time.Time) {
	t.Helper()
	var all []queue.Delivery
	var at []time.Time
	for len(all) < n {
		ds, err := q.Receive(ctx, topic, n-len(all), time.Minute)
		now := time.Now()
		if err != nil {
			t.Fatalf("Receive after %d of %d: %v", len(all), n, err)
		}
		var receipts []string
		for _, d := range ds {
			if now.Before(d.DeliverAt) {
				t.Fatalf("%q delivered %v before its due time", d.ID, d.DeliverAt.Sub(now))
			}
			receipts = append(receipts, d.Receipt)
			at = append(at, now)
		}
		if err := q.Ack(ctx, receipts...); err != nil {
			t.Fatalf("Ack: %v", err)
		}
		all = append(all, ds...)
	}
	return all, at
}

func testCtx(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// TestWheelDeliversOnTime puts messages far enough ahead to wait in the wheel, due over two
// seconds, and checks that each is delivered at or after its due time and soon after it, that the
// due time delivered is the one put (to the millisecond, rounded up), and that a process took the
// shards and promoted them ahead of time. A loaded machine can take longer to put them than the
// lead they were given, or leave the owner's promotion to a waiting Receive: such a round proves
// nothing about the wheel, and the test runs again with a lead twice as long.
func TestWheelDeliversOnTime(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	for lead := 1500 * time.Millisecond; lead <= 12*time.Second; lead *= 2 {
		if wheelDeliversOnTime(t, s, lead) {
			return
		}
	}
	t.Fatal("with leads up to 12 s, the messages were never all in the wheel and promoted by an owner")
}

// wheelDeliversOnTime is a round of TestWheelDeliversOnTime with messages due lead from now on. It
// returns false if its premise did not hold.
func wheelDeliversOnTime(t *testing.T, s *redistest.Server, lead time.Duration) bool {
	q := openQueue(t, singleClient(t, s.Addr), WithShards(4))
	ctx := testCtx(t, 30*time.Second+2*lead)
	start := time.Now().Add(lead)
	due := make(map[string]time.Time)
	for i := range 40 {
		at := start.Add(time.Duration(i)*50*time.Millisecond + 123*time.Microsecond)
		id, err := q.Put(ctx, queue.Message{Topic: "t", Payload: []byte(fmt.Sprint(i)), DeliverAt: at})
		if err != nil {
			t.Fatal(err)
		}
		due[id] = at
	}
	st, err := q.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if time.Now().After(start) {
		t.Logf("the puts took longer than their lead of %v: again with twice the lead", lead)
		return false
	}
	if st.Scheduled != 40 {
		t.Fatalf("Stats = %+v before the first was due; want 40 scheduled", st)
	}
	var worst time.Duration
	ds, at := receiveTimed(t, ctx, q, "t", 40)
	for i, d := range ds {
		want := due[d.ID]
		if d.DeliverAt.Before(want) || d.DeliverAt.After(want.Add(time.Millisecond)) {
			t.Errorf("%q delivered with due time %v; put with %v", d.ID, d.DeliverAt, want)
		}
		worst = max(worst, at[i].Sub(want))
		delete(due, d.ID)
	}
	if len(due) != 0 {
		t.Fatalf("%d messages not delivered", len(due))
	}
	t.Logf("latest delivery %v after its due time; promoted %d, owner ticks %d, fallback ticks %d",
		worst, q.metrics.promoted.Load(), q.metrics.ticks.Load(), q.metrics.fallbackTicks.Load())
	if q.metrics.promoted.Load() == 0 || q.metrics.acquisitions.Load() == 0 {
		t.Logf("no promotion by an owner (promoted %d, acquisitions %d): again with twice the lead",
			q.metrics.promoted.Load(), q.metrics.acquisitions.Load())
		return false
	}
	return true
}

// TestIdleOwnerGivesShardsUp checks that a process lets its shards go when their next time is far,
// so that an idle deployment renews no lease.
func TestIdleOwnerGivesShardsUp(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	q := openQueue(t, singleClient(t, s.Addr), WithShards(2), WithOwnerLease(200*time.Millisecond))
	ctx := testCtx(t, time.Minute)
	put := func(d time.Duration) {
		if _, err := q.Put(ctx, queue.Message{Topic: "t", DeliverAt: time.Now().Add(d)}); err != nil {
			t.Fatal(err)
		}
	}
	// One message an hour ahead leaves a shard idle once the other is done.
	put(time.Hour)
	// A message a second or so ahead makes a shard busy, so that the process owns it: the
	// premise. On a busy machine the receive can promote it before the owner comes; then again,
	// further ahead.
	for lead := 1500 * time.Millisecond; q.metrics.acquisitions.Load() == 0; lead *= 2 {
		if lead > 12*time.Second {
			t.Fatal("never owned a shard, with messages due up to 12 s ahead")
		}
		put(lead)
		receiveN(t, ctx, q, "t", 1)
	}
	testwait.Until(t, ctx, "the process to give up its shards, with nothing due within the hour", func() bool { return q.metrics.owned.Load() == 0 })
	rdb := singleClient(t, s.Addr)
	// The locks are gone; their fence keys stay, as redislock keeps them.
	if n, err := rdb.Keys(ctx, "tock:lock:{"+q.cfg.prefix+"/*}").Result(); err != nil || len(n) != 0 {
		t.Fatalf("lock keys left: %v, %v", n, err)
	}
}

func TestOpenChecksTheDeployment(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	rdb := singleClient(t, s.Addr)
	ctx := testCtx(t, 10*time.Second)
	q, err := Open(ctx, rdb, WithPrefix("dep"), WithShards(4))
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	if _, err := Open(ctx, rdb, WithPrefix("dep"), WithShards(8)); !errors.Is(err, ErrMismatch) {
		t.Fatalf("Open with 8 shards of a deployment of 4: %v; want ErrMismatch", err)
	}
	q2, err := Open(ctx, rdb, WithPrefix("dep"))
	if err != nil {
		t.Fatal(err)
	}
	defer q2.Close()
	if q2.lay.shards() != 4 {
		t.Fatalf("Open without WithShards took %d shards; want the deployment's 4", q2.lay.shards())
	}
	// Both serve one queue.
	id, err := q.Put(ctx, queue.Message{Topic: "t", Payload: []byte("x")})
	if err != nil {
		t.Fatal(err)
	}
	if ds := receiveN(t, ctx, q2, "t", 1); ds[0].ID != id {
		t.Fatalf("received %q through the second process; want %q", ds[0].ID, id)
	}
}

func TestOpenRefusesInvalidOptions(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	rdb := singleClient(t, s.Addr)
	ctx := testCtx(t, 10*time.Second)
	for _, o := range []Option{
		WithPrefix(""), WithPrefix("a{b}"), WithShards(0), WithShards(MaxShards + 1), WithMaxAttempts(-1),
		WithBackoff(0, time.Second), WithBackoff(time.Second, time.Millisecond), WithMaxPayload(-1),
		WithMaxPayload(MaxPayloadLimit + 1), WithDeadLetterTopic(strings.Repeat("d", MaxTopic+1)), WithOwnerLease(time.Millisecond),
		WithRecheck(0), WithReplicaWait(-1, time.Second), WithReplicaWait(1, 0),
	} {
		// The engines agree: a bad option matches queue.ErrInvalid, as delayq's do.
		if _, err := Open(ctx, rdb, o); !errors.Is(err, ErrInvalidOption) || !errors.Is(err, queue.ErrInvalid) || !errors.Is(err, ErrInvalid) {
			t.Errorf("Open with an invalid option: %v; want ErrInvalidOption, which matches queue.ErrInvalid", err)
		}
	}
	if _, err := Open(ctx, redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": s.Addr}})); !errors.Is(err, ErrInvalidOption) {
		t.Errorf("Open of a Ring: %v; want ErrInvalidOption", err)
	}
	if q, err := Open(ctx, rdb, nil, WithPrefix("nil-ok")); err != nil {
		t.Errorf("Open with a nil option: %v", err)
	} else {
		q.Close()
	}
}

// dropReplies is a go-redis hook that lets the pipelines it is armed for reach Redis and run, and
// then reports a lost connection instead of their replies: a reply lost after the script ran.
type dropReplies struct {
	passHook
	armed   atomic.Int32 // the number of pipelines still to cut
	dropped atomic.Int32
}

func (h *dropReplies) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		if !runsScript(cmds) {
			return err
		}
		if h.armed.Add(-1) < 0 {
			h.armed.Add(1)
			return err
		}
		h.dropped.Add(1)
		for _, c := range cmds {
			c.SetErr(io.ErrUnexpectedEOF)
		}
		return io.ErrUnexpectedEOF
	}
}

// runsScript reports whether a pipeline runs a script: the engine's writes, not the commands
// go-redis sends on a new connection.
func runsScript(cmds []redis.Cmder) bool {
	for _, c := range cmds {
		if c.Name() == "fcall" {
			return true
		}
	}
	return false
}

// TestLostRepliesMakeNoDuplicates cuts the replies of grouped writes after they ran: the Puts
// (generated and chosen IDs, a batch) and the Acks are sent again, and each message is stored
// and delivered once.
func TestLostRepliesMakeNoDuplicates(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	hook := &dropReplies{}
	rdb.AddHook(hook)
	q := openQueue(t, rdb, WithShards(4), WithReplicaWait(0, 0))
	ctx := testCtx(t, 30*time.Second)

	hook.armed.Store(1)
	gen, err := q.Put(ctx, queue.Message{Topic: "t", Payload: []byte("generated")})
	if err != nil {
		t.Fatalf("Put whose reply was lost: %v", err)
	}
	hook.armed.Store(1)
	if _, err := q.Put(ctx, queue.Message{ID: "chosen", Topic: "t", Payload: []byte("chosen")}); err != nil {
		t.Fatalf("Put of a chosen ID whose reply was lost: %v", err)
	}
	hook.armed.Store(1)
	ids, err := q.PutBatch(ctx, []queue.Message{{Topic: "t", Payload: []byte("b1")}, {ID: "b2", Topic: "t", Payload: []byte("b2")}})
	if err != nil {
		t.Fatalf("PutBatch whose reply was lost: %v", err)
	}
	if hook.dropped.Load() != 3 {
		t.Fatalf("%d replies dropped; want 3", hook.dropped.Load())
	}
	st, err := q.Stats(ctx)
	if err != nil || st.Due != 4 {
		t.Fatalf("Stats = %+v, %v; want 4 due", st, err)
	}
	want := map[string]bool{gen: true, "chosen": true, ids[0]: true, ids[1]: true}
	ds, err := q.Receive(ctx, "t", 10, time.Minute)
	if err != nil || len(ds) != 4 {
		t.Fatalf("Receive: %d deliveries, %v; want 4", len(ds), err)
	}
	var receipts []string
	for _, d := range ds {
		if !want[d.ID] {
			t.Fatalf("delivered %q: a duplicate or unknown", d.ID)
		}
		delete(want, d.ID)
		receipts = append(receipts, d.Receipt)
	}
	hook.armed.Store(1)
	if err := q.Ack(ctx, receipts...); err != nil {
		t.Fatalf("Ack whose reply was lost: %v", err)
	}
	if st, err := q.Stats(ctx); err != nil || st != (queue.Stats{Lateness: st.Lateness}) {
		t.Fatalf("Stats after acking everything: %+v, %v", st, err)
	}
}

// ackOnLostReply is a go-redis hook that, for the pipeline it is armed for, lets it run, then has a
// consumer receive and ack what it put (through another client), and then reports a lost
// connection: the Put is retried after its message is done, as it can be when a failover delays
// the retry.
type ackOnLostReply struct {
	passHook
	armed    atomic.Bool
	consumer *Queue
	acked    atomic.Int32
	t        *testing.T
}

func (h *ackOnLostReply) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		if !runsScript(cmds) || !h.armed.CompareAndSwap(true, false) {
			return err
		}
		ds, rerr := h.consumer.Receive(ctx, "t", 10, time.Minute)
		if rerr != nil || len(ds) != 1 {
			h.t.Errorf("the consumer received %d messages, %v; want 1", len(ds), rerr)
		} else if aerr := h.consumer.Ack(ctx, ds[0].Receipt); aerr != nil {
			h.t.Errorf("Ack: %v", aerr)
		} else {
			h.acked.Add(1)
		}
		for _, c := range cmds {
			c.SetErr(io.ErrUnexpectedEOF)
		}
		return io.ErrUnexpectedEOF
	}
}

// TestPutRetriedAfterItsMessageWasAcked loses the reply of a Put whose message is received and
// acked before the Put is sent again: the retry finds the message's tombstone and stores nothing,
// so the acked message is not delivered again.
func TestPutRetriedAfterItsMessageWasAcked(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	prefix := newPrefix()
	ctx := testCtx(t, 30*time.Second)
	consumer, err := Open(ctx, singleClient(t, s.Addr), WithPrefix(prefix), WithShards(4))
	if err != nil {
		t.Fatal(err)
	}
	defer consumer.Close()
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	hook := &ackOnLostReply{consumer: consumer, t: t}
	rdb.AddHook(hook)
	producer, err := Open(ctx, rdb, WithPrefix(prefix), WithReplicaWait(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	defer producer.Close()
	for _, m := range []queue.Message{{Topic: "t", Payload: []byte("generated")}, {ID: "chosen", Topic: "t"}} {
		hook.armed.Store(true)
		if _, err := producer.Put(ctx, m); err != nil {
			t.Fatalf("Put whose reply was lost: %v", err)
		}
		if ds, err := consumer.Receive(testCtx(t, 300*time.Millisecond), "t", 10, time.Minute); len(ds) != 0 {
			t.Fatalf("the acked message %q came again: the retried Put stored it twice (%v)", ds[0].ID, err)
		}
	}
	if hook.acked.Load() != 2 {
		t.Fatalf("%d messages acked between a Put and its retry; want 2", hook.acked.Load())
	}
	// A new Put of the chosen ID is no retry: it stores the message again.
	if _, err := producer.Put(ctx, queue.Message{ID: "chosen", Topic: "t"}); err != nil {
		t.Fatal(err)
	}
	if ds := receiveN(t, ctx, consumer, "t", 1); ds[0].ID != "chosen" {
		t.Fatalf("received %q; want the chosen ID put again", ds[0].ID)
	}
}

// subscribers counts the server's connections in pub/sub mode, failing the test when ctx ends.
func subscribers(t *testing.T, ctx context.Context, rdb *redis.Client) int {
	t.Helper()
	list, err := rdb.Do(ctx, "CLIENT", "LIST", "TYPE", "pubsub").Text()
	if err != nil {
		t.Fatalf("CLIENT LIST TYPE pubsub: %v", err)
	}
	return strings.Count(list, "\n")
}

// TestPubSubConnectionsKilled kills every pub/sub connection of the server while a Receive waits:
// the message put afterwards by another process is delivered, on time (the subscription is made
// again and the shards re-read at once). On time means well within the recheck period
// (DefaultRecheck, 30 s), the bound on an announcement lost without its connection failing: a
// delivery that late would mean the killed connection went unnoticed.
func TestPubSubConnectionsKilled(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	rdb := singleClient(t, s.Addr)
	prefix := newPrefix()
	ctx := testCtx(t, 3*DefaultRecheck)
	open := func() *Queue {
		q, err := Open(ctx, singleClient(t, s.Addr), WithPrefix(prefix), WithShards(4))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { q.Close() })
		return q
	}
	consumer, producer := open(), open()
	for round := range 3 {
		got := make(chan []queue.Delivery, 1)
		go func() {
			ds, err := consumer.Receive(ctx, "t", 1, time.Minute)
			if err != nil {
				t.Error(err)
			}
			got <- ds
		}()
		time.Sleep(100 * time.Millisecond)
		// Both processes subscribed again after the previous round's kill (on a busy machine
		// that can take longer than the Receive takes to wait): the premise of this round.
		testwait.Until(t, ctx, "both processes to subscribe again", func() bool { return subscribers(t, ctx, rdb) >= 2 })
		if n, err := rdb.ClientKillByFilter(ctx, "TYPE", "pubsub").Result(); err != nil || n < 2 {
			t.Fatalf("CLIENT KILL TYPE pubsub: %d, %v; want the two processes' connections", n, err)
		}
		due := time.Now().Add(300 * time.Millisecond)
		id, err := producer.Put(ctx, queue.Message{Topic: "t", DeliverAt: due})
		if err != nil {
			t.Fatal(err)
		}
		ds := <-got
		late := time.Since(due)
		if len(ds) != 1 || ds[0].ID != id {
			t.Fatalf("round %d: received %v; want %q", round, ds, id)
		}
		if late >= DefaultRecheck/2 {
			t.Errorf("round %d: delivered %v after its due time, as late as a lost announcement", round, late)
		}
		if err := consumer.Ack(ctx, ds[0].Receipt); err != nil {
			t.Fatal(err)
		}
	}
	if consumer.metrics.reconnects.Load() == 0 {
		t.Fatal("the consumer noticed no lost subscription")
	}
}

// TestEventCountGoesBack makes every shard's event count go back, as a failover does when the
// replica that takes over had not received its master's last writes, and makes the process
// subscribe again (which a failover does too), while a Receive waits: the process takes the
// shards' replies as they are again and waits, idle, rather than asking at once for ever, and a
// message put afterwards is delivered. Before, every later reply looked older than the counts
// seen before, and an idle process sent Redis some 40,000 commands a second.
func TestEventCountGoesBack(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	rdb := singleClient(t, s.Addr)
	ctx := testCtx(t, time.Minute)
	q := openQueue(t, singleClient(t, s.Addr), WithShards(4))
	counts := func() []int64 {
		out := make([]int64, len(q.shards))
		for i := range out {
			v, err := rdb.HGet(ctx, q.lay.metaKey(i), "ver").Int64()
			if err != nil && !errors.Is(err, redis.Nil) {
				t.Fatal(err)
			}
			out[i] = v
		}
		return out
	}
	// Messages through every shard until each count is past what it goes back by.
	const back = 3
	for slices.Min(counts()) < back {
		if _, err := q.Put(ctx, queue.Message{Topic: "t"}); err != nil {
			t.Fatal(err)
		}
		receiveN(t, ctx, q, "t", 1)
	}
	// seesCounts reports whether the process's count of each shard is Redis's.
	seesCounts := func() bool {
		c := counts()
		for i, sh := range q.shards {
			if sh.version() != c[i] {
				return false
			}
		}
		return true
	}
	got := make(chan []queue.Delivery, 1)
	go func() {
		ds, err := q.Receive(ctx, "t", 1, time.Minute)
		if err != nil {
			t.Error(err)
		}
		got <- ds
	}()
	testwait.Until(t, ctx, "the process to see every shard's count", seesCounts)
	for i := range q.shards {
		if err := rdb.HIncrBy(ctx, q.lay.metaKey(i), "ver", -back).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := rdb.ClientKillByFilter(ctx, "TYPE", "pubsub").Result(); err != nil || n < 1 {
		t.Fatalf("CLIENT KILL TYPE pubsub: %d, %v; want the process's connection", n, err)
	}
	testwait.Until(t, ctx, "the process to subscribe again", func() bool {
		return q.metrics.reconnects.Load() > 0 && subscribers(t, ctx, rdb) >= 1
	})
	testwait.Until(t, ctx, "the process to take the shards' counts as they are", seesCounts)
	// Idle now: the process's scripts are its re-reads of the shards after subscribing again
	// (a peek, a tick and the schedules' read of each shard) and the waiting Receive's asks when
	// they tell it of a head, a few per shard however slow the machine; not a script after
	// another. Counted as FCALL calls: a script's own commands count in Redis's total (103 in
	// 2 s at load 20, a re-read still under way), and a spinning process sends thousands.
	scripts := func() int64 {
		info, err := rdb.Info(ctx, "commandstats").Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(info, "\r\n") {
			if v, ok := strings.CutPrefix(l, "cmdstat_fcall:calls="); ok {
				n, _ := strconv.ParseInt(v[:strings.IndexByte(v, ',')], 10, 64)
				return n
			}
		}
		t.Fatal("INFO commandstats: no cmdstat_fcall")
		return 0
	}
	const window = 2 * time.Second
	before := scripts()
	time.Sleep(window)
	if n := scripts() - before; n > 10*int64(len(q.shards)) {
		t.Errorf("an idle process ran %d scripts in %v after its shards' counts went back", n, window)
	}
	id, err := q.Put(ctx, queue.Message{Topic: "t"})
	if err != nil {
		t.Fatal(err)
	}
	if ds := <-got; len(ds) != 1 || ds[0].ID != id {
		t.Fatalf("the waiting Receive got %v; want %q", ds, id)
	}
}

// TestLargePayloads puts and receives 1 MiB payloads, several at once.
func TestLargePayloads(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	q := openQueue(t, singleClient(t, s.Addr), WithShards(4))
	ctx := testCtx(t, 60*time.Second)
	const n = 8
	payloads := make(map[string][]byte)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			p := bytes.Repeat([]byte{byte('a' + i)}, DefaultMaxPayload)
			at := time.Now().Add(time.Duration(i%2) * 1500 * time.Millisecond) // half through the wheel
			id, err := q.Put(ctx, queue.Message{Topic: "big", Payload: p, DeliverAt: at})
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			payloads[id] = p
			mu.Unlock()
		})
	}
	wg.Wait()
	if _, err := q.Put(ctx, queue.Message{Topic: "big", Payload: make([]byte, DefaultMaxPayload+1)}); !errors.Is(err, queue.ErrTooLarge) {
		t.Fatalf("Put of 1 MiB + 1: %v; want ErrTooLarge", err)
	}
	for _, d := range receiveN(t, ctx, q, "big", n) {
		if !bytes.Equal(d.Payload, payloads[d.ID]) {
			t.Fatalf("payload of %q came back as %d bytes", d.ID, len(d.Payload))
		}
	}
}

// TestMaxMemory fills a Redis with maxmemory until Put fails: the error matches ErrUnavailable and
// says why, and every message whose Put succeeded is delivered; consumers can drain a full Redis,
// through a process opened on it once it was full too (Redis refuses FUNCTION LOAD above
// maxmemory, even of a library it has).
func TestMaxMemory(t *testing.T) {
	t.Parallel()
	s := startServer(t, "--maxmemory", "4mb", "--maxmemory-policy", "noeviction")
	prefix := newPrefix()
	q := openQueue(t, singleClient(t, s.Addr), WithShards(2), WithPrefix(prefix))
	ctx := testCtx(t, 60*time.Second)
	payload := bytes.Repeat([]byte("p"), 4<<10)
	var ids []string
	var err error
	for range 10_000 {
		var id string
		id, err = q.Put(ctx, queue.Message{Topic: "t", Payload: payload, DeliverAt: time.Now().Add(time.Duration(len(ids)%3) * time.Second)})
		if err != nil {
			break
		}
		ids = append(ids, id)
	}
	if !errors.Is(err, queue.ErrUnavailable) || !strings.Contains(err.Error(), "out of memory") {
		t.Fatalf("Put over maxmemory after %d: %v; want ErrUnavailable saying out of memory", len(ids), err)
	}
	t.Logf("%d puts of 4 KiB before maxmemory: %v", len(ids), err)
	q = openQueue(t, singleClient(t, s.Addr), WithShards(2), WithPrefix(prefix))
	got := receiveN(t, ctx, q, "t", len(ids))
	seen := make(map[string]bool)
	for _, d := range got {
		seen[d.ID] = true
	}
	for _, id := range ids {
		if !seen[id] {
			t.Fatalf("%q was put and not delivered", id)
		}
	}
	if _, err := q.Put(ctx, queue.Message{Topic: "t", Payload: payload}); err != nil {
		t.Fatalf("Put after draining: %v", err)
	}
}

// TestOwnershipSpreads has three processes share sixteen shards that all get work at once: none
// takes (nearly) all. (Each usually takes some; on a loaded machine one process's timers can run
// so late that the others take every shard first, [8 0 8] once with two race-enabled runs.)
func TestOwnershipSpreads(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	prefix := newPrefix()
	// A bound on a stuck test, not a time it relies on: at load 48, 30 s did not see the 400 puts
	// and their deliveries through.
	ctx := testCtx(t, 2*time.Minute)
	var qs []*Queue
	for range 3 {
		q, err := Open(ctx, singleClient(t, s.Addr), WithPrefix(prefix), WithShards(16))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { q.Close() })
		qs = append(qs, q)
	}
	start := time.Now()
	for i := range 400 {
		at := time.Now().Add(1500*time.Millisecond + time.Duration(i)*5*time.Millisecond)
		if _, err := qs[i%3].Put(ctx, queue.Message{Topic: "t", DeliverAt: at}); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("400 puts took %v", time.Since(start))
	receiving := time.Now()
	ds, at := receiveTimed(t, ctx, qs[0], "t", 400)
	t.Logf("putting and receiving them took %v", time.Since(start))
	// However slow the machine, none waits as long as a lost announcement would (the recheck
	// period, DefaultRecheck): that would be a process that missed a shard's messages.
	for i, d := range ds {
		from := d.DeliverAt
		if receiving.After(from) {
			from = receiving
		}
		if late := at[i].Sub(from); late >= DefaultRecheck/2 {
			t.Errorf("%q received %v after it was due (or, if later, after the receiving began)", d.ID, late)
		}
	}
	var took []uint64
	var total uint64
	for _, q := range qs {
		took = append(took, q.metrics.acquisitions.Load())
		total += q.metrics.acquisitions.Load()
	}
	t.Logf("shards taken by each process: %v", took)
	for _, n := range took {
		if total == 0 || n > total*3/4 {
			t.Fatalf("shards taken by each process: %v; want none to take nearly all", took)
		}
	}
}

// TestDeadLetterOptions checks WithDeadLetterTopic (every dead letter to one topic) and
// WithMaxAttempts(0) (never a dead letter).
func TestDeadLetterOptions(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	ctx := testCtx(t, 30*time.Second)
	fail := func(q *Queue, topic string, times int) {
		t.Helper()
		for range times {
			ds, err := q.Receive(ctx, topic, 1, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			if err := q.Nack(ctx, ds[0].Receipt, 0); err != nil {
				t.Fatal(err)
			}
		}
	}
	q := openQueue(t, singleClient(t, s.Addr), WithShards(2), WithMaxAttempts(2), WithDeadLetterTopic("graveyard"))
	id, err := q.Put(ctx, queue.Message{Topic: "a", Payload: []byte("x")})
	if err != nil {
		t.Fatal(err)
	}
	fail(q, "a", 2)
	if d := receiveN(t, ctx, q, "graveyard", 1)[0]; d.ID != id || d.Topic != "graveyard" || d.Attempt != 1 {
		t.Fatalf("dead letter %q on %q, attempt %d; want %q on graveyard, attempt 1", d.ID, d.Topic, d.Attempt, id)
	}

	forever := openQueue(t, singleClient(t, s.Addr), WithShards(2), WithMaxAttempts(0))
	if _, err := forever.Put(ctx, queue.Message{Topic: "b"}); err != nil {
		t.Fatal(err)
	}
	fail(forever, "b", 20)
	if d := receiveN(t, ctx, forever, "b", 1)[0]; d.Attempt != 21 {
		t.Fatalf("attempt %d after 20 failures; want 21 on its own topic", d.Attempt)
	}
}

// TestTombstonesOnlyForSoonDueMessages checks that only a message put due within the retry window
// leaves a tombstone when it is cancelled (or acked): the Put of one due later cannot be retried
// after it is done.
func TestTombstonesOnlyForSoonDueMessages(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	rdb := singleClient(t, s.Addr)
	q := openQueue(t, rdb, WithShards(1))
	ctx := testCtx(t, 10*time.Second)
	tombstones := func() int {
		keys, err := rdb.Keys(ctx, "{"+q.lay.tags[0]+"}:done:*").Result()
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, k := range keys {
			n += int(rdb.SCard(ctx, k).Val())
		}
		return n
	}
	for _, tc := range []struct {
		in   time.Duration
		want int
	}{{time.Hour, 0}, {5 * time.Second, 1}} {
		id, err := q.Put(ctx, queue.Message{Topic: "t", DeliverAt: time.Now().Add(tc.in)})
		if err != nil {
			t.Fatal(err)
		}
		before := tombstones()
		if ok, err := q.Cancel(ctx, id); !ok || err != nil {
			t.Fatalf("Cancel: %v, %v", ok, err)
		}
		if got := tombstones() - before; got != tc.want {
			t.Errorf("cancelling a message due in %v left %d tombstones; want %d", tc.in, got, tc.want)
		}
	}
}

// TestOneCallPuttingAnIDTwiceStoresItOnce runs the put script as the writer does for concurrent
// Puts of one shard, with a chosen ID three times in the same call: the first is stored, the
// second (the same message) is a retried Put, and the third (another payload) a duplicate; the
// shard then holds one message. The script checks every ID before writing the records of the
// call at once, so an ID met earlier in the call must count as waiting.
func TestOneCallPuttingAnIDTwiceStoresItOnce(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	rdb := singleClient(t, s.Addr)
	q := openQueue(t, rdb, WithShards(1))
	ctx := testCtx(t, 10*time.Second)
	req := fmt.Sprint(time.Now().Add(time.Hour).UnixMilli())
	args := []any{"1", "", 0, 4}
	for _, m := range []struct{ id, payload string }{{"a", "x"}, {"a", "x"}, {"b", "y"}, {"a", "z"}} {
		args = putItem{id: m.id, req: req, topic: "t", payload: []byte(m.payload), nonce: "nonce"}.append(args, false)
	}
	reply, err := putScript.Run(ctx, rdb, q.lay.keys(0), q.withStamp(args...)...).Slice()
	if err != nil {
		t.Fatal(err)
	}
	var codes []string
	for i := range 4 {
		c, _ := replyStr(reply[2:], i)
		codes = append(codes, c)
	}
	if want := []string{"new", "same", "new", "dup"}; fmt.Sprint(codes) != fmt.Sprint(want) {
		t.Fatalf("put script replied %v; want codes %v", reply, want)
	}
	if st, err := q.Stats(ctx); err != nil || st.Scheduled != 2 {
		t.Fatalf("Stats = %+v, %v; want 2 scheduled", st, err)
	}
	info, err := q.Message(ctx, "a")
	if err != nil || string(info.Payload) != "x" {
		t.Fatalf("Message(a) = %+v, %v; want the first payload", info, err)
	}
}

// TestSentinelsAreQueues checks that redisq re-exports package queue's sentinels, as delayq does,
// so that code using either engine compares with the same values.
func TestSentinelsAreQueues(t *testing.T) {
	for _, c := range []struct{ ours, queues error }{
		{ErrClosed, queue.ErrClosed}, {ErrInvalid, queue.ErrInvalid}, {ErrTooLarge, queue.ErrTooLarge},
		{ErrNotFound, queue.ErrNotFound}, {ErrUnknownReceipt, queue.ErrUnknownReceipt},
		{ErrDuplicate, queue.ErrDuplicate}, {ErrUnavailable, queue.ErrUnavailable},
	} {
		if c.ours != c.queues {
			t.Errorf("redisq's %v is not queue's", c.ours)
		}
	}
	if !errors.Is(ErrInvalidOption, queue.ErrInvalid) || ErrInvalidOption.Error() != "redisq: invalid option" {
		t.Errorf("ErrInvalidOption %q does not match queue.ErrInvalid", ErrInvalidOption)
	}
}
