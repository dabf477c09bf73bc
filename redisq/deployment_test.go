package redisq

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tockwheel/tock/queue"
)

// logBuffer is a logger writing to a buffer that tests read.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

func (l *logBuffer) logger() *slog.Logger { return slog.New(slog.NewTextHandler(l, nil)) }

// metricOf returns the value of one of q's metrics.
func metricOf(t *testing.T, q *Queue, name string) float64 {
	t.Helper()
	ms, err := q.Metrics(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if m.Name == name {
			return m.Value
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// A gate stands between processes and Redis: while it is shut, their clients' dials fail, so that
// once their connections are closed (Redis restarted, or CLIENT KILL) they cannot reach Redis
// until it opens. Its zero value is open.
type gate struct {
	mu     sync.RWMutex // held for reading while a dial checks the gate and connects
	closed bool
}

// client returns a client of the Redis at addr that dials through g, closed when the test ends.
func (g *gate) client(t testing.TB, addr string) *redis.Client {
	var d net.Dialer
	rdb := redis.NewClient(&redis.Options{Addr: addr, Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
		g.mu.RLock()
		defer g.mu.RUnlock()
		if g.closed {
			return nil, errors.New("test: the gate to Redis is shut")
		}
		return d.DialContext(ctx, network, addr)
	}})
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// shut shuts g, once no dial is under way: every dial after fails, and every connection made
// through g was made before shut returned.
func (g *gate) shut() {
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
}

// open opens g again.
func (g *gate) open() {
	g.mu.Lock()
	g.closed = false
	g.mu.Unlock()
}

// cutOff shuts gs and closes every client connection to the Redis at addr (CLIENT KILL) but the
// one it kills through: until their gates open again, the processes whose clients dial through gs
// cannot reach Redis, and a connection made after cutOff returns reaches it alone.
func cutOff(t testing.TB, ctx context.Context, addr string, gs ...*gate) {
	t.Helper()
	for _, g := range gs {
		g.shut()
	}
	admin := singleClient(t, addr).Conn()
	defer admin.Close()
	for _, typ := range []string{"normal", "pubsub"} {
		if err := admin.Do(ctx, "CLIENT", "KILL", "TYPE", typ, "SKIPME", "yes").Err(); err != nil {
			t.Fatalf("CLIENT KILL TYPE %s: %v", typ, err)
		}
	}
}

// crossAck puts a message through from, receives it through via, and acks it through to: the
// processes of a deployment must take each other's receipts.
func crossAck(t *testing.T, ctx context.Context, from, via, to *Queue, topic string) error {
	t.Helper()
	if _, err := from.Put(ctx, queue.Message{Topic: topic, Payload: []byte("x")}); err != nil {
		return err
	}
	ds := receiveN(t, ctx, via, topic, 1)
	return to.Ack(ctx, ds[0].Receipt)
}

// TestRedisForgetsTheDeployment restarts the only redis-server of a deployment without
// persistence, which loses {p}:config and its secret, while processes opened before it keep the
// old secret in memory. Before, a process opened after the restart wrote a new secret, and from
// then on each refused the other's receipts as unknown, silently, for good. Now every process
// notices, at its next script, Ack or Ready, and they agree again:
//
//   - the first to notice writes the configuration again from its own (same secret), so that a
//     process opened later takes it too;
//   - a process that finds a configuration made anew by a process opened after the loss adopts it;
//   - one made anew with another shard count is refused: every call and Ready fail naming the cause,
//     the process logs it at level ERROR and redis_deployment_stale says 1.
func TestRedisForgetsTheDeployment(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	ctx := testCtx(t, time.Minute)
	prefix := newPrefix()
	// The processes opened before a loss reach Redis through a gate, which the test shuts while it
	// makes a process opened after the loss come first.
	var before, after gate
	open := func(g *gate, log *logBuffer, opts ...Option) *Queue {
		t.Helper()
		return openQueue(t, g.client(t, s.Addr), append([]Option{WithPrefix(prefix), WithShards(4), WithLogger(log.logger())}, opts...)...)
	}
	var log1, log2, log3, log4, log5 logBuffer
	p1, p2 := open(&before, &log1), open(&before, &log2)
	if err := crossAck(t, ctx, p1, p2, p1, "before"); err != nil {
		t.Fatal(err)
	}

	t.Run("noticed first by a process opened before", func(t *testing.T) {
		s.Restart()
		// p1's put meets shards without the deployment's stamp (or p2's subscriptions, made again,
		// read shards without it first): the configuration is written again, with the secret p1
		// and p2 hold.
		if _, err := p1.Put(ctx, queue.Message{Topic: "after", Payload: []byte("x")}); err != nil {
			t.Fatalf("put after the restart: %v", err)
		}
		logs := log1.String() + log2.String()
		if !strings.Contains(logs, "level=ERROR msg=\"redisq: the deployment's configuration was gone") ||
			metricOf(t, p1, "redis_deployment_lost_total")+metricOf(t, p2, "redis_deployment_lost_total") == 0 {
			t.Errorf("neither p1 nor p2 reported the lost configuration; logs:\n%s", logs)
		}
		p3 := open(&before, &log3)
		if err := crossAck(t, ctx, p3, p2, p1, "after"); err != nil {
			t.Fatalf("a receipt of p2 acked through p1 after the restart: %v", err)
		}
		if err := crossAck(t, ctx, p1, p3, p2, "after"); err != nil {
			t.Fatalf("a receipt of p3, opened after the restart, acked through p2, opened before: %v", err)
		}
	})

	t.Run("made anew by a process opened after", func(t *testing.T) {
		// p4 opens first after the loss and writes a configuration of its own, with a new secret:
		// p1, p2 and p3, which would write theirs again as soon as they noticed the loss (their
		// drivers and subscriptions run on their own), cannot reach Redis until p4 is open.
		secret := p1.dep.view.Load().secret
		before.shut()
		s.Restart()
		p4 := open(&after, &log4)
		if bytes.Equal(p4.dep.view.Load().secret, secret) {
			t.Fatal("p4, opened first after the loss, took the secret of the processes opened before it")
		}
		before.open()
		// p2 adopts p4's configuration when its subscription is made again, or else at the first
		// receipt of p4 it sees, which makes it read the configuration.
		if err := crossAck(t, ctx, p4, p4, p2, "anew"); err != nil {
			t.Fatalf("a receipt of p4, opened after the loss, acked through p2, opened before: %v", err)
		}
		if err := crossAck(t, ctx, p2, p1, p4, "anew"); err != nil {
			t.Fatalf("a receipt of p1 acked through p4: %v", err)
		}
		for i, q := range []*Queue{p1, p2} {
			if metricOf(t, q, "redis_deployment_adopted_total") == 0 {
				t.Errorf("p%d did not count the adoption", i+1)
			}
		}
		if !strings.Contains(log2.String(), "adopted it") {
			t.Errorf("p2 did not log the adoption:\n%s", log2.String())
		}
		for i, q := range []*Queue{p1, p2, p4} {
			if err := q.Ready(ctx); err != nil {
				t.Errorf("p%d not ready: %v", i+1, err)
			}
		}
	})

	t.Run("made anew with another shard count", func(t *testing.T) {
		// FLUSHALL, with every process opened before cut off from Redis (their connections
		// closed, their gates shut) until p5 has made the deployment anew with 8 shards.
		cutOff(t, ctx, s.Addr, &before, &after)
		if err := singleClient(t, s.Addr).FlushAll(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		p5 := openQueue(t, singleClient(t, s.Addr), WithPrefix(prefix), WithShards(8), WithLogger(log5.logger()))
		before.open()
		after.open()
		if _, err := p5.Put(ctx, queue.Message{Topic: "eight", Payload: []byte("x")}); err != nil {
			t.Fatal(err)
		}
		_, err := p1.Put(ctx, queue.Message{Topic: "eight", Payload: []byte("x")})
		if !errors.Is(err, queue.ErrUnavailable) || !strings.Contains(err.Error(), "made anew with 8 shards; this process has 4") {
			t.Fatalf("put through a process of 4 shards into a deployment made anew with 8: %v", err)
		}
		if err := p1.Ready(ctx); !errors.Is(err, queue.ErrUnavailable) || !strings.Contains(err.Error(), "8 shards") {
			t.Errorf("Ready of the stale process: %v; want it to name the cause", err)
		}
		// p2 notices at Ready, without a call of its own.
		if err := p2.Ready(ctx); !errors.Is(err, queue.ErrUnavailable) || !strings.Contains(err.Error(), "8 shards") {
			t.Errorf("Ready of the other stale process: %v; want it to name the cause", err)
		}
		if _, err := p2.Receive(ctx, "eight", 1, time.Minute); !errors.Is(err, queue.ErrUnavailable) {
			t.Errorf("receive through a stale process: %v", err)
		}
		if metricOf(t, p1, "redis_deployment_stale") != 1 || !strings.Contains(log1.String(), "level=ERROR msg=\"redisq: refusing to serve") {
			t.Errorf("p1's stale state is not in its metrics or log:\n%s", log1.String())
		}
		// p5 serves on: its message is there, and nothing of the stale processes was written.
		if ds := receiveN(t, ctx, p5, "eight", 1); len(ds) != 1 {
			t.Fatalf("p5 received %v", ds)
		}
		if rep, err := Check(ctx, singleClient(t, s.Addr), prefix); err != nil || len(rep.Problems) > 0 || rep.Shards != 8 {
			t.Fatalf("Check of the deployment of 8 shards: %+v, %v", rep, err)
		}
	})
}
