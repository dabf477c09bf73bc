package format

import "fmt"

// # Schedule records
//
// A schedule's changes are records of three kinds, each written in one atomic group (see wal's
// frame.go) with the records it goes with: the Cancel of the schedule's fire put ahead, when the
// change removes it, first; the Puts of the fires it puts; and the schedule's record last. So the
// decision that a nominal time has fired is in the log exactly when its fire's Put is. The names
// are schedules' names; a time is Unix nanoseconds, 0 for none.
//
// Schedule (kind 10): the schedule is set whole: created, or replaced (keeping its pause, its
// counts and its fires).
//
//	0   1  flags      bit 0: unfired: the group removed the fire the schedule had put ahead
//	1   8  setAt      when it was set: its creation time when new
//	9   8  start      the anchor of an "@every" spec
//	17  8  next       the first nominal time not decided yet
//	25  8  act        when the engine plans the schedule again
//	33  1  misfire    MisfireOnce, MisfireSkip or MisfireAll
//	34  1  overlap    OverlapAllow or OverlapSkip
//	35  2  n          fires put in the group (none for a paused schedule)
//	37  8n fired      their nominal times
//	..     name, topic, spec, zone   names
//	..     payload    the rest of the body
//
// Fire (kind 11): the schedule put the fires of its group, and passed over missed nominal times.
//
//	0   1  flags      bit 0: trigger: one fire outside the spec, next and act unchanged (and
//	                  written as 0); bit 1: resumed: the schedule's pause ends
//	1   8  next, 9 8 act   as in Schedule
//	17  8  missed     nominal times passed over by the misfire or the overlap policy
//	25  2  n, 27 8n fired  as in Schedule
//	..     name
//
// Unschedule (kind 12): the schedule is paused, or deleted.
//
//	0   1  flags      bit 0: unfired, as in Schedule; bit 1: deleted (else paused)
//	1      name

// The policies of a schedule as its records hold them. Frozen.
const (
	MisfireOnce  uint8 = 1
	MisfireSkip  uint8 = 2
	MisfireAll   uint8 = 3
	OverlapAllow uint8 = 1
	OverlapSkip  uint8 = 2
)

// MaxFired bounds the fires one record counts.
const MaxFired = 1<<16 - 1

// Flag bits of the schedule records. Frozen.
const (
	flagUnfired  = 1 << 0 // Schedule, Unschedule
	flagTrigger  = 1 << 0 // Fire
	flagResumed  = 1 << 1 // Fire
	flagDeleted  = 1 << 1 // Unschedule
	misfireLimit = MisfireAll
	overlapLimit = OverlapSkip
)

// ScheduleFields are the fields of the schedule records (Record embeds them); only those of the
// record's kind are meaningful. A Schedule record holds its topic and payload in Record's.
type ScheduleFields struct {
	Schedule   string // Schedule, Fire, Unschedule: the schedule's name
	Spec, Zone string // Schedule
	Misfire    uint8  // Schedule
	Overlap    uint8  // Schedule
	SetAt      int64  // Schedule
	Start      int64  // Schedule
	Next, Act  int64  // Schedule, Fire
	Missed     uint64 // Fire
	// Fired are the nominal times of the fires whose Puts are in the record's group, in order
	// (Schedule, Fire).
	Fired   []int64
	Unfired bool // Schedule, Unschedule
	Trigger bool // Fire
	Resumed bool // Fire
	Deleted bool // Unschedule
}

