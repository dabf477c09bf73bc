package redisq

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tockwheel/tock/queue"
	"github.com/tockwheel/tock/schedule"
)

var _ queue.Scheduler = (*Queue)(nil)

// maxStale bounds how often ResumeSchedule plans again after a concurrent SetSchedule.
const maxStale = 5

// schedKey, schedActKey and schedNamesKey name a shard's schedules, their act times and their
// names (see the package doc).
func (l *layout) schedKey(s int) string      { return "{" + l.tags[s] + "}:sch" }
func (l *layout) schedActKey(s int) string   { return "{" + l.tags[s] + "}:sact" }
func (l *layout) schedNamesKey(s int) string { return "{" + l.tags[s] + "}:snames" }

// fireArgs appends the script's arguments for the fires at the nominal times ts of the schedule
// name: the count, then each fire's ID and nominal time in milliseconds.
func fireArgs(args []any, spec *schedule.Spec, name string, ts []time.Time) []any {
	args = append(args, len(ts))
	for _, t := range ts {
		args = append(args, spec.FireID(name, t), t.UnixMilli())
	}
	return args
}

// SetSchedule creates or replaces the schedule s.Name; see [queue.Scheduler.SetSchedule]. The
// schedule lives in the home shard of its name, and so do its fires (see Schedules in the package
// doc). The write is grouped and retried as Put's are; a repeat of the call after a lost reply
// reports what the first run did.
func (q *Queue) SetSchedule(ctx context.Context, s queue.Schedule) (bool, error) {
	if err := q.usable(); err != nil {
		return false, err
	}
	now := time.UnixMilli(q.clock.now())
	spec, err := schedule.Check(s, now)
	if err != nil {
		return false, fmt.Errorf("redisq: schedule %.40q: %w", s.Name, err)
	}
	switch {
	case len(s.Topic) > MaxTopic:
		return false, fmt.Errorf("redisq: schedule %q: topic of %d bytes, over %d: %w", s.Name, len(s.Topic), MaxTopic, queue.ErrInvalid)
	case len(s.Payload) > q.cfg.maxPayload:
		return false, fmt.Errorf("redisq: schedule %q: payload of %d bytes, over %d: %w", s.Name, len(s.Payload), q.cfg.maxPayload, queue.ErrTooLarge)
	}
	s = schedule.Normalize(s)
	p := spec.Plan(spec.Next(now), now, s.Misfire, s.Overlap)
	shard := q.lay.home(s.Name)
	nonce := newNonce()
	act := actTime(p, s.Overlap == queue.OverlapSkip)
	r := &request{kind: opScript, shard: shard, script: scheduleScript, args: func(int, bool) []any {
		args := []any{"set", s.Name, nonce, spec.Start().UnixMilli(), millisOr(p.Next), act,
			string(s.Misfire), string(s.Overlap), s.Topic, s.Spec, s.TimeZone, nonNil(s.Payload)}
		return fireArgs(args, spec, s.Name, p.Fire)
	}}
	if err := q.writer.do(ctx, r); err != nil {
		return false, q.writeErr("set schedule", err)
	}
	code := anyStr(first(r.reply))
	if code != "new" && code != "replaced" {
		return false, fmt.Errorf("%w: schedule script replied %v", ErrProtocol, r.reply)
	}
	q.sched[shard].earlier(act)
	return code == "new", nil
}

func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

// Schedule returns the schedule name; see [queue.Scheduler.Schedule].
func (q *Queue) Schedule(ctx context.Context, name string) (queue.ScheduleInfo, error) {
	rec, err := q.scheduleRecord(ctx, name)
	if err != nil {
		return queue.ScheduleInfo{}, err
	}
	return scheduleInfo(name, rec, time.UnixMilli(q.clock.now())), nil
}

// scheduleInfo returns what the API reports of the schedule name kept as rec, at now.
func scheduleInfo(name string, rec schedRecord, now time.Time) queue.ScheduleInfo {
	info := queue.ScheduleInfo{Schedule: rec.schedule(name), Paused: rec.paused, Fires: rec.fires,
		Misfires: rec.misfires, Created: time.UnixMilli(rec.created), Updated: time.UnixMilli(rec.updated)}
	for _, id := range []string{rec.last, rec.prev} {
		if _, at, ok := queue.ParseFireID(id); ok && !at.After(now) {
			info.LastFire, info.LastFireID = at, id
			break
		}
	}
	if !rec.paused {
		if spec, err := schedule.Parse(rec.spec, rec.zone, time.UnixMilli(rec.start)); err == nil {
			info.Next = spec.Upcoming(now.Add(-time.Millisecond), queue.FireTimes)
			if pend, at, ok := queue.ParseFireID(rec.last); ok && pend == name && at.After(now) && len(info.Next) > 0 && info.Next[0].After(at) {
				info.Next = append([]time.Time{at}, info.Next[:len(info.Next)-1]...)
			}
		}
	}
	return info
}

