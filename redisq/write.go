package redisq

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tockwheel/tock"
	"github.com/tockwheel/tock/internal/rediskit"
	"github.com/tockwheel/tock/queue"
)

// The writer groups the writes that a caller waits for (Put, PutBatch, Ack, Nack, Extend, Cancel
// and the alias steps) per Redis master: while pipelines are in flight to a master (at most
// pipelinesInFlight), the requests for it queue, and the next pipeline carries them all, the single
// Puts of one shard in one put script, the acks of one shard in one ack script, the extensions of
// one shard's leases in one extend script and those of its permits in one permit script, followed
// by WAIT for the master's replicas. This is group commit, as in delayq's log: under load each request
// shares a round trip and a WAIT with many, and alone it costs one round trip.

// pipelinesInFlight is how many pipelines the writer keeps in flight to one master. With one, the
// master idles while a pipeline's reply travels back and the next one is built; with two, one
// pipeline's scripts run while the other's reply is on its way, and under appendfsync always both
// can share the master's fsync. (BenchmarkRedisPut with appendfsync always, on 2 cores: 3 to 9%
// more puts a second than with one.)
const pipelinesInFlight = 2

// pipelineTimeout bounds a pipeline's round trip beyond the WAIT it carries.
const pipelineTimeout = 5 * time.Second

// retryWindow bounds how long after its first send a write whose outcome is unknown (the connection
// failed after the request went out) is sent again: the scripts' tombstones (WINDOW in prelude.lua,
// 10s) must outlive the retries, so that a Put retried after its message was acked or cancelled
// does not store it again. After it the call fails with an error saying the outcome is unknown.
const retryWindow = 8 * time.Second

// replicaRefresh is how long a master's replica count (INFO replication) is trusted.
const replicaRefresh = 5 * time.Second

// opKind says how a request is sent: merged with the others of its shard, or alone.
type opKind int

const (
	opPut          opKind = iota // single Puts: one put script (mode '1') per shard per pipeline
	opAck                        // acks: one ack script per shard per pipeline
	opExtend                     // lease extensions: one extend script per shard per pipeline
	opPermitExtend               // permit extensions: one permit script (mode 'x') per shard per pipeline
	opScript                     // any other script, alone
)

// A putItem is one message of a put request, as the put script takes it.
type putItem struct {
	id, req, topic string
	payload        []byte
	headers        string // the message's headers, encoded (see encodeHeaders); "" for none
	home           string // the ID's home shard when it is not the request's, else ""
	nonce          string // the Put call's nonce for a chosen ID; "" for a generated one
	replace        bool   // replace a waiting message that is not leased (single Puts only)
}

// append appends the put script's arguments for it; retry says an earlier attempt may have run.
func (it putItem) append(args []any, retry bool) []any {
	flag := ""
	if retry {
		flag = "r"
	}
	if it.replace {
		flag += "x"
	}
	return append(args, it.id, it.req, it.topic, it.payload, it.home, it.nonce, flag, it.headers)
}

// An ackItem is one receipt of an ack request.
type ackItem struct {
	id, token string
}

// An extendItem is one lease of an extend request, and its new visibility (ms).
type extendItem struct {
	id, token string
	vis       int64
}

// A permitItem is one permit of a permit extension: its topic, its lease token, and its new span
// from the script's clock (ms).
type permitItem struct {
	topic, token string
	span         int64
}

// A request is one caller's part of a grouped write.
type request struct {
	ctx   context.Context
	kind  opKind
	shard int // -1: single Puts with generated IDs, given a shard when sent

	items   []putItem    // opPut
	acks    []ackItem    // opAck
	extends []extendItem // opExtend
	permits []permitItem // opPermitExtend

	script *script // opScript
	args   func(shard int, retry bool) []any
	locked bool // the script's KEYS include the shard's lock

	genIDs    bool   // single Puts with generated IDs: any shard will do, and the IDs are made when sent
	avoid     string // a master not to send generated Puts to (it refused them)
	tries     int
	firstSent time.Time // when the request was first sent
	unknown   bool      // an attempt failed after it was sent: it may have run

	// Set before done is closed.
	reply    []any // the reply's items for this request (opPut, opAck: its share after NOW and ver)
	now      int64 // the script's clock
	ver      int64 // the shard's event count after the script
	err      error
	done     chan struct{}
	finished atomic.Bool
}