func (r *Record) encodeSchedule(e *encoder) error {
	s := &r.ScheduleFields
	if len(s.Schedule) > MaxName || len(s.Spec) > MaxName || len(s.Zone) > MaxName {
		return fmt.Errorf("%w: schedule name, spec or zone longer than %d bytes", errMalformed, MaxName)
	}
	if len(s.Fired) > MaxFired {
		return fmt.Errorf("%w: %d fires in one record", errMalformed, len(s.Fired))
	}
	fired := func() {
		e.u16(uint16(len(s.Fired)))
		for _, t := range s.Fired {
			e.i64(t)
		}
	}
	switch r.Kind {
	case KindSchedule:
		if s.Misfire == 0 || s.Misfire > misfireLimit || s.Overlap == 0 || s.Overlap > overlapLimit {
			return fmt.Errorf("%w: schedule with misfire %d, overlap %d", errMalformed, s.Misfire, s.Overlap)
		}
		var flags byte
		if s.Unfired {
			flags |= flagUnfired
		}
		e.u8(flags)
		e.i64(s.SetAt)
		e.i64(s.Start)
		e.i64(s.Next)
		e.i64(s.Act)
		e.u8(s.Misfire)
		e.u8(s.Overlap)
		fired()
		e.name(s.Schedule)
		e.name(r.Topic)
		e.name(s.Spec)
		e.name(s.Zone)
		e.rest(r.Payload)
	case KindFire:
		var flags byte
		if s.Trigger {
			if s.Resumed || len(s.Fired) != 1 || s.Next != 0 || s.Act != 0 || s.Missed != 0 {
				return fmt.Errorf("%w: a trigger of %d fires, resumed %v, next %d, act %d, missed %d", errMalformed,
					len(s.Fired), s.Resumed, s.Next, s.Act, s.Missed)
			}
			flags |= flagTrigger
		}
		if s.Resumed {
			flags |= flagResumed
		}
		e.u8(flags)
		e.i64(s.Next)
		e.i64(s.Act)
		e.u64(s.Missed)
		fired()
		e.name(s.Schedule)
	case KindUnschedule:
		var flags byte
		if s.Unfired {
			flags |= flagUnfired
		}
		if s.Deleted {
			flags |= flagDeleted
		}
		e.u8(flags)
		e.name(s.Schedule)
	}
	return nil
}

func (r *Record) decodeSchedule(d *decoder) error {
	s := &r.ScheduleFields
	n := 0 // fires
	fired := func() {
		n = int(d.u16())
		if n*8 > d.left() {
			d.bad = true
			return
		}
		if !d.keep || n == 0 {
			d.take(n * 8) // checking without allocating (Verify)
			return
		}
		s.Fired = make([]int64, n)
		for i := range s.Fired {
			s.Fired[i] = d.i64()
		}
	}
	switch r.Kind {
	case KindSchedule:
		flags := d.u8()
		if flags&^flagUnfired != 0 {
			return fmt.Errorf("unknown flags %#x", flags)
		}
		s.Unfired = flags&flagUnfired != 0
		s.SetAt, s.Start, s.Next, s.Act = d.i64(), d.i64(), d.i64(), d.i64()
		s.Misfire, s.Overlap = d.u8(), d.u8()
		if !d.bad && (s.Misfire == 0 || s.Misfire > misfireLimit || s.Overlap == 0 || s.Overlap > overlapLimit) {
			return fmt.Errorf("misfire %d, overlap %d", s.Misfire, s.Overlap)
		}
		fired()
		s.Schedule = d.name()
		r.Topic = d.name()
		s.Spec = d.name()
		s.Zone = d.name()
		r.Payload = d.rest()
	case KindFire:
		flags := d.u8()
		if flags&^(flagTrigger|flagResumed) != 0 {
			return fmt.Errorf("unknown flags %#x", flags)
		}
		s.Trigger, s.Resumed = flags&flagTrigger != 0, flags&flagResumed != 0
		s.Next, s.Act, s.Missed = d.i64(), d.i64(), d.u64()
		fired()
		s.Schedule = d.name()
		if s.Trigger && !d.bad && (s.Resumed || n != 1 || s.Next != 0 || s.Act != 0 || s.Missed != 0) {
			return fmt.Errorf("a trigger of %d fires, resumed %v, next %d, act %d, missed %d", n, s.Resumed, s.Next, s.Act, s.Missed)
		}
	case KindUnschedule:
		flags := d.u8()
		if flags&^(flagUnfired|flagDeleted) != 0 {
			return fmt.Errorf("unknown flags %#x", flags)
		}
		s.Unfired, s.Deleted = flags&flagUnfired != 0, flags&flagDeleted != 0
		s.Schedule = d.name()
	}
	return nil
}

// describeSchedule says what a schedule record holds.
func describeSchedule(r *Record) string {
	switch r.Kind {
	case KindSchedule:
		return fmt.Sprintf("schedule %q (%q in %q, on topic %q) set, with %d fires", r.Schedule, r.Spec, r.Zone, r.Topic, len(r.Fired))
	case KindFire:
		if r.Trigger {
			return fmt.Sprintf("a fire of schedule %q triggered", r.Schedule)
		}
		return fmt.Sprintf("%d fires of schedule %q, %d missed", len(r.Fired), r.Schedule, r.Missed)
	default:
		if r.Deleted {
			return fmt.Sprintf("schedule %q deleted", r.Schedule)
		}
		return fmt.Sprintf("schedule %q paused", r.Schedule)
	}
}

