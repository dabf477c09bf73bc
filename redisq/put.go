package redisq

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/tockwheel/tock/queue"
)

// Limits of messages.
const (
	// MaxTopic is the longest topic accepted, in bytes: topics are part of key names and events.
	MaxTopic = 1024
	// MaxID is the longest chosen ID accepted, in bytes.
	MaxID = 1024
	// maxResolves bounds how often one Put resolves aliases and starts again.
	maxResolves = 5
)

// errNothingWritten makes putBatch remove the aliases it reserved for a batch of retried Puts.
var errNothingWritten = errors.New("redisq: nothing written")

// errUnknownReceipt is the error of each receipt that names no current lease.
var errUnknownReceipt = fmt.Errorf("redisq: %w", queue.ErrUnknownReceipt)

// item checks m and returns it as the put script takes it (without ID for a generated ID).
func (q *Queue) item(m queue.Message) (putItem, error) {
	switch {
	case m.Topic == "":
		return putItem{}, fmt.Errorf("redisq: topic is empty: %w", queue.ErrInvalid)
	case len(m.Topic) > MaxTopic:
		return putItem{}, fmt.Errorf("redisq: topic of %d bytes, over %d: %w", len(m.Topic), MaxTopic, queue.ErrInvalid)
	case len(m.ID) > MaxID:
		return putItem{}, fmt.Errorf("redisq: ID of %d bytes, over %d: %w", len(m.ID), MaxID, queue.ErrInvalid)
	case len(m.Payload) > q.cfg.maxPayload:
		return putItem{}, fmt.Errorf("redisq: payload of %d bytes, over %d: %w", len(m.Payload), q.cfg.maxPayload, queue.ErrTooLarge)
	}
	if _, err := queue.DueAt(m.DeliverAt, time.Time{}); err != nil {
		return putItem{}, fmt.Errorf("redisq: %w", err)
	}
	it := putItem{id: m.ID, req: strconv.FormatInt(ceilMillis(m.DeliverAt), 10), topic: m.Topic, payload: m.Payload}
	if len(m.Headers) > 0 {
		if err := queue.CheckHeaders(m.Headers); err != nil {
			return putItem{}, fmt.Errorf("redisq: %w", err)
		}
		if n := len(m.Payload) + queue.HeadersSize(m.Headers); n > q.cfg.maxPayload {
			return putItem{}, fmt.Errorf("redisq: payload and headers of %d bytes, over %d: %w", n, q.cfg.maxPayload, queue.ErrTooLarge)
		}
		it.headers = encodeHeaders(m.Headers)
	}
	if it.payload == nil {
		it.payload = []byte{}
	}
	return it, nil
}

// newNonce returns the nonce of a Put call of chosen IDs, which tells its retries from other Puts.
func newNonce() string {
	var b [8]byte
	rand.Read(b[:])
	return b64.EncodeToString(b[:])
}

// ceilMillis returns t in Unix milliseconds, rounded up: a due time is never rounded earlier.
func ceilMillis(t time.Time) int64 {
	ms := t.UnixMilli()
	if t.Nanosecond()%int(time.Millisecond) != 0 {
		ms++
	}
	return ms
}