// writer sends requests, grouped per master.
type writer struct {
	q *Queue
	// single is the client of a single server (or Sentinel failover): the one given to Open if it
	// does not retry, and otherwise one of its options without retries, so that the engine alone
	// decides what is sent again (see retryWindow). On a cluster the node clients do not retry
	// unless ClusterOptions.MaxRetries is set.
	single    *redis.Client
	ownSingle bool

	mu struct {
		sync.Mutex
		nodes    map[string]*node
		retrying map[*request]tock.Timer // requests waiting to be sent again
		stopped  bool
	}
	wg sync.WaitGroup
}

// A node is one master and its queue of requests.
type node struct {
	addr   string
	client *redis.Client

	mu struct {
		sync.Mutex
		queue      []*request
		flushers   int // pipelines in flight, at most pipelinesInFlight
		rr         int // rotates generated Puts over the master's shards
		replicas   int
		replicasAt time.Time
	}
}

func (w *writer) init(q *Queue) {
	w.q = q
	if c, ok := q.rdb.(*redis.Client); ok {
		w.single = c
		if opt := *c.Options(); opt.MaxRetries != 0 {
			opt.MaxRetries = -1
			w.single, w.ownSingle = redis.NewClient(&opt), true
		}
	}
	w.mu.nodes = make(map[string]*node)
	w.mu.retrying = make(map[*request]tock.Timer)
}

