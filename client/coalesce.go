package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tockwheel/tock/api"
)

// DefaultCoalescing is the default of [WithCoalescing]: how many requests
// of Puts of one topic, and of Acks, a Client keeps in flight before the
// calls made meanwhile wait to go together in one request. One request in
// flight makes the largest batches, which on a busy server cost the least
// per call and gave the shortest latencies too: 32 producers put 1.2
// times as fast with 1 as with 2, and 1.4 times as with 4 (see the
// README).
const DefaultCoalescing = 1

// WithCoalescing lets concurrent [Client.Put] calls of one topic, concurrent
// [Client.Ack] calls, and concurrent [Client.Extend] calls, share requests,
// as Kafka's and NATS's producers batch their sends: while n requests of
// Puts of a topic (or of Acks, or of Extends) are in flight, the calls made
// meanwhile wait, and go together in one batch request as soon as one of
// them ends and the callers it answered have had a turn to run, so that
// those that call again at once go in it too (Extends of one visibility:
// a request carries one). A call made while fewer than n are in flight is
// sent at once, on its own, as without coalescing: there is no timer, so
// coalescing adds no latency to a Client that is not busy, and under load
// it trades at most the rest of one request's time for a request per
// call. Each call gets the answer it
// would have got on its own: a batch the server refuses stores nothing (a
// batch is all or nothing), and then each of its Puts is sent again on its
// own; an Ack's or an Extend's outcome is split receipt by receipt. An error that leaves
// the batch's outcome unknown (the connection failed, a 5xx, an answer
// that does not fit the batch) is every call's error, as it would have
// been each one's alone; for Puts it matches [ErrMaybeStored]. A call
// whose context ends while it waits is not sent; one whose context ends
// while its batch is in flight returns at once (a Put's error matching
// ErrMaybeStored), and the batch goes on for the others.
//
// Puts with a body over 16 KiB, and Acks of over 1,000 receipts, are
// always sent on their own; a coalesced request holds at most 1,000
// messages or receipts and 64 KiB of puts, which any tockd accepts (a
// server whose -max-batch is lower refuses the batch as too large, and
// the Client then makes its batches smaller). Coalesced Puts need a tockd
// that gives the due times of a batch's messages in its answer (this
// version and later); a Client that meets an older one stops coalescing,
// and reports the due times of the Puts it had coalesced as the client
// sees them: the time asked for, or the time of the answer plus the delay.
// Likewise a Client that meets a tockd that takes one receipt per extend
// (older than this version) stops coalescing Extends.
//
// The default is [DefaultCoalescing]; n = 0 turns coalescing off, so that
// every call is a request of its own. [New] refuses a negative n.
func WithCoalescing(n int) Option { return func(c *config) { c.coalescing = n } }

// Bounds of coalescing.
const (
	// maxCoalescedPutBody is the largest put body that is coalesced; a
	// larger one is sent on its own, its size amortising its request.
	maxCoalescedPutBody = 16 << 10
	// maxCoalescedBytes bounds the puts of one batch: every tockd accepts a
	// batch body this large (its limit is 16 times its payload limit, plus
	// 64 KiB).
	maxCoalescedBytes = 64 << 10
	// maxCoalesced bounds the calls of one coalesced request (a server's
	// default -max-batch is 10,000), and the receipts of one coalesced ack.
	maxCoalesced = 1000
)

// A coalescer holds the calls waiting to be coalesced. It is safe for
// concurrent use.
type coalescer struct {
	limit int // requests in flight per queue; 0: coalescing is off

	mu      sync.Mutex
	puts    map[string]*callQueue // by topic; a queue is removed when it is idle
	acks    callQueue
	extends callQueue

	// maxPuts bounds the puts of one batch: maxCoalesced, less after a
	// server refused a batch as too large.
	maxPuts atomic.Int32
	// noDueTimes is set when a server answered a batch without due times:
	// it is older than this client, and Puts are no longer coalesced.
	noDueTimes atomic.Bool
	// noExtendBatch is set when a server refused an extend of several
	// receipts that it extended one at a time: it is older than this
	// client, and Extends are no longer coalesced.
	noExtendBatch atomic.Bool

	putKind, ackKind, extendKind kind

	// yield yields the processor between two batches (see settle):
	// runtime.Gosched, which a test replaces to play the callers' part.
	yield func()
}

