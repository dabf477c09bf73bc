package delayq

import (
	"container/heap"
	"time"
	"unique"

	"github.com/google/btree"
	"github.com/tockwheel/tock"
	"github.com/tockwheel/tock/delayq/internal/format"
	"github.com/tockwheel/tock/queue"
	"github.com/tockwheel/tock/schedule"
)

// Schedules are state like messages: their changes are records (format's Schedule, Fire and
// Unschedule) applied by apply.go's one function, live and in replay, and the checkpoint holds
// them whole. What makes a fire exactly once is the group: each Put of a fire is in one atomic
// group of records with the schedule's record that moves its first undecided nominal time (next)
// past it, so after a crash anywhere the log holds both or neither, and replay rebuilds the
// schedule as it stood after its last whole group.
//
// Each running schedule waits for its act time (when it plans again: see schedule.Plan) in a heap
// ordered by act; one timer on the wheel is set for the earliest, and a goroutine plans the
// schedules whose time has come (schedfire.go). So a schedule costs no timer of its own, and a
// million daily schedules cost a heap slot each.
//
// Memory: a schedule is its struct (about 160 bytes), its name and payload, a slot in the tree of
// names and in the heap, and, while its fire put ahead waits on disk, that fire's chosen ID (see
// diskWheel.ids). Its topic, spec and zone are interned (unique.Handle), so schedules sharing them
// share one copy, and the parsed form of a cron spec is cached by spec and zone.

// A sched is one schedule. Its fields are guarded by Queue.mu. Times are Unix nanoseconds, 0 for
// none.
type sched struct {
	name    string
	topic   unique.Handle[string]
	spec    unique.Handle[specText]
	payload []byte // never changed in place: fires' messages share it

	start int64 // the anchor of an "@every" spec
	next  int64 // the first nominal time not decided yet
	act   int64 // when to plan again; 0: never (no time left, or paused)

	created, updated int64
	// fired and prevFired are the nominal times of the latest two fires by the spec: fired is
	// the fire put ahead while it is in the future. triggered is the latest triggered fire's.
	fired, prevFired, triggered int64
	fires, misfires             uint64

	heap    int32  // index in schedules.due, -1 when not there
	jepoch  uint32 // the checkpoint journal's epoch it was last journaled in (see schedules.changed)
	misfire uint8  // format.MisfireOnce...
	overlap uint8  // format.OverlapAllow...
	paused  bool
}

// A specText is a spec as it was given, with its zone.
type specText struct{ spec, zone string }

// schedules is the queue's schedules. Its fields are guarded by Queue.mu.
type schedules struct {
	byName *btree.BTreeG[*sched]
	due    schedHeap // the running schedules that have an act time
	paused int
	// fires and misfires count those of every schedule since the queue was created.
	fires, misfires uint64
	// cron caches the parsed cron specs (an "@every" spec depends on its schedule's start).
	cron map[unique.Handle[specText]]*schedule.Spec

	// changed are the names of the schedules set, changed or deleted since the last checkpoint
	// (a name may repeat); epoch numbers the journals, as deliveryIndex.epoch does.
	changed []string
	epoch   uint32

	// The timer of the earliest act time, and the firing goroutine's wake-up.
	live     bool  // the queue is open: the timer is kept (not during recovery)
	openedAt int64 // when it opened (recovery done): nominal times after it came while it ran
	timer    tock.Timer
	timerAt  int64
	kick     chan struct{}
}

func newSchedules() schedules {
	return schedules{
		byName: btree.NewG(32, func(a, b *sched) bool { return a.name < b.name }),
		cron:   make(map[unique.Handle[specText]]*schedule.Spec),
		epoch:  1,
		kick:   make(chan struct{}, 1),
	}
}

// get returns the schedule name, or nil.
func (x *schedules) get(name string) *sched {
	s, _ := x.byName.Get(&sched{name: name})
	return s
}

// journal records that s (or the schedule of its name, deleted) changed.
func (x *schedules) journal(s *sched) {
	if s.jepoch != x.epoch {
		s.jepoch = x.epoch
		x.changed = append(x.changed, s.name)
	}
}

// takeChanged returns the names journaled and starts the next journal.
func (x *schedules) takeChanged() []string {
	c := x.changed
	x.changed = nil
	x.epoch++
	return c
}