// do sends r and waits for its outcome, or for ctx to end.
func (w *writer) do(ctx context.Context, r *request) error {
	r.ctx = ctx
	r.done = make(chan struct{})
	w.submit(r)
	select {
	case <-r.done:
		return r.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// submit queues r on the master of its shard.
func (w *writer) submit(r *request) {
	if err := r.ctx.Err(); err != nil {
		w.finish(r, err)
		return
	}
	s := r.shard
	if s < 0 {
		s = w.pickShard(r.avoid)
	}
	n, err := w.node(r.ctx, s)
	if err != nil {
		w.retry(r, err)
		return
	}
	w.mu.Lock()
	if w.mu.stopped {
		w.mu.Unlock()
		w.finish(r, errClosedWrap)
		return
	}
	w.wg.Add(1)
	w.mu.Unlock()
	n.mu.Lock()
	n.mu.queue = append(n.mu.queue, r)
	start := n.mu.flushers < pipelinesInFlight
	if start {
		n.mu.flushers++
	}
	n.mu.Unlock()
	if start {
		go w.flushLoop(n)
	}
}

// pickShard returns a random shard, avoiding those of master avoid when it can.
func (w *writer) pickShard(avoid string) int {
	n := w.q.lay.shards()
	s := rand.IntN(n)
	if avoid == "" || w.q.cluster == nil {
		return s
	}
	for range 8 {
		if c, err := w.q.cluster.MasterForKey(context.Background(), w.q.lay.metaKey(s)); err != nil || c.Options().Addr != avoid {
			return s
		}
		s = rand.IntN(n)
	}
	return s
}

// node returns the master of shard s.
func (w *writer) node(ctx context.Context, s int) (*node, error) {
	var c *redis.Client
	if w.q.cluster != nil {
		var err error
		if c, err = w.q.cluster.MasterForKey(ctx, w.q.lay.metaKey(s)); err != nil {
			return nil, err
		}
	} else {
		c = w.single
	}
	addr := c.Options().Addr
	w.mu.Lock()
	defer w.mu.Unlock()
	n := w.mu.nodes[addr]
	if n == nil || n.client != c {
		n = &node{addr: addr, client: c}
		w.mu.nodes[addr] = n
	}
	return n, nil
}

// shardsOn returns the shards whose master is n.
func (w *writer) shardsOn(n *node) []int {
	if w.q.cluster == nil {
		out := make([]int, w.q.lay.shards())
		for i := range out {
			out[i] = i
		}
		return out
	}
	var out []int
	for s := range w.q.lay.shards() {
		if c, err := w.q.cluster.MasterForKey(context.Background(), w.q.lay.metaKey(s)); err == nil && c.Options().Addr == n.addr {
			out = append(out, s)
		}
	}
	return out
}

// finish completes r with err (nil: its reply is set); later calls do nothing.
func (w *writer) finish(r *request, err error) {
	if r.finished.CompareAndSwap(false, true) {
		r.err = err
		close(r.done)
	}
}

// retry sends r again after a backoff, if its context allows, or completes it with err.
func (w *writer) retry(r *request, err error) {
	if w.q.cluster != nil && rediskit.Reloads(err) {
		w.q.cluster.ReloadState(context.Background())
	}
	w.q.metrics.retries.Add(1)
	// A script that refused its shard's stamp did nothing: it is sent again once the deployment is
	// reconciled (with the stamp then), unless this process refuses to serve it.
	stamp := isStampErr(err)
	if stamp {
		w.q.noticeStamp()
		if serr := w.q.staleErr(); serr != nil {
			w.finish(r, serr)
			return
		}
	}
	if rediskit.Transient(err) && !rediskit.Refused(err) && !r.firstSent.IsZero() {
		r.unknown = true
	}
	if r.unknown && time.Since(r.firstSent) > retryWindow {
		w.finish(r, fmt.Errorf("%w: the outcome is unknown (the connection failed after the write was sent, and %v of retries did not settle it): %v",
			queue.ErrUnavailable, retryWindow, err))
		return
	}
	if !(rediskit.Transient(err) || stamp) || r.ctx.Err() != nil || w.q.closed.Load() {
		if r.ctx.Err() != nil && (rediskit.Transient(err) || stamp) {
			err = fmt.Errorf("%w (after %d tries: %w)", r.ctx.Err(), r.tries, unavailable(err))
		}
		w.finish(r, err)
		return
	}
	r.tries++
	d := min(5*time.Millisecond<<min(r.tries, 6), 250*time.Millisecond)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.mu.stopped {
		w.finish(r, errClosedWrap)
		return
	}
	t, werr := w.q.wheel.AfterFunc(d, func() {
		w.mu.Lock()
		_, ok := w.mu.retrying[r]
		delete(w.mu.retrying, r)
		w.mu.Unlock()
		if ok {
			w.submit(r)
		}
	})
	if werr != nil {
		w.finish(r, err)
		return
	}
	w.mu.retrying[r] = t
}

// stop makes later requests fail with ErrClosed and waits for the queued ones.
func (w *writer) stop() {
	w.mu.Lock()
	w.mu.stopped = true
	for r, t := range w.mu.retrying {
		t.Stop()
		w.finish(r, errClosedWrap)
	}
	clear(w.mu.retrying)
	w.mu.Unlock()
	w.wg.Wait()
	if w.ownSingle {
		_ = w.single.Close()
	}
}

// flushLoop sends n's queue, one pipeline at a time, until it is empty; up to pipelinesInFlight
// loops run for one master.
func (w *writer) flushLoop(n *node) {
	for {
		n.mu.Lock()
		reqs := n.mu.queue
		n.mu.queue = nil
		if len(reqs) == 0 {
			n.mu.flushers--
			n.mu.Unlock()
			return
		}
		n.mu.Unlock()
		w.flush(n, reqs)
		w.wg.Add(-len(reqs))
	}
}

// A call is one script call of a pipeline and the requests it serves.
type call struct {
	shard  int
	kind   opKind
	reqs   []*request
	script *script
	keys   []string
	args   []any
	cmd    *redis.Cmd
	sent   time.Time // when its pipeline was sent: the reply's clock is after it
}

// flush sends reqs to n in one pipeline and completes or retries each.
func (w *writer) flush(n *node, reqs []*request) {
	q := w.q
	live := reqs[:0:0]
	for _, r := range reqs {
		if err := r.ctx.Err(); err != nil {
			w.finish(r, err)
			continue
		}
		live = append(live, r)
	}
	if len(live) == 0 {
		return
	}
	// Generated Puts go to one shard of this master, a different one each pipeline.
	var here []int
	for _, r := range live {
		if r.shard >= 0 {
			continue
		}
		if here == nil {
			here = w.shardsOn(n)
			if len(here) == 0 {
				here = []int{w.pickShard("")}
			}
		}
		n.mu.Lock()
		s := here[n.mu.rr%len(here)]
		n.mu.Unlock()
		r.shard = s
		now := q.clock.now()
		sec := now / 1000
		for i := range r.items {
			it := &r.items[i]
			due, _ := strconv.ParseInt(it.req, 10, 64)
			it.id = newID(s, max(due/1000, sec), now)
		}
	}
	if here != nil {
		n.mu.Lock()
		n.mu.rr++
		n.mu.Unlock()
	}
	now := time.Now()
	for _, r := range live {
		if r.firstSent.IsZero() {
			r.firstSent = now
		}
	}
	calls := w.group(live)
	need := w.replicasNeeded(n)
	ctx, cancel := context.WithTimeout(context.Background(), pipelineTimeout+q.cfg.replicaWait)
	defer cancel()
	var wait *redis.IntCmd
	start := time.Now()
	_, perr := n.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, c := range calls {
			c.sent = start
			c.cmd = c.script.call(ctx, p, c.keys, q.withStamp(c.args...)...)
		}
		if need > 0 {
			wait = redis.NewIntCmd(ctx, "wait", need, q.cfg.replicaWait.Milliseconds())
			_ = p.Process(ctx, wait)
		}
		return nil
	})
	q.metrics.observeScript(time.Since(start))
	_ = perr // each command carries its own error
	var waitErr error
	if wait != nil {
		acked, err := wait.Result()
		switch {
		case err != nil:
			waitErr = err
		case acked < int64(need):
			n.mu.Lock()
			n.mu.replicasAt = time.Time{} // count them again
			n.mu.Unlock()
			q.metrics.replicaWaitFailures.Add(1)
			waitErr = fmt.Errorf("the write was made on master %s but confirmed by %d of %d replicas within %v: %w",
				n.addr, acked, need, q.cfg.replicaWait, queue.ErrUnavailable)
		}
	}
	loaded := false // the library, once for the pipeline: every call of it met the same node
	for _, c := range calls {
		err := c.cmd.Err()
		if notLoaded(err) && !loaded {
			w.loadLibrary(n)
			loaded = true
		}
		if err == nil && waitErr != nil {
			if rediskit.Transient(waitErr) {
				// The connection failed after the script: send it again (the scripts are idempotent),
				// so that the retry's WAIT covers it.
				err = waitErr
			} else {
				for _, r := range c.reqs {
					w.finish(r, waitErr)
				}
				continue
			}
		}
		if err != nil {
			for _, r := range c.reqs {
				if r.genIDs && rediskit.Refused(err) && !r.unknown {
					// Refused before it ran: a generated Put may go to another shard.
					r.shard = -1
					r.avoid = n.addr
				}
				w.retry(r, err)
			}
			continue
		}
		w.dispatch(c)
	}
}