// millis returns d in milliseconds, rounded up.
func millis(d time.Duration) int64 {
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// Put stores m and returns its ID; see [queue.Engine.Put]. The message is in Redis (and, with the
// replica wait, on a replica) when Put returns nil. A generated ID is drawn when the message is
// sent, in a shard of the master the write goes to; a chosen ID is put in its home shard.
func (q *Queue) Put(ctx context.Context, m queue.Message) (string, error) {
	if err := q.usable(); err != nil {
		return "", err
	}
	it, err := q.item(m)
	if err != nil {
		return "", err
	}
	if m.ID == "" {
		for {
			r := &request{kind: opPut, shard: -1, genIDs: true, items: []putItem{it}}
			if err := q.writer.do(ctx, r); err != nil {
				return "", q.writeErr("put", err)
			}
			code, _ := replyStr(r.reply, 0)
			switch code {
			case "new", "same":
				q.putDone(r.shard, r.items[0], r.reply, r.ver)
				return r.items[0].id, nil
			case "dup":
				continue // a generated ID that was taken: draw another
			}
			return "", fmt.Errorf("%w: put script replied %v", ErrProtocol, r.reply)
		}
	}
	shard := q.lay.home(m.ID)
	it.nonce = newNonce()
	it.replace = m.Replace
	for range maxResolves {
		r := &request{kind: opPut, shard: shard, items: []putItem{it}}
		if err := q.writer.do(ctx, r); err != nil {
			return "", q.writeErr("put", err)
		}
		code, val := replyStr(r.reply, 0)
		switch code {
		case "new", "same":
			q.putDone(shard, it, r.reply, r.ver)
			return m.ID, nil
		case "dup":
			return "", duplicate(m.ID, val)
		case "leased":
			return "", fmt.Errorf("redisq: %w", &queue.DuplicateError{ID: m.ID, Leased: true})
		case "alias":
			same, due, err := q.resolve(ctx, m.ID, val, it)
			if err != nil {
				return "", err
			}
			if due != "" {
				if same {
					return m.ID, nil
				}
				return "", duplicate(m.ID, due)
			}
			continue // the alias was stale and is gone: put again
		default:
			return "", fmt.Errorf("%w: put script replied %v", ErrProtocol, r.reply)
		}
	}
	return "", fmt.Errorf("redisq: put %q: the ID is being put by batches that keep failing: %w", m.ID, queue.ErrUnavailable)
}

// putDone lets this process's receivers know of a message it put straight into a ready set,
// before the shard's event arrives.
func (q *Queue) putDone(shard int, it putItem, reply []any, ver int64) {
	code, where := replyStr(reply, 0)
	if code != "new" || where != "r" {
		return
	}
	due, _ := strconv.ParseInt(it.req, 10, 64)
	q.topicHeadAtMost(it.topic, shard, max(due, q.clock.now()), ver)
}

// writeErr wraps an error of a grouped write.
func (q *Queue) writeErr(what string, err error) error {
	if errors.Is(err, queue.ErrClosed) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("redisq: %s: %w", what, err)
	}
	if errors.Is(err, queue.ErrUnavailable) || errors.Is(err, ErrProtocol) {
		return fmt.Errorf("redisq: %s: %w", what, err)
	}
	return fmt.Errorf("redisq: %s: %w", what, unavailable(err))
}

// duplicate returns the error of a Put whose ID names a waiting message due at dueMs.
func duplicate(id, dueMs string) error {
	ms, _ := strconv.ParseInt(dueMs, 10, 64)
	return fmt.Errorf("redisq: %w", &queue.DuplicateError{ID: id, DeliverAt: time.UnixMilli(ms)})
}

// replyStr returns the i-th (code, value) pair of a reply as strings.
func replyStr(reply []any, i int) (code, val string) {
	if 2*i+1 >= len(reply) {
		return "", ""
	}
	return anyStr(reply[2*i]), anyStr(reply[2*i+1])
}

func anyStr(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case int64:
		return strconv.FormatInt(v, 10)
	}
	return ""
}

// resolve settles the alias of id, whose value is alias, for a Put of it: if the aliased message
// waits, due is its due time and same says whether it is the one being put; otherwise the alias is
// removed and due is "".
func (q *Queue) resolve(ctx context.Context, id, alias string, it putItem) (same bool, due string, err error) {
	at, token, ok := parseAlias(alias, q.lay.shards())
	if !ok {
		return false, "", fmt.Errorf("%w: alias %q of %q", ErrProtocol, alias, id)
	}
	r := &request{kind: opScript, shard: at, script: resolveScript, args: func(int, bool) []any {
		return []any{id, token, "check", it.req, it.topic, it.payload}
	}}
	if err := q.writer.do(ctx, r); err != nil {
		return false, "", q.writeErr("put", err)
	}
	code, val := replyStr(r.reply, 0)
	switch code {
	case "same", "dup":
		return code == "same", val, nil
	case "aborted":
		home := q.lay.home(id)
		return false, "", q.unalias(ctx, home, id, alias)
	}
	return false, "", fmt.Errorf("%w: resolve script replied %v", ErrProtocol, r.reply)
}