// setAct puts s in the heap at its act time, or takes it out.
func (x *schedules) setAct(s *sched, act int64) {
	s.act = act
	switch {
	case act == 0 || s.paused:
		if s.heap >= 0 {
			heap.Remove(&x.due, int(s.heap))
		}
	case s.heap >= 0:
		heap.Fix(&x.due, int(s.heap))
	default:
		heap.Push(&x.due, s)
	}
}

// earliest returns the earliest act time, or 0.
func (x *schedules) earliest() int64 {
	if len(x.due) == 0 {
		return 0
	}
	return x.due[0].act
}

// addFired counts the fires put at the nominal times ts.
func (x *schedules) addFired(s *sched, ts []int64) {
	for _, t := range ts {
		s.prevFired, s.fired = s.fired, t
	}
	s.fires += uint64(len(ts))
	x.fires += uint64(len(ts))
}

// unfire counts the removal of s's fire put ahead.
func (x *schedules) unfire(s *sched) {
	s.fired, s.prevFired = s.prevFired, 0
	if s.fires > 0 {
		s.fires--
	}
	if x.fires > 0 {
		x.fires--
	}
}

// apply applies a schedule's record: Schedule, Fire or Unschedule. A Fire or Unschedule record of
// a schedule that is not there (its Schedule record was lost to damage) changes nothing.
func (x *schedules) apply(rec *format.Record) {
	s := x.get(rec.Schedule)
	switch {
	case rec.Kind == format.KindSchedule:
		x.set(s, rec)
	case s == nil:
	case rec.Kind == format.KindFire:
		x.fire(s, rec)
	case rec.Kind == format.KindUnschedule:
		x.unschedule(s, rec)
	}
}

// set applies a Schedule record to s, nil when there is none: the schedule set whole, and the
// fires of its group.
func (x *schedules) set(s *sched, rec *format.Record) {
	if s == nil {
		s = &sched{name: rec.Schedule, created: rec.SetAt, heap: -1}
		x.byName.ReplaceOrInsert(s)
	} else if rec.Unfired {
		x.unfire(s)
	}
	s.topic = unique.Make(rec.Topic)
	s.spec = unique.Make(specText{rec.Spec, rec.Zone})
	s.payload = rec.Payload
	s.start, s.updated, s.misfire, s.overlap = rec.Start, rec.SetAt, rec.Misfire, rec.Overlap
	s.next = rec.Next
	x.addFired(s, rec.Fired)
	x.setAct(s, rec.Act)
	x.journal(s)
}

// fire applies a Fire record to s: the fires of its group, the nominal times passed over, and
// where the schedule stands.
func (x *schedules) fire(s *sched, rec *format.Record) {
	x.journal(s)
	if rec.Trigger {
		s.triggered = rec.Fired[0]
		s.fires++
		x.fires++
		return
	}
	if rec.Resumed && s.paused {
		s.paused = false
		x.paused--
	}
	s.next = rec.Next
	s.misfires += rec.Missed
	x.misfires += rec.Missed
	x.addFired(s, rec.Fired)
	x.setAct(s, rec.Act)
}

// unschedule applies an Unschedule record to s: a pause or a delete.
func (x *schedules) unschedule(s *sched, rec *format.Record) {
	x.journal(s)
	if rec.Unfired {
		x.unfire(s)
	}
	switch {
	case rec.Deleted:
		x.setAct(s, 0)
		if s.paused {
			x.paused--
		}
		x.byName.Delete(s)
	case !s.paused:
		s.paused = true
		x.paused++
		x.setAct(s, 0)
	}
}

// specOf returns s's spec, parsed. An error means the spec cannot be planned in this process (its
// zone is not in this process's time zone database).
func (x *schedules) specOf(s *sched) (*schedule.Spec, error) {
	t := s.spec.Value()
	if spec, ok := x.cron[s.spec]; ok {
		return spec, nil
	}
	if isEvery(t.spec) {
		// The zone does not matter to "@every", and loading it each time would cost.
		return schedule.Parse(t.spec, "", time.Unix(0, s.start))
	}
	spec, err := schedule.Parse(t.spec, t.zone, time.Time{})
	if err != nil {
		return nil, err
	}
	if len(x.cron) >= maxCronCache {
		clear(x.cron)
	}
	x.cron[s.spec] = spec
	return spec, nil
}

// maxCronCache bounds the parsed cron specs kept.
const maxCronCache = 1 << 12