// A kind is what coalescing does with the calls of one of its queues: the
// Puts of a topic, the Acks or the Extends.
type kind struct {
	method string
	path   func(cl *call) string            // the path of cl's request, for its errors
	queue  func(cl *call) *callQueue        // cl's queue; called with coalescer.mu held
	fits   func(b batchSize, cl *call) bool // whether cl may join batch b
	one    func(cl *call)                   // sends cl alone, and answers it
	many   func(batch []*call)              // sends batch, of two calls or more, in one request, and answers each call
}

// newCoalescer returns the coalescer of c's calls.
func newCoalescer(limit int, c *Client) *coalescer {
	co := &coalescer{limit: limit, puts: make(map[string]*callQueue), yield: runtime.Gosched}
	co.maxPuts.Store(maxCoalesced)
	co.putKind = kind{
		method: http.MethodPost,
		path:   func(cl *call) string { return api.PutPath(cl.topic) },
		queue: func(cl *call) *callQueue {
			q := co.puts[cl.topic]
			if q == nil {
				q = &callQueue{}
				co.puts[cl.topic] = q
			}
			return q
		},
		fits: co.putFits,
		one:  func(cl *call) { cl.finish(c.putOne(cl.ctx, cl.topic, cl.body)) },
		many: c.putBatch,
	}
	co.ackKind = kind{
		method: http.MethodPost,
		path:   func(*call) string { return api.PathAck },
		queue:  func(*call) *callQueue { return &co.acks },
		fits:   ackFits,
		one:    func(cl *call) { cl.finish(PutResult{}, c.ackOne(cl.ctx, cl.receipts)) },
		many:   c.ackBatch,
	}
	co.extendKind = kind{
		method: http.MethodPost,
		path:   func(*call) string { return api.PathExtend },
		queue:  func(*call) *callQueue { return &co.extends },
		fits:   extendFits,
		one:    func(cl *call) { cl.finish(PutResult{}, c.extendOne(cl.ctx, cl.receipts[0], cl.vis)) },
		many:   c.extendBatch,
	}
	return co
}

// A callQueue is the coalescing state of the Puts of one topic, of the
// Acks, or of the Extends. Guarded by coalescer.mu.
type callQueue struct {
	inFlight int     // requests being sent
	waiting  []*call // calls waiting for one of them to end, oldest first
}

// A call is a Put, an Ack or an Extend that may be coalesced.
type call struct {
	ctx      context.Context
	topic    string        // a Put's
	body     []byte        // a Put: its api.PutRequest as JSON
	receipts []string      // an Ack; an Extend's one receipt
	vis      time.Duration // an Extend's visibility

	taken bool // guarded by coalescer.mu: in a batch being sent, no longer to be withdrawn

	// returns counts the callers of cl's batch still to return, for
	// settle; set with taken.
	returns *returns

	done chan struct{} // closed once put and err are set
	put  PutResult
	err  error
}

func (cl *call) finish(put PutResult, err error) {
	cl.put, cl.err = put, err
	close(cl.done)
}

// do makes the call cl, coalesced with others of its kind k when the
// Client is busy: it is sent at once, alone, when fewer than the limit of
// requests of its queue are in flight and no call waits; otherwise it
// waits, and goes in the batch sent next, as soon as one of them ends.
func (co *coalescer) do(cl *call, k *kind) (PutResult, error) {
	co.mu.Lock()
	q := k.queue(cl)
	alone := q.inFlight < co.limit && len(q.waiting) == 0
	if alone {
		q.inFlight++
	} else {
		q.waiting = append(q.waiting, cl)
	}
	co.mu.Unlock()
	if !alone {
		return co.wait(q, cl, k)
	}
	k.one(cl)
	if batch := co.next(q, cl.topic, k.fits); batch != nil {
		go co.send(q, batch, k)
	}
	return cl.put, cl.err
}