// Schedules returns a page of schedules in the order of their names; see
// [queue.Scheduler.Schedules]. It asks every shard, in one pipeline, for its first limit names
// after the cursor, merges them, and reads the page's records.
func (q *Queue) Schedules(ctx context.Context, cursor string, limit int) ([]queue.ScheduleInfo, string, error) {
	if err := q.usable(); err != nil {
		return nil, "", err
	}
	if limit < 1 || limit > queue.MaxPage {
		return nil, "", fmt.Errorf("redisq: schedules: limit %d, want 1 to %d: %w", limit, queue.MaxPage, queue.ErrInvalid)
	}
	min := "-"
	if cursor != "" {
		min = "(" + cursor
	}
	n := q.lay.shards()
	pipe := q.rdb.Pipeline()
	cmds := make([]*redis.StringSliceCmd, n)
	for s := range n {
		cmds[s] = pipe.ZRangeByLex(ctx, q.lay.schedNamesKey(s), &redis.ZRangeBy{Min: min, Max: "+", Count: int64(limit) + 1})
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, "", fmt.Errorf("redisq: schedules: %w", unavailable(err))
	}
	type named struct {
		name  string
		shard int
	}
	var all []named
	for s, c := range cmds {
		for _, name := range c.Val() {
			all = append(all, named{name, s})
		}
	}
	slices.SortFunc(all, func(a, b named) int { return cmp.Compare(a.name, b.name) })
	next := ""
	if len(all) > limit {
		all = all[:limit]
		next = all[limit-1].name
	}
	pipe = q.rdb.Pipeline()
	gets := make([]*redis.StringCmd, len(all))
	for i, x := range all {
		gets[i] = pipe.HGet(ctx, q.lay.schedKey(x.shard), x.name)
	}
	if len(all) > 0 {
		if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
			return nil, "", fmt.Errorf("redisq: schedules: %w", unavailable(err))
		}
	}
	now := time.UnixMilli(q.clock.now())
	page := make([]queue.ScheduleInfo, 0, len(all))
	for i, x := range all {
		raw, err := gets[i].Result()
		if err != nil {
			continue // deleted between the two reads
		}
		rec, err := decodeSchedRecord(raw)
		if err != nil {
			return nil, "", err
		}
		page = append(page, scheduleInfo(x.name, rec, now))
	}
	return page, next, nil
}

// scheduleOp runs an operation of the schedule script on the home shard of name and returns its
// answer.
func (q *Queue) scheduleOp(ctx context.Context, what, name string, args ...any) (string, error) {
	if err := q.usable(); err != nil {
		return "", err
	}
	r := &request{kind: opScript, shard: q.lay.home(name), script: scheduleScript, args: func(int, bool) []any {
		return args
	}}
	if err := q.writer.do(ctx, r); err != nil {
		return "", q.writeErr(what, err)
	}
	return anyStr(first(r.reply)), nil
}

// DeleteSchedule removes the schedule name; see [queue.Scheduler.DeleteSchedule]. A repeat of the
// call after a lost reply of a run that deleted it reports false.
func (q *Queue) DeleteSchedule(ctx context.Context, name string) (bool, error) {
	if schedule.CheckName(name) != nil {
		return false, q.usable()
	}
	code, err := q.scheduleOp(ctx, "delete schedule", name, "delete", name)
	return code == "1", err
}

// PauseSchedule stops the schedule's fires; see [queue.Scheduler.PauseSchedule].
func (q *Queue) PauseSchedule(ctx context.Context, name string) error {
	if err := schedule.CheckName(name); err != nil {
		return fmt.Errorf("redisq: %w: %w", queue.ErrNotFound, err)
	}
	code, err := q.scheduleOp(ctx, "pause schedule", name, "pause", name)
	if err == nil && code == "none" {
		err = fmt.Errorf("redisq: pause schedule %q: %w", name, queue.ErrNotFound)
	}
	return err
}

