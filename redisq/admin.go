package redisq

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/tockwheel/tock/queue"
)

// stepBudget bounds the messages one purge or requeue script moves: a few milliseconds of Redis's
// time, so that acting on a million messages never holds other commands up for long.
const stepBudget = 500

// maxIDsPerScript bounds the IDs one requeue script is given.
const maxIDsPerScript = 500

// checkTopic refuses a topic that no message can have.
func checkTopic(what, topic string) error {
	if topic == "" || len(topic) > MaxTopic {
		return fmt.Errorf("redisq: %s: topic of %d bytes: %w", what, len(topic), queue.ErrInvalid)
	}
	return nil
}

// Topics lists every topic that holds a message in any state, or is paused, with its counts; see
// [queue.Admin.Topics]. It runs one read-only script per shard, in one pipeline (one per master on
// a cluster), whose work is a few commands per topic the shard knows: the counts come from the
// topic's sets and the counters the scripts keep beside them. Puts, Deliveries, Acks and Nacks count
// from the deployment's creation; the counters of a topic stay in each shard once used (about 100 bytes
// per topic and shard), so that they only grow.
func (q *Queue) Topics(ctx context.Context) ([]queue.TopicInfo, error) {
	if err := q.usable(); err != nil {
		return nil, err
	}
	sent := time.Now()
	replies, err := q.eachShard(ctx, topicsScript, func(int) []any { return nil })
	if err != nil {
		return nil, fmt.Errorf("redisq: topics: %w", unavailable(err))
	}
	byName := make(map[string]*queue.TopicInfo)
	const fields = 11 // name, scheduled, due, leased, dead, oldest due, paused, puts, deliveries, acks, nacks
	for _, v := range replies {
		n := int64(-1)
		if len(v) >= 2 {
			now, _ := v[0].(int64)
			q.clock.observe(now, sent)
			n, _ = v[1].(int64)
		}
		if n < 0 || len(v) != 2+fields*int(n) {
			return nil, fmt.Errorf("%w: topics script replied %d values", ErrProtocol, len(v))
		}
		for i := 2; i < len(v); i += fields {
			name, _ := v[i].(string)
			num := func(k int) int64 { x, _ := v[i+k].(int64); return x }
			t := byName[name]
			if t == nil {
				t = &queue.TopicInfo{Topic: name}
				byName[name] = t
			}
			t.Scheduled += num(1)
			t.Due += num(2)
			t.Leased += num(3)
			t.Dead += num(4)
			if oldest := num(5); oldest >= 0 && (t.OldestDue.IsZero() || oldest < t.OldestDue.UnixMilli()) {
				t.OldestDue = time.UnixMilli(oldest)
			}
			t.Paused = t.Paused || num(6) == 1
			t.Puts += uint64(num(7))
			t.Deliveries += uint64(num(8))
			t.Acks += uint64(num(9))
			t.Nacks += uint64(num(10))
		}
	}
	out := make([]queue.TopicInfo, 0, len(byName))
	for _, t := range byName {
		if t.Scheduled+t.Due+t.Leased+t.Dead > 0 || t.Paused {
			out = append(out, *t)
		}
	}
	slices.SortFunc(out, func(a, b queue.TopicInfo) int {
		switch {
		case a.Topic < b.Topic:
			return -1
		case a.Topic > b.Topic:
			return 1
		}
		return 0
	})
	return out, nil
}

// Message returns the waiting message id with its whole payload; see [queue.Admin.Message]. It
// reads the shard the ID names (or, for a message of a cross-shard batch, the shard its alias
// names) with one read-only script.
func (q *Queue) Message(ctx context.Context, id string) (queue.MessageInfo, error) {
	if err := q.usable(); err != nil {
		return queue.MessageInfo{}, err
	}
	notFound := fmt.Errorf("redisq: message %.64q: %w", id, queue.ErrNotFound)
	if id == "" || len(id) > MaxID {
		return queue.MessageInfo{}, notFound
	}
	shard := q.lay.home(id)
	for hop := 0; hop < 2; hop++ {
		sent := time.Now()
		v, err := messageScript.Run(ctx, q.rdb, q.lay.keys(shard), q.withStamp(id)...).Slice()
		if again, serr := q.afterStampErr(ctx, err); again {
			v, err = messageScript.Run(ctx, q.rdb, q.lay.keys(shard), q.withStamp(id)...).Slice()
		} else {
			err = serr
		}
		if err != nil {
			return queue.MessageInfo{}, fmt.Errorf("redisq: message: %w", unavailable(err))
		}
		if len(v) < 2 {
			return queue.MessageInfo{}, fmt.Errorf("%w: message script replied %v", ErrProtocol, v)
		}
		now, _ := v[0].(int64)
		q.clock.observe(now, sent)
		kind, _ := v[1].(string)
		switch kind {
		case "none":
			return queue.MessageInfo{}, notFound
		case "alias":
			a, _ := v[2].(string)
			at, _, ok := parseAlias(a, q.lay.shards())
			if !ok || hop > 0 {
				return queue.MessageInfo{}, notFound
			}
			shard = at
			continue
		}
		if len(v) < 5 {
			return queue.MessageInfo{}, fmt.Errorf("%w: message script replied %v", ErrProtocol, v)
		}
		raw, _ := v[2].(string)
		reason, _ := v[4].(string)
		rec, err := decodeRecord(raw)
		if err != nil {
			return queue.MessageInfo{}, err
		}
		state, score := queue.Scheduled, int64(0)
		switch kind {
		case "r":
			if rec.due <= now {
				state = queue.Due
			}
		case "l":
			state = queue.Leased
			score = scoreOf(v[3])
		}
		return messageInfo(id, state, score, len(rec.payload), rec, reason), nil
	}
	return queue.MessageInfo{}, notFound
}