// send sends batch, and then the batches that wait in q after it, in the
// place of q's request that ended, until none waits. Between two batches
// it lets the callers it answered come back (see settle).
func (co *coalescer) send(q *callQueue, batch []*call, k *kind) {
	for batch != nil {
		if len(batch) == 1 {
			k.one(batch[0])
		} else {
			k.many(batch)
		}
		co.settle(q, batch)
		batch = co.next(q, batch[0].topic, k.fits)
	}
}

// settle is called when batch, of calls of q, has been answered, before
// the next batch is taken: it waits until every caller of batch has
// returned from its call, and then yields the processor
// (runtime.Gosched) as long as the last yield let more calls join q's
// waiting ones, until as many have joined as batch holds. A caller that
// calls again at once (a producer in a loop) so joins the next batch
// rather than the one after it. Without this, callers that keep putting
// split into two cohorts that take turns, each waiting for the other's
// request, and every request carries half of them: 32 producers made
// batches of 16 puts, 25 with one yield, 25 to 29 when settle only yielded
// (a yield found none back while the callers that had gone to the other
// processor were still on their way), 30 when it yielded until they had
// all returned, 31.6 with this wait; and a request costs tockd and the
// client far more than a put it carries (see the README). The wait is not
// a spin: yielding in a loop kept this processor from taking the callers
// queued on the other one. settle sets no timer: every caller of batch has
// been answered and is ready to run, and a yield when none is returns at
// once.
func (co *coalescer) settle(q *callQueue, batch []*call) {
	co.mu.Lock()
	before := len(q.waiting)
	co.mu.Unlock()
	<-batch[0].returns.all
	co.mu.Lock()
	last := len(q.waiting)
	co.mu.Unlock()
	for {
		co.yield()
		co.mu.Lock()
		now := len(q.waiting)
		co.mu.Unlock()
		if now == last || now-before >= len(batch) {
			return
		}
		last = now
	}
}

// returns counts the callers of a batch that have not returned from their
// calls yet.
type returns struct {
	left atomic.Int32
	all  chan struct{} // closed when the last has returned
}

func newReturns(n int) *returns {
	r := &returns{all: make(chan struct{})}
	r.left.Store(int32(n))
	return r
}

// done is called once by each caller of the batch as it returns.
func (r *returns) done() {
	if r.left.Add(-1) == 0 {
		close(r.all)
	}
}

// A batchSize is what the calls taken into a batch so far hold.
type batchSize struct {
	calls    int
	bytes    int // the puts' bodies, and a comma between each two
	receipts int
	first    *call
}

// add adds cl to b.
func (b *batchSize) add(cl *call) {
	if b.calls == 0 {
		b.first = cl
	} else {
		b.bytes++
	}
	b.calls++
	b.bytes += len(cl.body)
	b.receipts += len(cl.receipts)
}

// next is called when a request of q has ended: it returns the calls to
// send next in its place, oldest first, up to what fits in one request
// (see fits, which is given what the batch holds so far), and marks them
// taken; or, when no call waits, it frees the place and returns nil. topic
// names q among the puts ("" for the acks and the extends), so that an
// idle queue of puts is removed.
func (co *coalescer) next(q *callQueue, topic string, fits func(b batchSize, cl *call) bool) []*call {
	co.mu.Lock()
	defer co.mu.Unlock()
	if len(q.waiting) == 0 {
		q.inFlight--
		if q.inFlight == 0 && q != &co.acks && q != &co.extends {
			delete(co.puts, topic)
		}
		return nil
	}
	var size batchSize
	n := 0
	for n < len(q.waiting) && (n == 0 || fits(size, q.waiting[n])) {
		q.waiting[n].taken = true
		size.add(q.waiting[n])
		n++
	}
	batch := make([]*call, n)
	copy(batch, q.waiting)
	r := newReturns(n)
	for _, cl := range batch {
		cl.returns = r
	}
	rest := copy(q.waiting, q.waiting[n:])
	clear(q.waiting[rest:])
	q.waiting = q.waiting[:rest]
	return batch
}