func isEvery(spec string) bool { return len(spec) > 6 && spec[:6] == "@every" }

// info returns what the API says of s at now.
func (x *schedules) info(s *sched, now int64) queue.ScheduleInfo {
	t := s.spec.Value()
	info := queue.ScheduleInfo{
		Schedule: queue.Schedule{Name: s.name, Topic: s.topic.Value(), Payload: s.payload, Spec: t.spec, TimeZone: t.zone,
			Misfire: misfireOf(s.misfire), Overlap: overlapOf(s.overlap)},
		Paused: s.paused, Fires: s.fires, Misfires: s.misfires,
		Created: time.Unix(0, s.created), Updated: time.Unix(0, s.updated),
	}
	spec, err := x.specOf(s)
	var last int64
	for _, f := range []int64{s.fired, s.prevFired, s.triggered} {
		if f != 0 && f <= now && f > last {
			last = f
			info.LastFire = time.Unix(0, f).UTC()
			ms := f == s.triggered || err == nil && spec.SubSecond()
			info.LastFireID = queue.FireID(s.name, info.LastFire, ms)
		}
	}
	if s.paused || err != nil {
		return info
	}
	from := time.Unix(0, now)
	if s.fired > now {
		info.Next = append(info.Next, time.Unix(0, s.fired).UTC())
		from = time.Unix(0, s.fired)
	}
	info.Next = append(info.Next, spec.Upcoming(from, queue.FireTimes-len(info.Next))...)
	return info
}

// The policies as the records hold them, and back.
func misfireCode(m queue.Misfire) uint8 {
	switch m {
	case queue.MisfireSkip:
		return format.MisfireSkip
	case queue.MisfireAll:
		return format.MisfireAll
	}
	return format.MisfireOnce
}

func misfireOf(c uint8) queue.Misfire {
	switch c {
	case format.MisfireSkip:
		return queue.MisfireSkip
	case format.MisfireAll:
		return queue.MisfireAll
	}
	return queue.MisfireOnce
}

func overlapCode(o queue.Overlap) uint8 {
	if o == queue.OverlapSkip {
		return format.OverlapSkip
	}
	return format.OverlapAllow
}

func overlapOf(c uint8) queue.Overlap {
	if c == format.OverlapSkip {
		return queue.OverlapSkip
	}
	return queue.OverlapAllow
}

// toFormat returns s as the checkpoint holds it.
func (s *sched) toFormat() format.Schedule {
	t := s.spec.Value()
	return format.Schedule{Name: s.name, Topic: s.topic.Value(), Spec: t.spec, Zone: t.zone, Payload: s.payload,
		Misfire: s.misfire, Overlap: s.overlap, Paused: s.paused, Start: s.start, Next: s.next, Act: s.act,
		Created: s.created, Updated: s.updated, Fired: s.fired, PrevFired: s.prevFired, Triggered: s.triggered,
		Fires: s.fires, Misfires: s.misfires}
}

// restore puts the schedules a checkpoint holds in place.
func (x *schedules) restore(all map[string]format.Schedule, fires, misfires uint64) {
	x.fires, x.misfires = fires, misfires
	for _, f := range all {
		s := &sched{name: f.Name, topic: unique.Make(f.Topic), spec: unique.Make(specText{f.Spec, f.Zone}), payload: f.Payload,
			start: f.Start, next: f.Next, created: f.Created, updated: f.Updated, fired: f.Fired, prevFired: f.PrevFired,
			triggered: f.Triggered, fires: f.Fires, misfires: f.Misfires, heap: -1, misfire: f.Misfire, overlap: f.Overlap,
			paused: f.Paused}
		x.byName.ReplaceOrInsert(s)
		if s.paused {
			x.paused++
		}
		x.setAct(s, f.Act)
	}
}

// schedHeap orders schedules by act time (container/heap).
type schedHeap []*sched

func (h schedHeap) Len() int           { return len(h) }
func (h schedHeap) Less(i, j int) bool { return h[i].act < h[j].act }
func (h schedHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].heap, h[j].heap = int32(i), int32(j)
}
func (h *schedHeap) Push(x any) {
	s := x.(*sched)
	s.heap = int32(len(*h))
	*h = append(*h, s)
}
func (h *schedHeap) Pop() any {
	old := *h
	s := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	s.heap = -1
	return s
}