// unalias removes the alias of id in shard home if its value is still alias.
func (q *Queue) unalias(ctx context.Context, home int, id, alias string) error {
	r := &request{kind: opScript, shard: home, script: unaliasScript, args: func(int, bool) []any {
		return []any{id, alias}
	}}
	if err := q.writer.do(ctx, r); err != nil {
		return q.writeErr("remove alias", err)
	}
	return nil
}

// PutBatch stores every message of ms or none of them, and returns their IDs in order; see
// [queue.Engine.PutBatch] and, for batches whose chosen IDs belong to several shards, the package
// doc. An empty batch stores nothing and returns no IDs.
func (q *Queue) PutBatch(ctx context.Context, ms []queue.Message) ([]string, error) {
	if err := q.usable(); err != nil {
		return nil, err
	}
	items := make([]putItem, len(ms))
	seen := make(map[string]bool)
	batchShard := -1
	for i, m := range ms {
		it, err := q.item(m)
		if err != nil {
			return nil, fmt.Errorf("%w (message %d of the batch)", err, i)
		}
		if m.Replace && m.ID != "" {
			return nil, fmt.Errorf("redisq: message %d of the batch asks to replace %q: only Put replaces: %w", i, m.ID, queue.ErrInvalid)
		}
		if m.ID != "" {
			if seen[m.ID] {
				return nil, fmt.Errorf("redisq: ID %q repeats in the batch: %w", m.ID, queue.ErrInvalid)
			}
			seen[m.ID] = true
			if batchShard < 0 {
				batchShard = q.lay.home(m.ID)
			}
		}
		items[i] = it
	}
	if len(ms) == 0 {
		return []string{}, nil
	}
	if batchShard < 0 {
		batchShard = q.writer.pickShard("")
	}
	now := q.clock.now()
	sec := now / 1000
	nonce := newNonce()
	for i := range items {
		it := &items[i]
		if it.id != "" {
			it.nonce = nonce
		}
		if it.id == "" {
			due, _ := strconv.ParseInt(it.req, 10, 64)
			it.id = newID(batchShard, max(due/1000, sec), now)
		} else if home := q.lay.home(it.id); home != batchShard {
			it.home = strconv.Itoa(home)
		}
	}
	var err error
	for range maxResolves {
		var again bool
		again, err = q.putBatch(ctx, batchShard, items)
		if !again {
			break
		}
	}
	if err == errNothingWritten {
		err = nil
	}
	if err != nil {
		return nil, err
	}
	ids := make([]string, len(items))
	for i, it := range items {
		ids[i] = it.id
	}
	return ids, nil
}