// wait waits for cl, which waits in q, to be answered, or for its context
// to end. A call whose context ends before it is taken into a batch is
// withdrawn: it is not sent; a Put whose context ends after its batch was
// sent may have been stored, and its error says so.
func (co *coalescer) wait(q *callQueue, cl *call, k *kind) (PutResult, error) {
	select {
	case <-cl.done:
		cl.returns.done()
		return cl.put, cl.err
	case <-cl.ctx.Done():
	}
	co.mu.Lock()
	taken := cl.taken
	if !taken {
		for i, w := range q.waiting {
			if w == cl {
				q.waiting = append(q.waiting[:i], q.waiting[i+1:]...)
				break
			}
		}
	}
	co.mu.Unlock()
	if taken {
		defer cl.returns.done()
	}
	select {
	case <-cl.done: // answered meanwhile
		return cl.put, cl.err
	default:
	}
	err := fmt.Errorf("client: %s %s: %w", k.method, k.path(cl), cl.ctx.Err())
	if taken && cl.body != nil {
		err = maybeStored(err)
	}
	return PutResult{}, err
}

// batchContext returns a context for a request on behalf of every call of
// batch: it carries the first call's values and ends when every call's
// context has ended, so that one caller giving up does not fail the
// others.
func batchContext(batch []*call) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.WithoutCancel(batch[0].ctx))
	var left atomic.Int32
	left.Store(int32(len(batch)))
	stops := make([]func() bool, len(batch))
	for i, cl := range batch {
		stops[i] = context.AfterFunc(cl.ctx, func() {
			if left.Add(-1) == 0 {
				cancel()
			}
		})
	}
	return ctx, func() {
		for _, stop := range stops {
			stop()
		}
		cancel()
	}
}

// putFits reports whether cl may join the puts of batch b in one request.
func (co *coalescer) putFits(b batchSize, cl *call) bool {
	return b.calls < int(co.maxPuts.Load()) && b.bytes+1+len(cl.body) <= maxCoalescedBytes
}

// ackFits reports whether cl may join the acks of batch b in one request.
func ackFits(b batchSize, cl *call) bool {
	return b.receipts+len(cl.receipts) <= maxCoalesced
}

// put puts the message of body, a PutRequest as JSON, on topic, coalesced
// with others when the Client is busy (see WithCoalescing).
func (c *Client) put(ctx context.Context, topic string, body []byte) (PutResult, error) {
	co := c.co
	if co.limit == 0 || len(body) > maxCoalescedPutBody || co.noDueTimes.Load() {
		return c.putOne(ctx, topic, body)
	}
	return co.do(&call{ctx: ctx, topic: topic, body: body, done: make(chan struct{})}, &co.putKind)
}

// putOne sends one put. An error that leaves its outcome unknown matches
// ErrMaybeStored.
func (c *Client) putOne(ctx context.Context, topic string, body []byte) (PutResult, error) {
	var res PutResult
	err := c.do(ctx, http.MethodPost, api.PutPath(topic), rawBody(body), &res, false)
	return res, maybeStored(err)
}