// group turns requests into script calls.
func (w *writer) group(reqs []*request) []*call {
	q := w.q
	var calls []*call
	merged := make(map[[2]int]*call)
	for _, r := range reqs {
		switch r.kind {
		case opPut, opAck, opExtend, opPermitExtend:
			k := [2]int{r.shard, int(r.kind)}
			c := merged[k]
			if c == nil {
				c = &call{shard: r.shard, kind: r.kind, keys: q.lay.keys(r.shard)}
				merged[k] = c
				calls = append(calls, c)
			}
			c.reqs = append(c.reqs, r)
		default:
			keys := q.lay.keys(r.shard)
			if r.locked {
				keys = q.lay.lockedKeys(r.shard)
			}
			calls = append(calls, &call{shard: r.shard, kind: r.kind, reqs: []*request{r},
				script: r.script, keys: keys, args: r.args(r.shard, r.unknown)})
		}
	}
	for _, c := range calls {
		switch c.kind {
		case opPut:
			c.script = putScript
			sortPuts(c.reqs)
			n := 0
			for _, r := range c.reqs {
				n += len(r.items)
			}
			c.args = make([]any, 0, 4+8*n)
			c.args = append(c.args, "1", "", 0, n)
			for _, r := range c.reqs {
				for _, it := range r.items {
					c.args = it.append(c.args, r.unknown)
				}
			}
		case opAck:
			c.script = ackScript
			n := 0
			for _, r := range c.reqs {
				n += len(r.acks)
			}
			c.args = make([]any, 0, 1+2*n)
			c.args = append(c.args, n)
			for _, r := range c.reqs {
				for _, a := range r.acks {
					c.args = append(c.args, a.id, a.token)
				}
			}
		case opExtend:
			c.script = extendScript
			n := 0
			for _, r := range c.reqs {
				n += len(r.extends)
			}
			c.args = make([]any, 0, 1+3*n)
			c.args = append(c.args, n)
			for _, r := range c.reqs {
				for _, x := range r.extends {
					c.args = append(c.args, x.id, x.token, x.vis)
				}
			}
		case opPermitExtend:
			c.script = permitScript
			n := 0
			for _, r := range c.reqs {
				n += len(r.permits)
			}
			c.args = make([]any, 0, 2+3*n)
			c.args = append(c.args, "x", n)
			for _, r := range c.reqs {
				for _, p := range r.permits {
					c.args = append(c.args, p.topic, p.span, p.token)
				}
			}
		}
	}
	return calls
}