// putBatch makes one attempt at a batch; again reports that it must be made again (an alias was
// resolved, or the batch was aborted).
func (q *Queue) putBatch(ctx context.Context, shard int, items []putItem) (again bool, err error) {
	foreign := make(map[int][]int) // home shard -> indexes of the items aliased there
	for i, it := range items {
		if it.home != "" {
			h, _ := strconv.Atoi(it.home)
			foreign[h] = append(foreign[h], i)
		}
	}
	token := ""
	xsame := make(map[int]string) // items waiting as put in their home shard -> due time
	var reserved []int            // home shards where aliases were written
	if len(foreign) > 0 {
		token = strconv.FormatInt(q.clock.now(), 10) + "-" + rand.Text()[:16]
		alias := strconv.Itoa(shard) + "." + token
		cleanup := func() {
			for _, h := range reserved {
				for _, i := range foreign[h] {
					_ = q.unalias(context.WithoutCancel(ctx), h, items[i].id, alias)
				}
			}
		}
		for h, idx := range foreign {
			code, vals, err := q.reserve(ctx, h, alias, items, idx)
			if err != nil {
				cleanup()
				return false, err
			}
			if code == "ok" {
				reserved = append(reserved, h)
				continue
			}
			// Nothing was reserved in h. The batch can then only be a retry of messages that all
			// wait already (the put script below writes nothing unless every message is new),
			// or fail.
			for k, i := range idx {
				c, v := replyStr(vals, k)
				switch c {
				case "dup":
					cleanup()
					return false, duplicate(items[i].id, v)
				case "same":
					xsame[i] = v
				case "alias":
					same, due, err := q.resolve(ctx, items[i].id, v, items[i])
					switch {
					case err != nil:
						cleanup()
						return false, err
					case due == "":
						cleanup()
						return true, nil // a stale alias, now removed: reserve again
					case !same:
						cleanup()
						return false, duplicate(items[i].id, due)
					}
					if at, _, _ := parseAlias(v, q.lay.shards()); at != shard {
						xsame[i] = due
					}
				}
			}
		}
		if q.testHookBatch != nil {
			if err := q.testHookBatch("reserved"); err != nil {
				return false, err
			}
		}
		defer func() {
			if err != nil || again {
				cleanup()
			}
		}()
	}
	var send []putItem
	var sendIdx []int
	for i, it := range items {
		if _, ok := xsame[i]; !ok {
			send = append(send, it)
			sendIdx = append(sendIdx, i)
		}
	}
	r := &request{kind: opScript, shard: shard, script: putScript, args: func(_ int, retry bool) []any {
		args := make([]any, 0, 4+8*len(send))
		args = append(args, "a", token, len(xsame), len(send))
		for _, it := range send {
			args = it.append(args, retry)
		}
		return args
	}}
	if err := q.writer.do(ctx, r); err != nil {
		return false, q.writeErr("put batch", err)
	}
	if c, _ := replyStr(r.reply, 0); c == "aborted" || (len(r.reply) == 1 && anyStr(r.reply[0]) == "aborted") {
		return true, nil
	}
	fresh, firstSame, firstSameDue := 0, -1, ""
	for k, i := range sendIdx {
		c, v := replyStr(r.reply, k)
		switch c {
		case "new":
			fresh++
		case "same":
			if firstSame < 0 {
				firstSame, firstSameDue = i, v
			}
		case "dup":
			return false, duplicate(items[i].id, v)
		case "alias":
			if _, due, err := q.resolve(ctx, items[i].id, v, items[i]); err != nil || due != "" {
				if err == nil {
					err = duplicate(items[i].id, due)
				}
				return false, err
			}
			return true, nil
		default:
			return false, fmt.Errorf("%w: put script replied %v", ErrProtocol, r.reply)
		}
	}
	switch {
	case fresh == 0:
		// Every message is a retried Put, or a retry of this call whose messages are done: the
		// aliases reserved now (if any) point at nothing.
		if len(reserved) > 0 {
			return false, errNothingWritten
		}
		return false, nil
	case firstSame >= 0:
		return false, duplicate(items[firstSame].id, firstSameDue)
	case len(xsame) > 0:
		for i, due := range xsame {
			return false, duplicate(items[i].id, due)
		}
	}
	for k := range send {
		q.putDone(shard, send[k], r.reply[2*k:], r.ver)
	}
	return false, nil
}

// reserve runs the reserve script for the items idx on shard home; code is "ok" when every alias
// was written, and otherwise vals holds the script's (code, value) per item.
func (q *Queue) reserve(ctx context.Context, home int, alias string, items []putItem, idx []int) (code string, vals []any, err error) {
	r := &request{kind: opScript, shard: home, script: reserveScript, args: func(int, bool) []any {
		args := make([]any, 0, 2+4*len(idx))
		args = append(args, alias, len(idx))
		for _, i := range idx {
			it := items[i]
			args = append(args, it.id, it.req, it.topic, it.payload)
		}
		return args
	}}
	if err := q.writer.do(ctx, r); err != nil {
		return "", nil, q.writeErr("put batch: reserve", err)
	}
	for k := range idx {
		if c, _ := replyStr(r.reply, k); c != "ok" {
			return c, r.reply, nil
		}
	}
	return "ok", r.reply, nil
}