// putBatch sends the puts of batch, all of one topic, in one request and
// answers each call.
func (c *Client) putBatch(batch []*call) {
	topic := batch[0].topic
	size := len(`{"messages":[]}`)
	for _, cl := range batch {
		size += len(cl.body) + 1
	}
	body := append(make([]byte, 0, size), `{"messages":[`...)
	for i, cl := range batch {
		if i > 0 {
			body = append(body, ',')
		}
		body = append(body, cl.body...)
	}
	body = append(body, "]}"...)
	ctx, cancel := batchContext(batch)
	defer cancel()
	var res api.BatchResponse
	err := c.do(ctx, http.MethodPost, api.BatchPath(topic), rawBody(body), &res, false)
	var e *Error
	switch {
	case err == nil && len(res.IDs) == len(batch) && len(res.DeliverAt) == len(batch):
		for i, cl := range batch {
			cl.finish(PutResult{ID: res.IDs[i], DeliverAt: res.DeliverAt[i]}, nil)
		}
	case err == nil && len(res.IDs) == len(batch) && res.DeliverAt == nil:
		// A server older than this client: stored, without due times.
		c.co.noDueTimes.Store(true)
		now := time.Now()
		for i, cl := range batch {
			cl.finish(PutResult{ID: res.IDs[i], DeliverAt: estimatedDue(cl.body, now)}, nil)
		}
	case err == nil:
		// Stored, by a 2xx, but which answer is whose cannot be told.
		err = fmt.Errorf("client: POST %s: the answer has %d ids and %d due times for %d messages (%w)",
			api.BatchPath(topic), len(res.IDs), len(res.DeliverAt), len(batch), ErrMaybeStored)
		for _, cl := range batch {
			cl.finish(PutResult{}, err)
		}
	case errors.As(err, &e) && e.StatusCode >= 400 && e.StatusCode < 500:
		// The server refused the batch and stored nothing: each put alone
		// gets its own answer.
		if e.StatusCode == http.StatusRequestEntityTooLarge {
			for n := c.co.maxPuts.Load(); n > 1 && !c.co.maxPuts.CompareAndSwap(n, max(1, int32(len(batch)/2))); n = c.co.maxPuts.Load() {
			}
		}
		var wg sync.WaitGroup
		for _, cl := range batch {
			wg.Go(func() { cl.finish(c.putOne(cl.ctx, topic, cl.body)) })
		}
		wg.Wait()
	default:
		err = maybeStored(err)
		for _, cl := range batch {
			cl.finish(PutResult{}, err)
		}
	}
}

// estimatedDue is the due time of the put of body answered at now by a
// server that did not say it.
func estimatedDue(body []byte, now time.Time) time.Time {
	var r api.PutRequest
	if err := json.Unmarshal(body, &r); err != nil {
		return now
	}
	switch {
	case r.DeliverAt != nil:
		if t, err := time.Parse(api.TimeFormat, *r.DeliverAt); err == nil && t.After(now) {
			return t.UTC()
		}
	case r.Delay != nil:
		if d, err := time.ParseDuration(*r.Delay); err == nil {
			return now.Add(d).UTC()
		}
	}
	return now.UTC()
}

// ack acks receipts, coalesced with other Acks when the Client is busy
// (see WithCoalescing). Its error is as ackOne's.
func (c *Client) ack(ctx context.Context, receipts []string) error {
	co := c.co
	if co.limit == 0 || len(receipts) == 0 || len(receipts) > maxCoalesced {
		return c.ackOne(ctx, receipts)
	}
	_, err := co.do(&call{ctx: ctx, receipts: receipts, done: make(chan struct{})}, &co.ackKind)
	return err
}

