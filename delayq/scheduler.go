package delayq

import (
	"context"
	"fmt"
	"time"

	"github.com/tockwheel/tock/delayq/internal/format"
	"github.com/tockwheel/tock/delayq/internal/wal"
	"github.com/tockwheel/tock/queue"
	"github.com/tockwheel/tock/schedule"
)

// The queue's side of queue.Scheduler. Each call that changes a schedule appends one atomic group
// of records (see schedule.go) under mu and returns once it is durable, as Put does.

// SetSchedule creates the schedule s.Name or replaces it whole; see [queue.Scheduler.SetSchedule].
// The schedule, its fire put ahead (an OverlapAllow schedule's) and the removal of the fire the
// replaced schedule had put ahead are one atomic group of records, durable when SetSchedule
// returns. A topic that leaves no room for its dead-letter topic is refused as Put refuses it.
func (q *Queue) SetSchedule(ctx context.Context, s queue.Schedule) (bool, error) {
	now := time.Now()
	spec, err := schedule.Check(s, now)
	if err != nil {
		return false, fmt.Errorf("delayq: schedule %.40q: %w", s.Name, err)
	}
	if err := q.validate(&Message{ID: s.Name, Topic: s.Topic, Payload: s.Payload}); err != nil {
		return false, fmt.Errorf("delayq: schedule %q: %w", s.Name, err)
	}
	s = schedule.Normalize(s)
	payload := append([]byte{}, s.Payload...) // the schedule's own: its fires share it
	created := false
	end, err := q.scheduleOp(ctx, s.Name, func(old *sched, now int64, cancel *format.Record) ([]format.Record, error) {
		created = old == nil
		set := format.Record{Kind: format.KindSchedule, Topic: s.Topic, Payload: payload, ScheduleFields: format.ScheduleFields{
			Schedule: s.Name, Spec: s.Spec, Zone: s.TimeZone, Misfire: misfireCode(s.Misfire), Overlap: overlapCode(s.Overlap),
			SetAt: now, Start: spec.Start().UnixNano(), Unfired: cancel != nil}}
		var recs []format.Record
		if cancel != nil {
			recs = append(recs, *cancel)
		}
		if old != nil && old.paused {
			return append(recs, set), nil // it keeps its pause, and puts nothing
		}
		p := spec.Plan(spec.Next(time.Unix(0, q.sched.firstFree(old, now, cancel))), time.Unix(0, now), s.Misfire, s.Overlap)
		set.Next, set.Act = nanos(p.Next), actOf(p, s.Overlap)
		puts, fired := q.firePutsLocked(spec, s.Name, s.Topic, payload, p.Fire, now, cancel)
		set.Fired = fired
		return append(append(recs, puts...), set), nil
	})
	if err != nil {
		return false, err
	}
	return created, q.waitDurable(end)
}

// nanos returns t in Unix nanoseconds, or 0 for the zero time.
func nanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

// firstFree returns the time after which a schedule set or resumed at now may fire: now, or its
// latest fire that stays (one put ahead that could not be removed, having been made due), so that
// no nominal time fires twice.
func (x *schedules) firstFree(s *sched, now int64, cancel *format.Record) int64 {
	if s == nil {
		return now
	}
	f := s.fired
	if cancel != nil {
		f = s.prevFired
	}
	return max(now, f)
}

// firePutsLocked returns the Puts of the fires of the schedule name at the nominal times ts, each
// due then (at once if it passed), and the nominal times of those it puts: a fire whose ID a
// waiting message has already (but the one cancel removes) is not put again.
func (q *Queue) firePutsLocked(spec *schedule.Spec, name, topic string, payload []byte, ts []time.Time, now int64, cancel *format.Record) ([]format.Record, []int64) {
	var puts []format.Record
	var fired []int64
	for _, t := range ts {
		id := spec.FireID(name, t)
		if (cancel == nil || cancel.ID != id) && q.waitingLocked(id) {
			continue
		}
		puts = append(puts, format.Record{Kind: format.KindPut, ID: id, Topic: topic, Payload: payload, DeliverAt: max(t.UnixNano(), now)})
		fired = append(fired, t.UnixNano())
	}
	return puts, fired
}