// messageInfo is what Message and Messages report of a message in state with record rec (its
// payload maybe cut) of a payload of size bytes, and the reason of its last failure; score is the
// lease deadline of a leased one. A dead letter is reported under the topic it died on, with the
// deliveries there counted, and in state Dead unless it is leased.
func messageInfo(id string, state queue.State, score int64, size int, rec record, reason string) queue.MessageInfo {
	mi := queue.MessageInfo{ID: id, Topic: rec.topic, State: state, DeliverAt: time.UnixMilli(rec.due),
		Attempts: rec.att, Payload: rec.payload, Size: size, Reason: reason, Headers: rec.headers}
	mi.LastFailure, mi.FailedAt = rec.failure()
	if state == queue.Leased {
		mi.LeaseDeadline = time.UnixMilli(score)
	}
	if rec.origin != "" {
		mi.Topic = rec.origin
		mi.Attempts += rec.diedAtt
		if state != queue.Leased {
			mi.State = queue.Dead
		}
	}
	return mi
}

// DeliverNow makes the scheduled message id due at once; see [queue.Admin.DeliverNow]. A message
// promoted to its ready set ahead of its due time is still scheduled, and is made due too; a dead
// letter waiting on its dead-letter topic after a failure there is not (it is a dead letter). The
// write is grouped and retried as Put's are: a retry after a lost reply of a run that made the
// message due reports false.
func (q *Queue) DeliverNow(ctx context.Context, id string) (bool, error) {
	if err := q.usable(); err != nil {
		return false, err
	}
	if id == "" || len(id) > MaxID {
		return false, nil
	}
	shard := q.lay.home(id)
	for hop := 0; hop < 2; hop++ {
		r := &request{kind: opScript, shard: shard, script: deliverNowScript, args: func(int, bool) []any {
			return []any{id}
		}}
		if err := q.writer.do(ctx, r); err != nil {
			return false, q.writeErr("deliver now", err)
		}
		code, val := replyStr(r.reply, 0)
		switch code {
		case "1":
			return true, nil
		case "0":
			return false, nil
		case "alias":
			at, _, ok := parseAlias(val, q.lay.shards())
			if !ok || hop > 0 {
				return false, nil
			}
			shard = at
			continue
		}
		return false, fmt.Errorf("%w: deliver now script replied %v", ErrProtocol, r.reply)
	}
	return false, nil
}

// Requeue moves dead letters of topic back onto it; see [queue.Admin.Requeue]. Named dead letters
// take one script per shard (per 500 IDs); all of a topic's take scripts of at most 500 messages
// each, on every shard at once, until none is left: first those not leased, then those that
// consumers of the dead-letter topic hold (found among its leases). The dead-letter topic is the
// one this Queue's options name. The writes are grouped and retried as Put's are: a retry after a
// lost reply counts only what it moved itself.
func (q *Queue) Requeue(ctx context.Context, topic string, ids ...string) (int, error) {
	if err := q.usable(); err != nil {
		return 0, err
	}
	if err := checkTopic("requeue", topic); err != nil {
		return 0, err
	}
	if len(ids) > 0 {
		return q.requeueIDs(ctx, topic, ids)
	}
	var mu sync.Mutex
	total := 0
	err := q.allShards(ctx, func(ctx context.Context, s int) error {
		rank := int64(0)
		for {
			r := &request{kind: opScript, shard: s, script: requeueScript, args: func(int, bool) []any {
				return append(q.cfgArgs(), topic, "all", stepBudget, rank)
			}}
			if err := q.writer.do(ctx, r); err != nil {
				return q.writeErr("requeue", err)
			}
			if len(r.reply) != 3 {
				return fmt.Errorf("%w: requeue script replied %v", ErrProtocol, r.reply)
			}
			moved, _ := r.reply[0].(int64)
			done, _ := r.reply[1].(int64)
			rank, _ = r.reply[2].(int64)
			mu.Lock()
			total += int(moved)
			mu.Unlock()
			if done == 1 {
				return nil
			}
		}
	})
	return total, err
}