// ackBatch sends the acks of batch in one request and answers each call.
func (c *Client) ackBatch(batch []*call) {
	n := 0
	for _, cl := range batch {
		n += len(cl.receipts)
	}
	all := make([]string, 0, n)
	for _, cl := range batch {
		all = append(all, cl.receipts...)
	}
	ctx, cancel := batchContext(batch)
	defer cancel()
	err := c.do(ctx, http.MethodPost, api.PathAck, api.AckRequest{Receipts: all}, nil, true)
	var e *Error
	switch {
	case err == nil:
		for _, cl := range batch {
			cl.finish(PutResult{}, nil)
		}
	case errors.As(err, &e) && e.failed != nil && ackError(all, e) != nil:
		// Some receipts were not acked: each call learns which of its own.
		off := 0
		for _, cl := range batch {
			cl.finish(PutResult{}, e.ackOf(off, len(cl.receipts), cl.receipts))
			off += len(cl.receipts)
		}
	case errors.As(err, &e) && e.StatusCode >= 400 && e.StatusCode < 500:
		// Refused as a whole: each ack alone gets its own answer.
		var wg sync.WaitGroup
		for _, cl := range batch {
			wg.Go(func() { cl.finish(PutResult{}, c.ackOne(cl.ctx, cl.receipts)) })
		}
		wg.Wait()
	default:
		for _, cl := range batch {
			cl.finish(PutResult{}, err)
		}
	}
}

// ackOf returns the error of the ack of receipts, the n receipts from
// index off of the ack e answered: nil when all of them were acked, else a
// *queue.AckError listing those that were not.
func (e *Error) ackOf(off, n int, receipts []string) error {
	var failed []int
	for _, i := range e.failed {
		if i >= off && i < off+n {
			failed = append(failed, i-off)
		}
	}
	if len(failed) == 0 {
		return nil
	}
	own := *e
	own.failed = failed
	return ackError(receipts, &own)
}

// extendFits reports whether cl may join the extends of batch b in one
// request: of the same visibility, and at most maxCoalesced receipts.
func extendFits(b batchSize, cl *call) bool {
	return b.calls < maxCoalesced && cl.vis == b.first.vis
}

// extend extends the lease of receipt, coalesced with other Extends when
// the Client is busy (see WithCoalescing). Its error is as extendOne's.
func (c *Client) extend(ctx context.Context, receipt string, vis time.Duration) error {
	co := c.co
	if co.limit == 0 || co.noExtendBatch.Load() {
		return c.extendOne(ctx, receipt, vis)
	}
	_, err := co.do(&call{ctx: ctx, receipts: []string{receipt}, vis: vis, done: make(chan struct{})}, &co.extendKind)
	return err
}

// extendBatch sends the extends of batch in one request and answers each
// call: nil, or the error an extend of its receipt alone would have had.
func (c *Client) extendBatch(batch []*call) {
	rcs := make([]string, len(batch))
	for i, cl := range batch {
		rcs[i] = cl.receipts[0]
	}
	ctx, cancel := batchContext(batch)
	defer cancel()
	req := api.ExtendRequest{Receipts: rcs, Visibility: batch[0].vis.String()}
	err := c.do(ctx, http.MethodPost, api.PathExtend, req, nil, true)
	var e *Error
	switch {
	case err == nil:
		for _, cl := range batch {
			cl.finish(PutResult{}, nil)
		}
	case errors.As(err, &e) && e.failed != nil && e.receiptErrors(rcs, notExtended) != nil:
		// Some receipts were not extended: each call learns whether its own was.
		reason := e.receiptErrors(rcs, notExtended)[0].Err
		failed := make(map[int]bool, len(e.failed))
		for _, i := range e.failed {
			failed[i] = true
		}
		for i, cl := range batch {
			var own error
			if failed[i] {
				own = reason
			}
			cl.finish(PutResult{}, own)
		}
	case refusedWhole(err):
		// Refused as a whole (maybe by a tockd that takes one receipt per
		// extend): each extend alone gets its own answer.
		var wg sync.WaitGroup
		for _, cl := range batch {
			wg.Go(func() {
				err := c.extendOne(cl.ctx, cl.receipts[0], cl.vis)
				if err == nil {
					c.co.noExtendBatch.Store(true)
				}
				cl.finish(PutResult{}, err)
			})
		}
		wg.Wait()
	default:
		for _, cl := range batch {
			cl.finish(PutResult{}, err)
		}
	}
}