// sortPuts orders the Puts of a call by (due time, ID), the order of a topic's wheel: the script
// adds each message after the one before it, where it needs no search, and the last chunk, filled
// in order, splits only at the end. The replies follow the requests, in this order.
func sortPuts(reqs []*request) {
	key := func(r *request) (int64, string) {
		if len(r.items) == 0 {
			return 0, ""
		}
		ms, _ := strconv.ParseInt(r.items[0].req, 10, 64)
		return ms, r.items[0].id
	}
	slices.SortStableFunc(reqs, func(a, b *request) int {
		ams, aid := key(a)
		bms, bid := key(b)
		if c := cmp.Compare(ams, bms); c != 0 {
			return c
		}
		return strings.Compare(aid, bid)
	})
}

// dispatch hands each request its part of a call's reply.
func (w *writer) dispatch(c *call) {
	v, err := c.cmd.Slice()
	if err == nil && len(v) < 2 {
		err = fmt.Errorf("%w: script replied %v", ErrProtocol, v)
	}
	if err != nil {
		for _, r := range c.reqs {
			w.finish(r, err)
		}
		return
	}
	now, _ := v[0].(int64)
	ver, _ := v[1].(int64)
	w.q.clock.observe(now, c.sent)
	rest := v[2:]
	for _, r := range c.reqs {
		r.now, r.ver = now, ver
		var n int
		switch c.kind {
		case opPut:
			n = 2 * len(r.items)
		case opAck:
			n = 3 * len(r.acks) // code, alias, limited topic
		case opExtend:
			n = 2 * len(r.extends) // code, limited topic
		case opPermitExtend:
			n = len(r.permits) // found
		default:
			n = len(rest)
		}
		if n > len(rest) {
			w.finish(r, fmt.Errorf("%w: script replied %v", ErrProtocol, v))
			continue
		}
		r.reply = rest[:n:n]
		rest = rest[n:]
		w.finish(r, nil)
	}
}

// replicasNeeded returns how many replicas the pipeline to n waits for.
func (w *writer) replicasNeeded(n *node) int {
	if w.q.cfg.replicas >= 0 {
		return w.q.cfg.replicas
	}
	n.mu.Lock()
	fresh := time.Since(n.mu.replicasAt) < replicaRefresh
	count := n.mu.replicas
	n.mu.Unlock()
	if fresh {
		return min(count, 1)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	info, err := n.client.Info(ctx, "replication").Result()
	if err != nil {
		return min(count, 1)
	}
	count = 0
	for _, line := range strings.Split(info, "\n") {
		// slaveN:ip=...,port=...,state=online,offset=...,lag=...
		if strings.HasPrefix(line, "slave") && strings.Contains(line, "state=online") {
			count++
		}
	}
	n.mu.Lock()
	n.mu.replicas, n.mu.replicasAt = count, time.Now()
	n.mu.Unlock()
	return min(count, 1)
}

// loadLibrary loads the function library on n, which had not it (a restarted, promoted or flushed
// node).
func (w *writer) loadLibrary(n *node) {
	ctx, cancel := context.WithTimeout(context.Background(), pipelineTimeout)
	defer cancel()
	_ = loadLibrary(ctx, n.client)
}
