package delayq

import (
	"time"

	"github.com/tockwheel/tock/delayq/internal/format"
	"github.com/tockwheel/tock/queue"
	"github.com/tockwheel/tock/schedule"
)

// Firing. One timer on the wheel waits for the earliest act time of the running schedules (see
// schedule.go); when it fires it wakes runSchedules, which plans every schedule whose act time has
// come, a chunk of them under each hold of mu, and sets the timer again. Planning a schedule is
// schedule.Plan at the moment of planning: the fires it puts (an OverlapAllow schedule's next one
// ahead of its time, so that it falls due like any message; an OverlapSkip schedule's when its
// nominal time comes, unless its previous fire still waits; after a restart, the missed times the
// misfire policy keeps), and the Fire record that moves the schedule on, in one atomic group.
// Nothing waits for the group to be durable: a crash before it is loses the fires with the
// decision, and they are planned again after the restart.

// schedChunk bounds the schedules planned under one hold of mu, so that a million schedules acting
// at midnight do not stop the queue while they are planned.
const schedChunk = 256

// unplannable is how long a schedule that cannot be planned in this process (its time zone is not
// in the process's database) waits before it is tried again.
const unplannable = time.Minute

// runSchedules plans the schedules whose act time has come, each time the timer wakes it, until
// Close.
func (q *Queue) runSchedules() {
	defer q.bg.Done()
	for {
		select {
		case <-q.sched.kick:
		case <-q.closed:
			return
		}
		for more := true; more; {
			if err := q.log.WaitRoom(); err != nil {
				return // the log is closing, or failed: the queue knows
			}
			q.mu.Lock()
			if q.usableLocked() != nil {
				q.mu.Unlock()
				return
			}
			var err error
			if more, err = q.fireDueLocked(time.Now().UnixNano(), schedChunk); err != nil {
				q.mu.Unlock()
				return // the failure stopped the queue (commitGroupLocked)
			}
			if !more {
				q.sched.timerAt = 0 // it fired
				q.armSchedulesLocked()
			}
			q.mu.Unlock()
		}
	}
}

// armSchedulesLocked sets the timer at the earliest act time, if it is not set there already.
func (q *Queue) armSchedulesLocked() {
	x := &q.sched
	at := x.earliest()
	if !x.live || at == x.timerAt {
		return
	}
	x.timer.Stop()
	x.timerAt = at
	if at == 0 {
		return
	}
	t, err := q.wheel.AtFunc(time.Unix(0, at), func() {
		select {
		case x.kick <- struct{}{}:
		default: // a wake-up is pending already
		}
	})
	if err != nil {
		x.timerAt = 0
		q.wheelFailed(err)
		return
	}
	x.timer = t
}

// fireDueLocked plans up to n schedules whose act time has come by now, and reports whether more
// have.
func (q *Queue) fireDueLocked(now int64, n int) (more bool, err error) {
	x := &q.sched
	for range n {
		if len(x.due) == 0 || x.due[0].act > now {
			return false, nil
		}
		if err := q.planLocked(x.due[0], now); err != nil {
			return false, err
		}
	}
	return len(x.due) > 0 && x.due[0].act <= now, nil
}

// planLocked plans s at now: it appends, as one group, the Puts of the fires its plan puts and
// the Fire record that moves it on.
func (q *Queue) planLocked(s *sched, now int64) error {
	x := &q.sched
	spec, err := x.specOf(s)
	if err != nil {
		// Set by a process with another time zone database: try again later, in memory only.
		q.cfg.logger.Warn("delayq: a schedule cannot be planned here", "schedule", s.name, "err", err)
		x.setAct(s, now+int64(unplannable))
		return nil
	}
	misfire := misfireOf(s.misfire)
	if s.next >= x.openedAt {
		// Its times came while the queue was open: planned late (the machine too busy to plan
		// them within queue.MisfireGrace), not missed. The misfire policy is for times that came
		// while nothing could fire them; these fire late, each (up to queue.MaxCatchUp), under
		// either overlap policy: an OverlapSkip schedule's only differ in being planned at their
		// time, not ahead, and in being passed over while its previous fire waits, below.
		misfire = queue.MisfireAll
	}
	p := spec.Plan(timeOf(s.next), time.Unix(0, now), misfire, overlapOf(s.overlap))
	fire := format.Record{Kind: format.KindFire, ScheduleFields: format.ScheduleFields{Schedule: s.name,
		Next: nanos(p.Next), Act: actOf(p, overlapOf(s.overlap)), Missed: uint64(p.Missed)}}
	times := p.Fire
	if s.overlap == format.OverlapSkip && len(times) > 0 && q.stillWaitsLocked(s, spec) {
		fire.Missed += uint64(len(times)) // its previous fire waits: these are passed over
		times = nil
	}
	puts, fired := q.firePutsLocked(spec, s.name, s.topic.Value(), s.payload, times, now, nil)
	fire.Fired = fired
	// Plan's act time is after now, or none: the schedule leaves the heap's head.
	_, err = q.commitAllLocked(append(puts, fire))
	return err
}

// stillWaitsLocked reports whether the latest fire of s (by its spec, or triggered) still waits:
// scheduled, due or leased; not a dead letter, which has failed for good.
func (q *Queue) stillWaitsLocked(s *sched, spec *schedule.Spec) bool {
	var ids []string
	if s.fired != 0 {
		ids = append(ids, spec.FireID(s.name, time.Unix(0, s.fired)))
	}
	if s.triggered != 0 {
		ids = append(ids, queue.FireID(s.name, time.Unix(0, s.triggered), true))
	}
	for _, id := range ids {
		if e := q.mem.lookup(id); e != nil {
			if !e.dead() {
				return true
			}
			continue
		}
		if loc, ok := q.disk.ids[id]; ok && loc.slot > q.disk.loaded {
			return true
		}
	}
	return false
}

// actOf returns when the engine plans a schedule again after p (Unix nanoseconds, 0 for never):
// p.Act, and a bucket later under OverlapAllow. There p.Act is when the fire put ahead falls due,
// and the timer of that fire's bucket fires at the same tick of the wheel; planning one bucket
// later lets the bucket make its messages ready first. Planned at the same tick, a thousand
// schedules acting at once held up their own fires: the engine's p99 lateness was 16 ms, beside
// 7.8 ms for the same messages put ahead by hand; planned a bucket later, 2.5 ms beside 6.9 ms
// (BenchmarkDelayqSchedules, -schedules.delayq 1000).
func actOf(p schedule.Plan, overlap queue.Overlap) int64 {
	if p.Act.IsZero() || overlap == queue.OverlapSkip {
		return nanos(p.Act)
	}
	return nanos(p.Act) + bucketNs
}

// timeOf returns the time of Unix nanoseconds ns, or the zero time for 0.
func timeOf(ns int64) time.Time {
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns).UTC()
}

// startSchedules starts firing, once recovery is done.
func (q *Queue) startSchedules() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.sched.live = true
	q.sched.openedAt = time.Now().UnixNano()
	q.armSchedulesLocked()
}

// stopSchedules stops the timer (Close).
func (q *Queue) stopSchedulesLocked() {
	q.sched.live = false
	q.sched.timer.Stop()
	q.sched.timerAt = 0
}
