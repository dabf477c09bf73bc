package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tockwheel/tock/client"
	"github.com/tockwheel/tock/delayq"
	"github.com/tockwheel/tock/internal/redistest"
	"github.com/tockwheel/tock/queue"
	"github.com/tockwheel/tock/queue/queuetest"
	"github.com/tockwheel/tock/redisq"
	"github.com/tockwheel/tock/server"
)

// The conformance suite of package queue, end to end: against an engine made
// of the Go client talking over HTTP to a Server in front of each engine,
// which proves that the HTTP API keeps the contract. (delayq and redisq run
// the suite against the engines themselves.)

// openDelayq opens a delayq queue configured as queuetest requires, with
// payloads up to maxPayload bytes.
func openDelayq(t *testing.T, maxPayload int) *delayq.Queue {
	q, err := delayq.Open(t.TempDir(), delayq.WithNoSync(),
		delayq.WithMaxAttempts(queuetest.MaxAttempts),
		delayq.WithBackoff(queuetest.Backoff, 4*queuetest.Backoff),
		delayq.WithMaxPayload(maxPayload))
	if err != nil {
		t.Fatal(err)
	}
	return q
}

func TestHTTPConformance(t *testing.T) {
	queuetest.Run(t, func(t *testing.T) queue.Engine {
		// Payloads travel as JSON strings (see httpEngine), so the server's
		// limit is queuetest's plus the two quotes.
		return serveOverHTTP(t, openDelayq(t, queuetest.MaxPayload+2), queuetest.MaxPayload+2)
	})
}

// TestHTTPConformanceRedis is TestHTTPConformance with the server in front
// of the redisq engine on a real redis-server.
func TestHTTPConformanceRedis(t *testing.T) {
	s := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr})
	t.Cleanup(func() { rdb.Close() })
	var prefixes atomic.Int64
	queuetest.Run(t, func(t *testing.T) queue.Engine {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		q, err := redisq.Open(ctx, rdb, redisq.WithPrefix(fmt.Sprintf("http%d", prefixes.Add(1))),
			redisq.WithMaxAttempts(queuetest.MaxAttempts),
			redisq.WithBackoff(queuetest.Backoff, 4*queuetest.Backoff),
			redisq.WithMaxPayload(queuetest.MaxPayload+2))
		if err != nil {
			t.Fatal(err)
		}
		return serveOverHTTP(t, q, queuetest.MaxPayload+2)
	})
}

// serveOverHTTP serves e with a Server whose payloads may have up to
// maxPayload bytes, and returns an engine made of a client of it. The
// server and e are closed when the test ends.
func serveOverHTTP(t *testing.T, e queue.Engine, maxPayload int64) queue.Engine {
	ts := httptest.NewServer(server.New(e,
		server.WithLimits(server.Limits{MaxPayload: maxPayload}),
		server.WithLogger(slog.New(slog.DiscardHandler))))
	t.Cleanup(func() {
		ts.Close()
		e.Close()
	})
	c, err := client.New(ts.URL)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := e.(queue.Admin); ok {
		return httpAdmin{newHTTPEngine(c)}
	}
	return newHTTPEngine(c)
}

// httpEngine is a queue.Engine made of the Go client talking to a tockd
// server: each call is the request of the HTTP API that does the same.
// Where the HTTP API and the contract differ, it says so:
//
//   - A payload of bytes travels as a JSON string, since the API takes
//     JSON payloads: it must be valid UTF-8 (queuetest's are), and it
//     counts two bytes more against the server's limit.
//   - A batch is put on one topic; a batch of several topics is refused
//     with queue.ErrInvalid without a request.
//   - Receive refuses a max or visibility below one without a request: the
//     client's zero means the server's default.
//   - DueCounts answers from the forecast of GET /v1/stats: whole seconds,
//     from the server's next second on, up to an hour ahead. Any other
//     range is refused with queue.ErrInvalid.
//   - Close is the client's: HTTP has no way to close a server's engine.
//     Calls waiting and every later call return queue.ErrClosed.
type httpEngine struct {
	c       *client.Client
	closing context.Context // ends when Close begins
	close   context.CancelFunc
	once    sync.Once
}

func newHTTPEngine(c *client.Client) *httpEngine {
	ctx, cancel := context.WithCancel(context.Background())
	return &httpEngine{c: c, closing: ctx, close: cancel}
}

// call returns a context for one call, which ends when ctx does or Close
// begins, and the error to return if Close has begun.
func (e *httpEngine) call(ctx context.Context) (context.Context, context.CancelFunc, error) {
	if e.closing.Err() != nil {
		return nil, nil, queue.ErrClosed
	}
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(e.closing, cancel)
	return ctx, func() { stop(); cancel() }, nil
}

// result is err as the contract says it: ErrClosed once Close has begun.
func (e *httpEngine) result(err error) error {
	if err != nil && e.closing.Err() != nil {
		return fmt.Errorf("%w (%v)", queue.ErrClosed, err)
	}
	return err
}

func toWire(m queue.Message) client.Message {
	cm := client.Message{ID: m.ID, DeliverAt: m.DeliverAt}
	if len(m.Payload) > 0 {
		cm.Payload, _ = json.Marshal(string(m.Payload))
	}
	return cm
}

func (e *httpEngine) Put(ctx context.Context, m queue.Message) (string, error) {
	ctx, done, err := e.call(ctx)
	if err != nil {
		return "", err
	}
	defer done()
	res, err := e.c.Put(ctx, m.Topic, toWire(m))
	return res.ID, e.result(err)
}