// ResumeSchedule ends a pause; see [queue.Scheduler.ResumeSchedule]. It reads the schedule, plans
// its fires from now, and writes them if the schedule was not set again meanwhile (else it plans
// again).
func (q *Queue) ResumeSchedule(ctx context.Context, name string) error {
	for range maxStale {
		rec, err := q.scheduleRecord(ctx, name)
		if err != nil {
			return err
		}
		if !rec.paused {
			return nil
		}
		now := time.UnixMilli(q.clock.now())
		spec, err := schedule.Parse(rec.spec, rec.zone, time.UnixMilli(rec.start))
		if err != nil {
			return fmt.Errorf("redisq: resume schedule %q: %w", name, err)
		}
		p := spec.Plan(spec.Next(now), now, rec.misfire, rec.overlap)
		act := actTime(p, rec.overlap == queue.OverlapSkip)
		args := []any{"resume", name, strconv.FormatInt(rec.gen, 10), millisOr(p.Next), act}
		code, err := q.scheduleOp(ctx, "resume schedule", name, fireArgs(args, spec, name, p.Fire)...)
		switch {
		case err != nil:
			return err
		case code == "none":
			return fmt.Errorf("redisq: resume schedule %q: %w", name, queue.ErrNotFound)
		case code == "ok" || code == "running":
			q.sched[q.lay.home(name)].earlier(act)
			return nil
		}
	}
	return fmt.Errorf("redisq: resume schedule %q: set again %d times while resuming: %w", name, maxStale, queue.ErrUnavailable)
}

// scheduleRecord reads the record of the schedule name.
func (q *Queue) scheduleRecord(ctx context.Context, name string) (schedRecord, error) {
	if err := q.usable(); err != nil {
		return schedRecord{}, err
	}
	if err := schedule.CheckName(name); err != nil {
		return schedRecord{}, fmt.Errorf("redisq: %w: %w", queue.ErrNotFound, err)
	}
	raw, err := q.rdb.HGet(ctx, q.lay.schedKey(q.lay.home(name)), name).Result()
	if errors.Is(err, redis.Nil) {
		return schedRecord{}, fmt.Errorf("redisq: schedule %q: %w", name, queue.ErrNotFound)
	}
	if err != nil {
		return schedRecord{}, fmt.Errorf("redisq: schedule %q: %w", name, unavailable(err))
	}
	return decodeSchedRecord(raw)
}

// TriggerSchedule fires the schedule name once now; see [queue.Scheduler.TriggerSchedule]. The
// fire's nominal time is this process's estimate of the Redis clock.
func (q *Queue) TriggerSchedule(ctx context.Context, name string) (string, error) {
	if err := schedule.CheckName(name); err != nil {
		return "", fmt.Errorf("redisq: %w: %w", queue.ErrNotFound, err)
	}
	at := time.UnixMilli(q.clock.now())
	id := queue.FireID(name, at, true)
	code, err := q.scheduleOp(ctx, "trigger schedule", name, "trigger", name, id, at.UnixMilli())
	switch {
	case err != nil:
		return "", err
	case code == "none":
		return "", fmt.Errorf("redisq: trigger schedule %q: %w", name, queue.ErrNotFound)
	}
	return id, nil
}

// ScheduleStats adds up the shards' schedule counters; see [queue.Scheduler.ScheduleStats].
func (q *Queue) ScheduleStats(ctx context.Context) (queue.ScheduleStats, error) {
	var st queue.ScheduleStats
	if err := q.usable(); err != nil {
		return st, err
	}
	pipe := q.rdb.Pipeline()
	cmds := make([]*redis.SliceCmd, q.lay.shards())
	for s := range cmds {
		cmds[s] = pipe.HMGet(ctx, q.lay.metaKey(s), "schn", "schp", "schf", "schm")
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return st, fmt.Errorf("redisq: schedule stats: %w", unavailable(err))
	}
	for _, c := range cmds {
		v := c.Val()
		num := func(i int) int64 {
			if i >= len(v) {
				return 0
			}
			s, _ := v[i].(string)
			n, _ := strconv.ParseInt(s, 10, 64)
			return n
		}
		st.Schedules += num(0)
		st.Paused += num(1)
		st.Fires += uint64(num(2))
		st.Misfires += uint64(num(3))
	}
	return st, nil
}
