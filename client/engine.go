package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/tockwheel/tock/queue"
)

// An Engine is a [queue.Engine], a [queue.Limiter] and a [queue.BatchExtender] made of a Client:
// each call is the request of the HTTP API that does the same, so that code written against the
// contract (package worker, queuetest) runs against a tockd server as against an embedded engine. Make one with [Client.Engine]. It is safe
// for concurrent use. Where HTTP and the contract differ, it says so:
//
//   - Payloads travel as JSON values (see [EncodePayload]): bytes that are compact JSON other than
//     a string or null go as they are; any other bytes, which must be valid UTF-8, go as a JSON
//     string of them; a delivered payload is decoded the other way ([DecodePayload]). So a
//     payload put through an Engine comes back byte for byte, and a JSON object put with curl
//     comes to a handler as its JSON text.
//   - A batch is put on one topic: a batch of several topics is refused with queue.ErrInvalid
//     without a request.
//   - Receive long-polls the server (up to MaxWait at a time, 20 s unless the server says
//     otherwise) until a message is due or ctx ends.
//   - DueCounts answers from the forecast of GET /v1/stats: whole seconds, from the server's next
//     second on, up to an hour ahead; any other range is refused with queue.ErrInvalid.
//   - Close closes the Engine, not the server's engine, which HTTP cannot close: calls waiting,
//     and every later call, return queue.ErrClosed.
type Engine struct {
	c       *Client
	closing context.Context // ends when Close begins
	close   context.CancelFunc
	once    sync.Once
}

var _ queue.Engine = (*Engine)(nil)

// Engine returns a new [Engine] of c. Closing it leaves c usable.
func (c *Client) Engine() *Engine {
	ctx, cancel := context.WithCancel(context.Background())
	return &Engine{c: c, closing: ctx, close: cancel}
}

// MaxWait is the longest long poll an [Engine]'s Receive asks for at a time: the server's
// default bound on a receive's wait.
const MaxWait = 20 * time.Second

// EncodePayload returns p as the JSON value an [Engine] sends: p itself when it is compact JSON
// other than a string or null (an object, an array, a number, true or false, as the server keeps
// it), otherwise a JSON string of p; nil for an empty p. A p that is not valid UTF-8 and not sent
// as it is fails with an error matching queue.ErrInvalid, since a JSON string cannot hold it.
func EncodePayload(p []byte) (json.RawMessage, error) {
	if len(p) == 0 {
		return nil, nil
	}
	if p[0] != '"' && !bytes.Equal(p, []byte("null")) && json.Valid(p) {
		var c bytes.Buffer
		if json.Compact(&c, p) == nil && bytes.Equal(c.Bytes(), p) {
			return p, nil
		}
	}
	if !utf8.Valid(p) {
		return nil, fmt.Errorf("client: a payload of %d bytes that is neither compact JSON nor UTF-8 cannot travel as JSON: %w", len(p), queue.ErrInvalid)
	}
	b, err := json.Marshal(string(p))
	if err != nil {
		return nil, fmt.Errorf("client: payload: %w", err)
	}
	return b, nil
}

// DecodePayload returns the bytes of a payload as delivered by the server: nil for null or none,
// the string's contents for a JSON string, and the JSON text of any other value. It is the
// inverse of [EncodePayload].
func DecodePayload(v json.RawMessage) ([]byte, error) {
	v = bytes.TrimSpace(v)
	if len(v) == 0 || bytes.Equal(v, []byte("null")) {
		return nil, nil
	}
	if v[0] == '"' {
		var s string
		if err := json.Unmarshal(v, &s); err != nil {
			return nil, fmt.Errorf("client: payload %.40q: %w", v, err)
		}
		return []byte(s), nil
	}
	return bytes.Clone(v), nil
}

// call returns a context for one call, which ends when ctx does or Close begins, and the error
// to return if Close has begun.
func (e *Engine) call(ctx context.Context) (context.Context, context.CancelFunc, error) {
	if e.closing.Err() != nil {
		return nil, nil, fmt.Errorf("client: %w", queue.ErrClosed)
	}
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(e.closing, cancel)
	return ctx, func() { stop(); cancel() }, nil
}

// result is err as the contract says it: ErrClosed once Close has begun.
func (e *Engine) result(err error) error {
	if err != nil && e.closing.Err() != nil {
		return fmt.Errorf("client: %w (%v)", queue.ErrClosed, err)
	}
	return err
}

func toWire(m queue.Message) (Message, error) {
	p, err := EncodePayload(m.Payload)
	return Message{ID: m.ID, DeliverAt: m.DeliverAt, Payload: p, Replace: m.Replace, Headers: m.Headers}, err
}

// Put puts m through [Client.Put]; see [queue.Engine.Put].
func (e *Engine) Put(ctx context.Context, m queue.Message) (string, error) {
	cm, err := toWire(m)
	if err != nil {
		return "", err
	}
	ctx, done, err := e.call(ctx)
	if err != nil {
		return "", err
	}
	defer done()
	res, err := e.c.Put(ctx, m.Topic, cm)
	return res.ID, e.result(err)
}