// scheduleOp runs one change of the schedule name: under mu, with the schedule (nil when there is
// none) and the Cancel of the fire it put ahead that a change removes (nil when there is none,
// or it is due already), build returns the records to append, as one group (none: nothing to
// do). The record of the fire on disk is read without mu first, as findWaiting does. It returns
// the end of what must be durable.
func (q *Queue) scheduleOp(ctx context.Context, name string, build func(s *sched, now int64, cancel *format.Record) ([]format.Record, error)) (wal.Pos, error) {
	if err := q.waitRoom(ctx); err != nil {
		return 0, err
	}
	r := newRecordReader(q.log)
	var read map[string]readRecord
	for try := 0; ; try++ {
		q.mu.Lock()
		if err := q.usableLocked(); err != nil {
			q.mu.Unlock()
			return 0, err
		}
		now := time.Now().UnixNano()
		s := q.sched.get(name)
		cancel, need := q.unfireLocked(s, now, read)
		if need != nil && try < listTries {
			q.mu.Unlock()
			read = q.readRecords(r, need)
			continue
		}
		if need != nil {
			read = q.readRecords(r, need) // under mu at last: from memory or the page cache
			cancel, _ = q.unfireLocked(s, now, read)
		}
		recs, err := build(s, now, cancel)
		if err != nil || len(recs) == 0 {
			end := q.log.End() // as it is already, durably once the log is here
			q.mu.Unlock()
			return end, err
		}
		end, err := q.commitAllLocked(recs)
		if err == nil {
			q.armSchedulesLocked()
		}
		q.mu.Unlock()
		return end, err
	}
}

// unfireLocked returns the Cancel of the fire s put ahead, if it is there and not due yet, or the
// record to read first to know its topic (need). The Cancel of a fire in the disk wheel is
// threaded, with ListSlot the slot the fire is due in (see commitAllLocked).
func (q *Queue) unfireLocked(s *sched, now int64, read map[string]readRecord) (cancel *format.Record, need map[string]idLoc) {
	if s == nil || s.paused || s.fired <= now {
		return nil, nil
	}
	spec, err := q.sched.specOf(s)
	if err != nil {
		return nil, nil
	}
	id := spec.FireID(s.name, time.Unix(0, s.fired))
	if e := q.mem.lookup(id); e != nil {
		if e.st != waiting || e.attempt > 0 || e.dead() || e.failure != 0 || e.deliverAt <= now {
			return nil, nil // it has been due: it stays
		}
		return &format.Record{Kind: format.KindCancel, ID: id}, nil
	}
	loc, ok := q.disk.ids[id]
	if !ok || loc.slot <= q.disk.loaded {
		return nil, nil
	}
	topic := s.topic.Value()
	if loc.pos != 0 {
		rr, ok := read[id]
		if !ok || rr.loc != loc {
			return nil, map[string]idLoc{id: loc}
		}
		if rr.rec == nil {
			return nil, nil // lost to damage
		}
		topic = rr.rec.Topic
	}
	return &format.Record{Kind: format.KindCancel, ID: id, Topic: topic, Threaded: true, ListSlot: loc.slot}, nil
}