// requeueIDs requeues the named dead letters of topic.
func (q *Queue) requeueIDs(ctx context.Context, topic string, ids []string) (int, error) {
	byShard := make(map[int][]string)
	for _, id := range ids {
		if id == "" || len(id) > MaxID {
			continue
		}
		s := q.lay.home(id)
		byShard[s] = append(byShard[s], id)
	}
	total := 0
	for hop := 0; hop < 2 && len(byShard) > 0; hop++ {
		var mu sync.Mutex
		aliased := make(map[int][]string)
		shards := make([]int, 0, len(byShard))
		for s := range byShard {
			shards = append(shards, s)
		}
		err := q.allOf(ctx, shards, func(ctx context.Context, s int) error {
			list := byShard[s]
			for len(list) > 0 {
				part := list[:min(len(list), maxIDsPerScript)]
				list = list[len(part):]
				r := &request{kind: opScript, shard: s, script: requeueScript, args: func(int, bool) []any {
					args := append(q.cfgArgs(), topic, "ids", len(part))
					for _, id := range part {
						args = append(args, id)
					}
					return args
				}}
				if err := q.writer.do(ctx, r); err != nil {
					return q.writeErr("requeue", err)
				}
				mu.Lock()
				for k, id := range part {
					code, val := replyStr(r.reply, k)
					switch code {
					case "1":
						total++
					case "alias":
						if at, _, ok := parseAlias(val, q.lay.shards()); ok && hop == 0 {
							aliased[at] = append(aliased[at], id)
						}
					}
				}
				mu.Unlock()
			}
			return nil
		})
		if err != nil {
			return total, err
		}
		byShard = aliased
	}
	return total, nil
}

// Purge removes every message of topic in state; see [queue.Admin.Purge]. It runs scripts of at
// most 500 messages each, on every shard at once, until none is left, so that a million messages
// never hold Redis up for long; messages that arrive meanwhile may be removed too. Removed messages
// are done as cancelled ones are. The writes are grouped and retried as Put's are: a retry after a
// lost reply counts only what it removed itself.
func (q *Queue) Purge(ctx context.Context, topic string, state queue.State) (int, error) {
	if err := q.usable(); err != nil {
		return 0, err
	}
	if err := checkTopic("purge", topic); err != nil {
		return 0, err
	}
	var code string
	switch state {
	case queue.Scheduled:
		code = "s"
	case queue.Due:
		code = "d"
	case queue.Dead:
		code = "x"
	default:
		return 0, fmt.Errorf("redisq: purge: state %q: want scheduled, due or dead: %w", state, queue.ErrInvalid)
	}
	var mu sync.Mutex
	total := 0
	err := q.allShards(ctx, func(ctx context.Context, s int) error {
		for {
			r := &request{kind: opScript, shard: s, script: purgeScript, args: func(int, bool) []any {
				return []any{topic, code, stepBudget}
			}}
			if err := q.writer.do(ctx, r); err != nil {
				return q.writeErr("purge", err)
			}
			if len(r.reply) != 2 {
				return fmt.Errorf("%w: purge script replied %v", ErrProtocol, r.reply)
			}
			removed, _ := r.reply[0].(int64)
			done, _ := r.reply[1].(int64)
			mu.Lock()
			total += int(removed)
			mu.Unlock()
			if done == 1 {
				return nil
			}
		}
	})
	return total, err
}

// Pause stops deliveries of topic; see [queue.Admin.Pause]. The pause is a member of a set in
// every shard, which the receive script reads: a Receive on the topic is told it has nothing, and
// waits without asking again until Resume's events. Pause returns once every shard has it; if it
// fails, some shards may be paused: call it again.
func (q *Queue) Pause(ctx context.Context, topic string) error {
	return q.pause(ctx, "pause", topic, "p")
}

// Resume ends a pause of topic; see [queue.Admin.Resume]. Each shard publishes the head of the
// topic's due messages as it resumes, so that waiting Receive calls in every process ask at once.
// If Resume fails, some shards may still be paused: call it again.
func (q *Queue) Resume(ctx context.Context, topic string) error {
	return q.pause(ctx, "resume", topic, "r")
}

func (q *Queue) pause(ctx context.Context, what, topic, mode string) error {
	if err := q.usable(); err != nil {
		return err
	}
	if err := checkTopic(what, topic); err != nil {
		return err
	}
	return q.allShards(ctx, func(ctx context.Context, s int) error {
		r := &request{kind: opScript, shard: s, script: pauseScript, args: func(int, bool) []any {
			return []any{topic, mode}
		}}
		if err := q.writer.do(ctx, r); err != nil {
			return q.writeErr(what, err)
		}
		if head, _ := first(r.reply).(int64); head >= 0 {
			q.topicHeadAtMost(topic, s, head, r.ver)
		}
		return nil
	})
}

// allShards calls fn for every shard at once and returns the first error.
func (q *Queue) allShards(ctx context.Context, fn func(ctx context.Context, shard int) error) error {
	all := make([]int, q.lay.shards())
	for i := range all {
		all[i] = i
	}
	return q.allOf(ctx, all, fn)
}

// allOf calls fn for each of shards at once and returns the first error; the others' contexts
// end with it.
func (q *Queue) allOf(ctx context.Context, shards []int, fn func(ctx context.Context, shard int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, len(shards))
	for i, s := range shards {
		wg.Go(func() {
			if errs[i] = fn(ctx, s); errs[i] != nil {
				cancel()
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil && !errors.Is(err, context.Canceled) {
			return err
		}
	}
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