// PutBatch puts ms, all of one topic, through [Client.PutBatch]; see [queue.Engine.PutBatch].
func (e *Engine) PutBatch(ctx context.Context, ms []queue.Message) ([]string, error) {
	if len(ms) == 0 {
		return nil, fmt.Errorf("client: empty batch: %w", queue.ErrInvalid)
	}
	cms := make([]Message, len(ms))
	for i, m := range ms {
		if m.Topic != ms[0].Topic {
			return nil, fmt.Errorf("client: a batch of the HTTP API has one topic, not %q and %q: %w", ms[0].Topic, m.Topic, queue.ErrInvalid)
		}
		var err error
		if cms[i], err = toWire(m); err != nil {
			return nil, err
		}
	}
	ctx, done, err := e.call(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	ids, err := e.c.PutBatch(ctx, ms[0].Topic, cms)
	if err != nil {
		return nil, e.result(err)
	}
	return ids, nil
}

// Cancel is [Client.Cancel]; see [queue.Engine.Cancel].
func (e *Engine) Cancel(ctx context.Context, id string) (bool, error) {
	ctx, done, err := e.call(ctx)
	if err != nil {
		return false, err
	}
	defer done()
	ok, err := e.c.Cancel(ctx, id)
	return ok, e.result(err)
}

// Receive long-polls topic through [Client.Receive] until at least one message is leased or ctx
// ends; see [queue.Engine.Receive].
func (e *Engine) Receive(ctx context.Context, topic string, max int, visibility time.Duration) ([]queue.Delivery, error) {
	if max < 1 || visibility <= 0 {
		return nil, fmt.Errorf("client: receive max %d, visibility %v: both must be positive: %w", max, visibility, queue.ErrInvalid)
	}
	cctx, done, err := e.call(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	for {
		wait := MaxWait
		if deadline, ok := cctx.Deadline(); ok {
			wait = min(wait, time.Until(deadline))
		}
		if wait < time.Millisecond {
			<-cctx.Done()
		}
		if cctx.Err() != nil {
			if e.closing.Err() != nil {
				return nil, fmt.Errorf("client: %w", queue.ErrClosed)
			}
			return nil, fmt.Errorf("client: receive: %w", ctx.Err())
		}
		ds, err := e.c.Receive(cctx, topic, ReceiveOptions{Max: max, Wait: wait, Visibility: visibility})
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
			p, err := DecodePayload(d.Payload)
			if err != nil {
				return nil, fmt.Errorf("client: delivery of %q: %w", d.ID, err)
			}
			out[i] = queue.Delivery{Message: queue.Message{ID: d.ID, Topic: topic, Payload: p, Headers: d.Headers, DeliverAt: d.DeliverAt},
				Receipt: d.Receipt, Attempt: d.Attempt}
		}
		return out, nil
	}
}

// Ack is [Client.Ack]; see [queue.Engine.Ack].
func (e *Engine) Ack(ctx context.Context, receipts ...string) error {
	ctx, done, err := e.call(ctx)
	if err != nil {
		return err
	}
	defer done()
	return e.result(e.c.Ack(ctx, receipts...))
}

// Nack is [Client.Nack]; see [queue.Engine.Nack]. With queue.WithDeadLetter the delay is not sent.
func (e *Engine) Nack(ctx context.Context, receipt string, delay time.Duration, opts ...queue.NackOption) error {
	if delay < 0 {
		return fmt.Errorf("client: Nack delay %v: %w", delay, queue.ErrInvalid)
	}
	o, err := queue.NackOptionsOf(opts)
	if err != nil {
		return fmt.Errorf("client: Nack: %w", err)
	}
	if o.DeadLetter {
		delay = 0
	}
	ctx, done, err := e.call(ctx)
	if err != nil {
		return err
	}
	defer done()
	return e.result(e.c.Nack(ctx, receipt, delay, opts...))
}

// Extend is [Client.Extend]; see [queue.Engine.Extend].
func (e *Engine) Extend(ctx context.Context, receipt string, visibility time.Duration) error {
	ctx, done, err := e.call(ctx)
	if err != nil {
		return err
	}
	defer done()
	return e.result(e.c.Extend(ctx, receipt, visibility))
}

var _ queue.BatchExtender = (*Engine)(nil)

// ExtendBatch is [Client.ExtendBatch]: one request for every receipt; see
// [queue.BatchExtender.ExtendBatch].
func (e *Engine) ExtendBatch(ctx context.Context, receipts []string, visibility time.Duration) error {
	ctx, done, err := e.call(ctx)
	if err != nil {
		return err
	}
	defer done()
	return e.result(e.c.ExtendBatch(ctx, receipts, visibility))
}

// Stats reports the counts of GET /v1/stats; see [queue.Engine.Stats]. Lateness has its
// quantiles, not its count and sum, which the API does not carry.
func (e *Engine) Stats(ctx context.Context) (queue.Stats, error) {
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

// DueCounts answers from the server's forecast; see [queue.Engine.DueCounts] and the
// restrictions on [Engine].
func (e *Engine) DueCounts(ctx context.Context, from time.Time, step time.Duration, n int) ([]int, error) {
	if n <= 0 || step <= 0 {
		return nil, nil
	}
	if step%time.Second != 0 || from.Nanosecond() != 0 {
		return nil, fmt.Errorf("client: the HTTP API forecasts whole seconds, not steps of %v from %v: %w", step, from, queue.ErrInvalid)
	}
	ctx, done, err := e.call(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	end := from.Add(time.Duration(n) * step).Unix()
	ahead := int(end-time.Now().Unix()) + 1
	if ahead > MaxForecast {
		return nil, fmt.Errorf("client: the HTTP API forecasts an hour, not up to %v: %w", from.Add(time.Duration(n)*step), queue.ErrInvalid)
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

// Ready is [Client.Ready]; see [queue.Engine.Ready].
func (e *Engine) Ready(ctx context.Context) error {
	ctx, done, err := e.call(ctx)
	if err != nil {
		return err
	}
	defer done()
	return e.result(e.c.Ready(ctx))
}

// Close closes the Engine (not the server's engine): calls waiting, and every later call, return
// an error matching queue.ErrClosed. A second Close returns ErrClosed.
func (e *Engine) Close() error {
	err := fmt.Errorf("client: %w", queue.ErrClosed)
	e.once.Do(func() {
		e.close()
		err = nil
	})
	return err
}