// Schedule returns the schedule name with its state; see [queue.Scheduler.Schedule].
func (q *Queue) Schedule(ctx context.Context, name string) (queue.ScheduleInfo, error) {
	if err := ctx.Err(); err != nil {
		return queue.ScheduleInfo{}, fmt.Errorf("delayq: %w", err)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if err := q.usableLocked(); err != nil {
		return queue.ScheduleInfo{}, err
	}
	s := q.sched.get(name)
	if s == nil {
		return queue.ScheduleInfo{}, fmt.Errorf("delayq: schedule %.40q: %w", name, ErrNotFound)
	}
	return q.sched.info(s, time.Now().UnixNano()), nil
}

// Schedules returns a page of schedules in the order of their names; see
// [queue.Scheduler.Schedules]. It costs time in the page's size, whatever the number of
// schedules.
func (q *Queue) Schedules(ctx context.Context, cursor string, limit int) ([]queue.ScheduleInfo, string, error) {
	if limit < 1 || limit > queue.MaxPage {
		return nil, "", fmt.Errorf("delayq: schedules: limit %d, want 1 to %d: %w", limit, queue.MaxPage, ErrInvalid)
	}
	if err := ctx.Err(); err != nil {
		return nil, "", fmt.Errorf("delayq: %w", err)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if err := q.usableLocked(); err != nil {
		return nil, "", err
	}
	now := time.Now().UnixNano()
	var page []queue.ScheduleInfo
	more := false
	q.sched.byName.AscendGreaterOrEqual(&sched{name: cursor}, func(s *sched) bool {
		if s.name == cursor && cursor != "" {
			return true
		}
		if len(page) == limit {
			more = true
			return false
		}
		page = append(page, q.sched.info(s, now))
		return true
	})
	next := ""
	if more {
		next = page[len(page)-1].Name
	}
	return page, next, nil
}

// DeleteSchedule removes the schedule name and its fire put ahead that is not due yet, and
// reports whether there was one; see [queue.Scheduler.DeleteSchedule].
func (q *Queue) DeleteSchedule(ctx context.Context, name string) (bool, error) {
	found := false
	end, err := q.scheduleOp(ctx, name, func(s *sched, _ int64, cancel *format.Record) ([]format.Record, error) {
		if s == nil {
			return nil, nil
		}
		found = true
		return unschedule(name, cancel, true), nil
	})
	if err != nil {
		return false, err
	}
	return found, q.waitDurable(end)
}

// unschedule returns the records of a pause or a delete.
func unschedule(name string, cancel *format.Record, deleted bool) []format.Record {
	rec := format.Record{Kind: format.KindUnschedule, ScheduleFields: format.ScheduleFields{Schedule: name, Unfired: cancel != nil, Deleted: deleted}}
	if cancel != nil {
		return []format.Record{*cancel, rec}
	}
	return []format.Record{rec}
}

// PauseSchedule stops the schedule's fires, removing its fire put ahead that is not due yet; see
// [queue.Scheduler.PauseSchedule]. The pause is durable, and lasts across restarts.
func (q *Queue) PauseSchedule(ctx context.Context, name string) error {
	end, err := q.scheduleOp(ctx, name, func(s *sched, _ int64, cancel *format.Record) ([]format.Record, error) {
		switch {
		case s == nil:
			return nil, fmt.Errorf("delayq: pause schedule %.40q: %w", name, ErrNotFound)
		case s.paused:
			return nil, nil
		}
		return unschedule(name, cancel, false), nil
	})
	if err != nil {
		return err
	}
	return q.waitDurable(end)
}

// ResumeSchedule ends a pause: the schedule fires again from the first nominal time after the
// call; see [queue.Scheduler.ResumeSchedule].
func (q *Queue) ResumeSchedule(ctx context.Context, name string) error {
	end, err := q.scheduleOp(ctx, name, func(s *sched, now int64, _ *format.Record) ([]format.Record, error) {
		switch {
		case s == nil:
			return nil, fmt.Errorf("delayq: resume schedule %.40q: %w", name, ErrNotFound)
		case !s.paused:
			return nil, nil
		}
		spec, err := q.sched.specOf(s)
		if err != nil {
			return nil, fmt.Errorf("delayq: resume schedule %.40q: %w", name, err)
		}
		p := spec.Plan(spec.Next(time.Unix(0, q.sched.firstFree(s, now, nil))), time.Unix(0, now), misfireOf(s.misfire), overlapOf(s.overlap))
		puts, fired := q.firePutsLocked(spec, name, s.topic.Value(), s.payload, p.Fire, now, nil)
		return append(puts, format.Record{Kind: format.KindFire, ScheduleFields: format.ScheduleFields{Schedule: name,
			Next: nanos(p.Next), Act: actOf(p, overlapOf(s.overlap)), Fired: fired, Resumed: true}}), nil
	})
	if err != nil {
		return err
	}
	return q.waitDurable(end)
}

// TriggerSchedule fires the schedule name once now, outside its spec; see
// [queue.Scheduler.TriggerSchedule]. The fire's nominal time is the queue's clock at the call, to
// the millisecond; two triggers in one millisecond put one fire.
func (q *Queue) TriggerSchedule(ctx context.Context, name string) (string, error) {
	var id string
	end, err := q.scheduleOp(ctx, name, func(s *sched, now int64, _ *format.Record) ([]format.Record, error) {
		if s == nil {
			return nil, fmt.Errorf("delayq: trigger schedule %.40q: %w", name, ErrNotFound)
		}
		at := time.Unix(0, now).Truncate(time.Millisecond).UTC()
		id = queue.FireID(name, at, true)
		if q.waitingLocked(id) {
			return nil, nil
		}
		return []format.Record{
			{Kind: format.KindPut, ID: id, Topic: s.topic.Value(), Payload: s.payload, DeliverAt: now},
			{Kind: format.KindFire, ScheduleFields: format.ScheduleFields{Schedule: name, Fired: []int64{at.UnixNano()}, Trigger: true}},
		}, nil
	})
	if err != nil {
		return "", err
	}
	return id, q.waitDurable(end)
}

// ScheduleStats counts the schedules and their fires; see [queue.Scheduler.ScheduleStats]. It
// reads counters kept as schedules change.
func (q *Queue) ScheduleStats(ctx context.Context) (queue.ScheduleStats, error) {
	if err := ctx.Err(); err != nil {
		return queue.ScheduleStats{}, fmt.Errorf("delayq: %w", err)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if err := q.usableLocked(); err != nil {
		return queue.ScheduleStats{}, err
	}
	x := &q.sched
	return queue.ScheduleStats{Schedules: int64(x.byName.Len()), Paused: int64(x.paused), Fires: x.fires, Misfires: x.misfires}, nil
}