// # Schedules in the checkpoint
//
// The schedules section (tag 10) holds schedules each whole:
//
//	name name, topic uint32 (an index of the names section), spec name, zone name,
//	misfire, overlap uint8, flags uint8 (bit 0: paused), start, next, act, created, updated,
//	fired, prevFired, triggered int64, fires, misfires uint64, payload (uint32 length, bytes)
//
// The removed schedules section (tag 11) holds names, and the schedule counts section (tag 12)
// one item: the fires and misfires of every schedule since the queue was created, uint64 each.

// A Schedule is a schedule as the checkpoint holds it (version 8 on). Times are Unix nanoseconds,
// 0 for none.
type Schedule struct {
	Name, Topic, Spec, Zone string
	Payload                 []byte
	Misfire, Overlap        uint8
	Paused                  bool
	// Start anchors an "@every" spec; Next is the first nominal time not decided yet; Act is when
	// the engine plans again.
	Start, Next, Act int64
	Created, Updated int64
	// Fired and PrevFired are the nominal times of its two latest fires by the spec, Triggered
	// that of its latest triggered fire.
	Fired, PrevFired, Triggered int64
	Fires, Misfires             uint64
}

// schedFlagPaused is the bit of a schedule's flags in the checkpoint. Frozen.
const schedFlagPaused = 1 << 0

// checkSchedule returns an error for a schedule that has no encoding.
func checkSchedule(s *Schedule) error {
	switch {
	case len(s.Name) > MaxName || len(s.Topic) > MaxName || len(s.Spec) > MaxName || len(s.Zone) > MaxName:
		return fmt.Errorf("%w: schedule %.40q with a name over %d bytes in a checkpoint edit", errMalformed, s.Name, MaxName)
	case len(s.Payload) > MaxPayload:
		return fmt.Errorf("%w: schedule %.40q with a payload of %d bytes in a checkpoint edit", errMalformed, s.Name, len(s.Payload))
	case s.Misfire == 0 || s.Misfire > misfireLimit || s.Overlap == 0 || s.Overlap > overlapLimit:
		return fmt.Errorf("%w: schedule %.40q with misfire %d, overlap %d in a checkpoint edit", errMalformed, s.Name, s.Misfire, s.Overlap)
	}
	return nil
}

// appendSchedule writes s, whose topic's index is topic.
func (e *encoder) schedule(s *Schedule, topic uint32) {
	e.name(s.Name)
	e.u32(topic)
	e.name(s.Spec)
	e.name(s.Zone)
	e.u8(s.Misfire)
	e.u8(s.Overlap)
	var flags byte
	if s.Paused {
		flags |= schedFlagPaused
	}
	e.u8(flags)
	for _, v := range []int64{s.Start, s.Next, s.Act, s.Created, s.Updated, s.Fired, s.PrevFired, s.Triggered} {
		e.i64(v)
	}
	e.u64(s.Fires)
	e.u64(s.Misfires)
	e.u32(uint32(len(s.Payload)))
	e.rest(s.Payload)
}

// schedule reads what encoder.schedule writes.
func (d *editDecoder) schedule() (Schedule, error) {
	s := Schedule{Name: d.name(), Topic: d.topic(), Spec: d.name(), Zone: d.name(), Misfire: d.u8(), Overlap: d.u8()}
	flags := d.u8()
	if d.bad {
		return s, fmt.Errorf("checkpoint edit cut short")
	}
	if flags&^schedFlagPaused != 0 || s.Misfire == 0 || s.Misfire > misfireLimit || s.Overlap == 0 || s.Overlap > overlapLimit {
		return s, fmt.Errorf("schedule %.40q with flags %#x, misfire %d, overlap %d in checkpoint edit", s.Name, flags, s.Misfire, s.Overlap)
	}
	s.Paused = flags&schedFlagPaused != 0
	for _, v := range []*int64{&s.Start, &s.Next, &s.Act, &s.Created, &s.Updated, &s.Fired, &s.PrevFired, &s.Triggered} {
		*v = d.i64()
	}
	s.Fires, s.Misfires = d.u64(), d.u64()
	n := int(d.u32())
	if n > MaxPayload || n > d.left() {
		return s, fmt.Errorf("schedule %.40q with a payload of %d bytes in checkpoint edit", s.Name, n)
	}
	if p := d.take(n); n > 0 && p != nil {
		s.Payload = append([]byte(nil), p...)
	}
	return s, nil
}