func (e *httpEngine) PutBatch(ctx context.Context, ms []queue.Message) ([]string, error) {
	ctx, done, err := e.call(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	cms := make([]client.Message, len(ms))
	for i, m := range ms {
		if m.Topic != ms[0].Topic {
			return nil, fmt.Errorf("a batch of the HTTP API has one topic, not %q and %q: %w", ms[0].Topic, m.Topic, queue.ErrInvalid)
		}
		cms[i] = toWire(m)
	}
	ids, err := e.c.PutBatch(ctx, ms[0].Topic, cms)
	if err != nil {
		return nil, e.result(err)
	}
	return ids, nil
}

func (e *httpEngine) Cancel(ctx context.Context, id string) (bool, error) {
	ctx, done, err := e.call(ctx)
	if err != nil {
		return false, err
	}
	defer done()
	ok, err := e.c.Cancel(ctx, id)
	return ok, e.result(err)
}

// maxWait is the server's longest long poll.
const maxWait = 20 * time.Second

func (e *httpEngine) Receive(ctx context.Context, topic string, max int, visibility time.Duration) ([]queue.Delivery, error) {
	if max < 1 || visibility <= 0 {
		return nil, fmt.Errorf("max %d and visibility %v must be positive: %w", max, visibility, queue.ErrInvalid)
	}
	cctx, done, err := e.call(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	for {
		wait := maxWait
		if deadline, ok := cctx.Deadline(); ok {
			wait = min(wait, time.Until(deadline))
		}
		if wait < time.Millisecond {
			<-cctx.Done()
		}
		if cctx.Err() != nil {
			if e.closing.Err() != nil {
				return nil, queue.ErrClosed
			}
			return nil, fmt.Errorf("receive: %w", ctx.Err())
		}
		ds, err := e.c.Receive(cctx, topic, client.ReceiveOptions{Max: max, Wait: wait, Visibility: visibility})
		if err != nil {
			if cctx.Err() != nil {
				continue // said above
			}
			return nil, e.result(err)
		}
		if len(ds) == 0 {
			continue
		}
		out := make([]queue.Delivery, len(ds))
		for i, d := range ds {
			out[i] = queue.Delivery{Message: queue.Message{ID: d.ID, Topic: topic, DeliverAt: d.DeliverAt},
				Receipt: d.Receipt, Attempt: d.Attempt}
			if string(d.Payload) != "null" {
				var s string
				if err := json.Unmarshal(d.Payload, &s); err != nil {
					return nil, fmt.Errorf("payload %s of %q is not the JSON string it was put as: %v", d.Payload, d.ID, err)
				}
				out[i].Payload = []byte(s)
			}
		}
		return out, nil
	}
}

func (e *httpEngine) Ack(ctx context.Context, receipts ...string) error {
	ctx, done, err := e.call(ctx)
	if err != nil {
		return err
	}
	defer done()
	return e.result(e.c.Ack(ctx, receipts...))
}

func (e *httpEngine) Nack(ctx context.Context, receipt string, delay time.Duration) error {
	ctx, done, err := e.call(ctx)
	if err != nil {
		return err
	}
	defer done()
	return e.result(e.c.Nack(ctx, receipt, delay))
}

func (e *httpEngine) Stats(ctx context.Context) (queue.Stats, error) {
	ctx, done, err := e.call(ctx)
	if err != nil {
		return queue.Stats{}, err
	}
	defer done()
	st, err := e.c.Stats(ctx)
	sec := func(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
	return queue.Stats{Scheduled: st.Scheduled, Due: st.Due, Leased: st.Leased, Lateness: queue.Lateness{
		P50: sec(st.QueueLateness.P50), P99: sec(st.QueueLateness.P99), Max: sec(st.QueueLateness.Max)}}, e.result(err)
}

func (e *httpEngine) DueCounts(ctx context.Context, from time.Time, step time.Duration, n int) ([]int, error) {
	if n <= 0 || step <= 0 {
		return nil, nil
	}
	if step%time.Second != 0 || from.Nanosecond() != 0 {
		return nil, fmt.Errorf("the HTTP API forecasts whole seconds, not steps of %v from %v: %w", step, from, queue.ErrInvalid)
	}
	ctx, done, err := e.call(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	end := from.Add(time.Duration(n) * step).Unix()
	ahead := int(end-time.Now().Unix()) + 1
	if ahead > client.MaxForecast {
		return nil, fmt.Errorf("the HTTP API forecasts an hour, not up to %v: %w", from.Add(time.Duration(n)*step), queue.ErrInvalid)
	}
	f, err := e.c.Forecast(ctx, max(ahead, 0))
	if err != nil {
		return nil, e.result(err)
	}
	counts := make([]int, n)
	for i, c := range f.Due {
		if sec := f.Start + int64(i); sec >= from.Unix() && sec < end {
			counts[(sec-from.Unix())/int64(step/time.Second)] += c
		}
	}
	return counts, nil
}

func (e *httpEngine) Ready(ctx context.Context) error {
	ctx, done, err := e.call(ctx)
	if err != nil {
		return err
	}
	defer done()
	return e.result(e.c.Ready(ctx))
}

func (e *httpEngine) Close() error {
	err := queue.ErrClosed
	e.once.Do(func() {
		e.close()
		err = nil
	})
	return err
}
