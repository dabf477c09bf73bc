package redisq

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/tockwheel/tock/queue"
)

// Ack ends the leases the receipts name; see [queue.Engine.Ack]. A receipt of a message that is
// done (acked or cancelled) is acked again without error: its MAC proves it was issued, so Ack
// needs no record of acked messages. The acks of one shard are one script, grouped with other
// callers' writes to the same master.
func (q *Queue) Ack(ctx context.Context, receipts ...string) error {
	if err := q.usable(); err != nil {
		return err
	}
	type part struct {
		r   *request
		idx []int // positions in receipts
	}
	parts := make(map[int]*part)
	decoded := make([]receipt, len(receipts))
	var failed []queue.ReceiptError
	bad := make(map[int]bool)
	for i, s := range receipts {
		rc, ok := q.verify(ctx, s)
		if !ok {
			bad[i] = true
			continue
		}
		decoded[i] = rc
		p := parts[rc.shard]
		if p == nil {
			p = &part{r: &request{kind: opAck, shard: rc.shard}}
			parts[rc.shard] = p
		}
		p.r.acks = append(p.r.acks, ackItem{id: rc.id, token: rc.token})
		p.idx = append(p.idx, i)
	}
	// Send every shard's part at once, so that they share pipelines.
	for _, p := range parts {
		p.r.ctx = ctx
		p.r.done = make(chan struct{})
		q.writer.submit(p.r)
	}
	stale := make(map[int]bool)
	var permits map[string][]any // limited topics' permits to give back
	for _, p := range parts {
		select {
		case <-p.r.done:
		case <-ctx.Done():
			return fmt.Errorf("redisq: ack: %w", ctx.Err())
		}
		if p.r.err != nil {
			return q.writeErr("ack", p.r.err)
		}
		for k, i := range p.idx {
			if 3*k+2 >= len(p.r.reply) {
				return fmt.Errorf("%w: ack script replied %v", ErrProtocol, p.r.reply)
			}
			code, aux, lim := anyStr(p.r.reply[3*k]), anyStr(p.r.reply[3*k+1]), anyStr(p.r.reply[3*k+2])
			switch code {
			case "1":
				if aux != "" {
					q.dropAlias(decoded[i].id, p.r.shard, aux)
				}
				if lim != "" {
					if permits == nil {
						permits = make(map[string][]any)
					}
					permits[lim] = append(permits[lim], decoded[i].token)
				}
			case "0":
			case "-1":
				stale[i] = true
			default:
				return fmt.Errorf("%w: ack script replied %v", ErrProtocol, p.r.reply)
			}
		}
	}
	q.givePermitsBack(permits)
	for i, s := range receipts {
		if bad[i] || stale[i] {
			failed = append(failed, queue.ReceiptError{Receipt: s, Err: errUnknownReceipt})
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("redisq: %w", &queue.AckError{Failed: failed})
	}
	return nil
}

// dropAlias removes, in the background, the alias of a message put by a cross-shard batch that was
// acked or cancelled on shard at; aux is the record's "<home>.<token>". An alias left behind (this
// process dies first) is removed when its ID is next put or cancelled.
func (q *Queue) dropAlias(id string, at int, aux string) {
	home, token, ok := parseAlias(aux, q.lay.shards())
	if !ok {
		return
	}
	alias := strconv.Itoa(at) + "." + token
	q.wg.Add(1)
	go func() {
		defer q.wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := q.unalias(ctx, home, id, alias); err != nil {
			q.logger().Warn("redisq: remove the alias of a message acked or cancelled; it will be removed when its ID is next used",
				"id", id, "error", err)
		}
	}()
}

// cfgArgs returns the delivery configuration as the scripts take it.
func (q *Queue) cfgArgs() []any {
	return []any{q.cfg.maxAttempts, millis(q.cfg.backoffFirst), millis(q.cfg.backoffMax), q.cfg.deadLetter}
}

// Nack ends the lease receipt names and makes its message due again after delay (rounded up to a
// millisecond), or moves it to the dead-letter topic; see [queue.Engine.Nack]. A reason given
// with queue.WithReason is kept in the shard's {T}:why until the message fails again, is requeued
// or is done.
func (q *Queue) Nack(ctx context.Context, receipt string, delay time.Duration, opts ...queue.NackOption) error {
	if err := q.usable(); err != nil {
		return err
	}
	if delay < 0 {
		return fmt.Errorf("redisq: nack: negative delay %v: %w", delay, queue.ErrInvalid)
	}
	o, err := queue.NackOptionsOf(opts)
	if err != nil {
		return fmt.Errorf("redisq: nack: %w", err)
	}
	rc, ok := q.verify(ctx, receipt)
	if !ok {
		return fmt.Errorf("%w: %.40q", errUnknownReceipt, receipt)
	}
	dead := "0"
	if o.DeadLetter {
		dead = "1"
	}
	r := &request{kind: opScript, shard: rc.shard, script: nackScript, args: func(int, bool) []any {
		return append(q.cfgArgs(), rc.id, rc.token, millis(delay), o.Reason, dead)
	}}
	if err := q.writer.do(ctx, r); err != nil {
		return q.writeErr("nack", err)
	}
	if code := anyStr(first(r.reply)); code != "1" {
		return fmt.Errorf("%w: %.40q", errUnknownReceipt, receipt)
	}
	if lim := replyAt(r.reply, 1); lim != "" {
		q.givePermitsBack(map[string][]any{lim: {rc.token}})
	}
	return nil
}

// Extend moves the deadline of the lease receipt names to visibility (rounded up to a millisecond)
// from the script's clock; see [queue.Engine.Extend]. A lease whose deadline has passed by Redis's
// clock has run out and is not extended, even before a script expired it. Concurrent extensions
// of one shard's leases share a script, grouped with the other writes to the shard's master, as
// acks are; see ExtendBatch for many at once.
func (q *Queue) Extend(ctx context.Context, receipt string, visibility time.Duration) error {
	err := q.extend(ctx, []string{receipt}, visibility, "extend")
	var xe *queue.ExtendError
	if errors.As(err, &xe) {
		return fmt.Errorf("%w: %.40q", errUnknownReceipt, receipt)
	}
	return err
}

var _ queue.BatchExtender = (*Queue)(nil)

// ExtendBatch extends the leases of receipts to visibility (rounded up to a millisecond) from the
// script's clock (see [queue.BatchExtender]): the receipts of each shard in one extend script,
// every shard's sent at once, so that they share pipelines. When some receipts name no current
// lease it returns an [*ExtendError] listing them; the others were extended.
func (q *Queue) ExtendBatch(ctx context.Context, receipts []string, visibility time.Duration) error {
	return q.extend(ctx, receipts, visibility, "extend batch")
}

// extend is Extend and ExtendBatch: the leases first, then the permits of those of limited
// topics (which last as long as their leases, and the margin more). op names the call in errors.
func (q *Queue) extend(ctx context.Context, receipts []string, visibility time.Duration, op string) error {
	if err := q.usable(); err != nil {
		return err
	}
	if visibility <= 0 {
		return fmt.Errorf("redisq: %s: visibility %v: %w", op, visibility, queue.ErrInvalid)
	}
	vis := millis(visibility)
	type part struct {
		r   *request
		idx []int // positions in receipts
	}
	parts := make(map[int]*part)
	decoded := make([]receipt, len(receipts))
	failed := make([]bool, len(receipts))
	for i, s := range receipts {
		rc, ok := q.verify(ctx, s)
		if !ok {
			failed[i] = true
			continue
		}
		decoded[i] = rc
		p := parts[rc.shard]
		if p == nil {
			p = &part{r: &request{kind: opExtend, shard: rc.shard}}
			parts[rc.shard] = p
		}
		p.r.extends = append(p.r.extends, extendItem{id: rc.id, token: rc.token, vis: vis})
		p.idx = append(p.idx, i)
	}
	for _, p := range parts {
		p.r.ctx = ctx
		p.r.done = make(chan struct{})
		q.writer.submit(p.r)
	}
	permits := make(map[int]*request) // by the home shard of limited topics
	for _, p := range parts {
		select {
		case <-p.r.done:
		case <-ctx.Done():
			return fmt.Errorf("redisq: %s: %w", op, ctx.Err())
		}
		if p.r.err != nil {
			return q.writeErr(op, p.r.err)
		}
		if len(p.r.reply) != 2*len(p.idx) {
			return fmt.Errorf("%w: extend script replied %v", ErrProtocol, p.r.reply)
		}
		for k, i := range p.idx {
			switch code, lim := anyStr(p.r.reply[2*k]), anyStr(p.r.reply[2*k+1]); {
			case code == "-1":
				failed[i] = true
			case code != "1":
				return fmt.Errorf("%w: extend script replied %v", ErrProtocol, p.r.reply)
			case lim != "":
				home := q.lay.home(lim)
				pr := permits[home]
				if pr == nil {
					pr = &request{kind: opPermitExtend, shard: home}
					permits[home] = pr
				}
				pr.permits = append(pr.permits, permitItem{topic: lim, token: decoded[i].token, span: vis + permitMargin.Milliseconds()})
			}
		}
	}
	for _, pr := range permits {
		pr.ctx = ctx
		pr.done = make(chan struct{})
		q.writer.submit(pr)
	}
	for _, pr := range permits {
		select {
		case <-pr.done:
		case <-ctx.Done():
			return fmt.Errorf("redisq: %s: %w", op, ctx.Err())
		}
		if pr.err != nil {
			return q.writeErr(op, pr.err)
		}
	}
	var xe queue.ExtendError
	for i, f := range failed {
		if f {
			xe.Failed = append(xe.Failed, queue.ReceiptError{Receipt: receipts[i], Err: errUnknownReceipt})
		}
	}
	if len(xe.Failed) > 0 {
		return fmt.Errorf("redisq: %w", &xe)
	}
	return nil
}

// replyAt returns the i-th value of a reply as a string, "" when there is none.
func replyAt(v []any, i int) string {
	if i >= len(v) {
		return ""
	}
	return anyStr(v[i])
}

func first(v []any) any {
	if len(v) == 0 {
		return nil
	}
	return v[0]
}

// Cancel removes the waiting message id; see [queue.Engine.Cancel]. It returns false for an ID that
// no message of this deployment could have.
func (q *Queue) Cancel(ctx context.Context, id string) (bool, error) {
	if err := q.usable(); err != nil {
		return false, err
	}
	if id == "" || len(id) > MaxID {
		return false, nil
	}
	home := q.lay.home(id)
	r := &request{kind: opScript, shard: home, script: cancelScript, args: func(int, bool) []any {
		return []any{id}
	}}
	if err := q.writer.do(ctx, r); err != nil {
		return false, q.writeErr("cancel", err)
	}
	code, val := replyStr(r.reply, 0)
	switch code {
	case "0":
		return false, nil
	case "1":
		if val != "" {
			q.dropAlias(id, home, val)
		}
		return true, nil
	case "2":
		at, token, ok := parseAlias(val, q.lay.shards())
		if !ok {
			return false, fmt.Errorf("%w: alias %q of %q", ErrProtocol, val, id)
		}
		rr := &request{kind: opScript, shard: at, script: resolveScript, args: func(int, bool) []any {
			return []any{id, token, "cancel"}
		}}
		if err := q.writer.do(ctx, rr); err != nil {
			return false, q.writeErr("cancel", err)
		}
		c, _ := replyStr(rr.reply, 0)
		if err := q.unalias(ctx, home, id, val); err != nil {
			return c == "cancelled", err
		}
		return c == "cancelled", nil
	}
	return false, fmt.Errorf("%w: cancel script replied %v", ErrProtocol, r.reply)
}
