package queue

import (
	"context"
	"time"
)

// A Scheduler is an [Engine] that keeps schedules: recurring messages that the engine itself puts,
// one per fire time, whatever processes come and go. Both of tock's engines implement it; the
// server's /v1/schedules routes, the CLI and the status page use it.
//
// Each fire of a schedule is an ordinary message on the schedule's topic, with the schedule's
// payload, due at the fire's nominal time and with the ID [FireID] gives: "<name>@<nominal time>".
// Engines MUST put at most one message per schedule and nominal time, whatever fails (a crash at
// any point, a restart, several processes, a failover within the storage's promises), and MUST
// put one for every nominal time except as the misfire and overlap policies say. The decision that
// a nominal time has fired is made durably and atomically with the Put of its message.
//
// Every call is durable as a Put is, and takes effect for every process serving the engine's
// storage. Reading (Schedule, Schedules, ScheduleStats) changes nothing.
type Scheduler interface {
	Engine

	// SetSchedule creates the schedule s.Name, or replaces it whole, atomically, and reports
	// whether it created it. A replaced schedule's fire that is not yet due is removed; fires
	// already due or leased stay. The schedule's next fire is the first nominal time after the
	// call (for an @every spec, one period after it; see [Schedule.Spec]). A replaced schedule
	// keeps its pause. SetSchedule refuses with ErrInvalid a bad name, topic, spec, time zone or
	// policy, saying which field, and with ErrTooLarge a payload over the engine's limit.
	SetSchedule(ctx context.Context, s Schedule) (created bool, err error)

	// Schedule returns the schedule name, with its state. It fails with ErrNotFound when there is
	// none.
	Schedule(ctx context.Context, name string) (ScheduleInfo, error)

	// Schedules returns up to limit schedules in the order of their names, from the first name
	// after cursor on ("" for the first page), and the cursor of the next page ("" when there is
	// none): the last name of the page. limit must be from 1 to MaxPage (ErrInvalid otherwise).
	Schedules(ctx context.Context, cursor string, limit int) (page []ScheduleInfo, next string, err error)

	// DeleteSchedule removes the schedule name and its fire that is not yet due, and reports
	// whether there was one. Fires already due or leased stay.
	DeleteSchedule(ctx context.Context, name string) (bool, error)

	// PauseSchedule stops the schedule's fires and removes its fire that is not yet due, until
	// ResumeSchedule; the nominal times that pass meanwhile are not misfires, and are not fired.
	// Pausing a paused schedule does nothing. It fails with ErrNotFound when there is no such
	// schedule.
	PauseSchedule(ctx context.Context, name string) error

	// ResumeSchedule ends a pause: the schedule fires again from the first nominal time after the
	// call. Resuming a schedule that is not paused does nothing. It fails with ErrNotFound when
	// there is no such schedule.
	ResumeSchedule(ctx context.Context, name string) error

	// TriggerSchedule fires the schedule once now, paused or not, outside its spec, and returns
	// the fire's ID: its nominal time is the engine's clock at the call, in milliseconds. It does
	// not change the schedule's next fire. It fails with ErrNotFound when there is no such
	// schedule.
	TriggerSchedule(ctx context.Context, name string) (id string, err error)

	// ScheduleStats counts the engine's schedules and their fires. It is called on every metrics
	// scrape, so it must be cheap.
	ScheduleStats(ctx context.Context) (ScheduleStats, error)
}

// A Schedule is a recurring message: what to put, and when.
type Schedule struct {
	// Name names the schedule, and its fires' IDs: 1 to MaxScheduleName bytes of letters, digits
	// and "-_.:" (no "@", which separates the name from the time in a fire's ID).
	Name string
	// Topic and Payload are those of every fire's message.
	Topic   string
	Payload []byte
	// Spec says when the schedule fires, in one of these forms:
	//   - a cron expression of 5 fields (minute, hour, day of month, month, day of week), or of 6
	//     with seconds first: "0 9 * * mon-fri", "*/10 * * * * *". Both day fields restricted
	//     means either matches, as in Vixie cron;
	//   - a descriptor: @yearly (or @annually), @monthly, @weekly, @daily (or @midnight), @hourly;
	//   - "@every <duration>", a Go duration from MinEvery, in whole milliseconds: a fixed rate
	//     without drift, at the start of the schedule plus each whole multiple of the duration.
	//     The start is the SetSchedule call, rounded up to the second when the duration is a
	//     whole number of seconds, so that such a schedule's fires fall on whole seconds.
	Spec string
	// TimeZone is the IANA name of the zone a cron expression or descriptor is read in ("" is
	// UTC); an @every spec ignores it. Across a daylight saving change, a local time that does not
	// exist (clocks spring forward over it) fires at the instant the clocks jump, and a local time
	// that occurs twice (clocks fall back) fires once, at its first occurrence. So "30 2 * * *"
	// in America/New_York fires at 03:00 EDT on the spring-forward day, and "30 1 * * *" at 01:30
	// EDT only on the fall-back day, and "*/15 * * * *" fires at 03:00 once for the skipped
	// hour, and not at all during the repeated hour the second time through.
	TimeZone string
	// Misfire says what to do with the nominal times that passed while nothing could fire them
	// (the engine was closed, its storage unreachable); "" is MisfireOnce. It applies alike under
	// both overlap policies (see OverlapSkip).
	Misfire Misfire
	// Overlap says whether a fire may be put while the schedule's previous fire still waits
	// (scheduled, due or leased); "" is OverlapAllow.
	Overlap Overlap
}

// A Misfire policy says what a schedule does with nominal times that passed unfired.
type Misfire string

// The misfire policies.
const (
	// MisfireOnce fires once for the missed period, due at once: the fire of the latest missed
	// nominal time.
	MisfireOnce Misfire = "once"
	// MisfireSkip fires none of the missed times (a time fired within MisfireGrace of its nominal
	// time is not missed); the schedule goes on from the next.
	MisfireSkip Misfire = "skip"
	// MisfireAll fires each missed time, due at once, up to the latest MaxCatchUp of them.
	MisfireAll Misfire = "all"
)

// An Overlap policy says whether fires of a schedule may wait at the same time.
type Overlap string

// The overlap policies.
const (
	// OverlapAllow fires at every nominal time, whether or not earlier fires still wait. The
	// engine puts each fire ahead of its time (while the previous one falls due), so that a
	// fire is as punctual as any message.
	OverlapAllow Overlap = "allow"
	// OverlapSkip puts no fire while the schedule's previous fire still waits (scheduled, due or
	// leased): its nominal time is skipped, and counted as a misfire. This is what fixed delay
	// means for a queue: the next fire waits for the consumer to finish. The engine puts each
	// fire at its nominal time, when it decides, so it may be a little later than a message put
	// ahead. Nominal times that passed undecided (the engine closed, say) are handled by the
	// misfire policy exactly as an OverlapAllow schedule's: the times it fires, all due at once
	// (the latest for MisfireOnce, each for MisfireAll, none for MisfireSkip unless within
	// MisfireGrace), are one decision, put together unless the fire before them still waits,
	// which passes them all over. As its fires are not put ahead, a downtime that spans a
	// nominal time misses it, where an OverlapAllow schedule had put it already.
	OverlapSkip Overlap = "skip"
)

// Bounds of schedules.
const (
	// MaxScheduleName is the longest schedule name accepted, in bytes.
	MaxScheduleName = 200
	// MinEvery is the shortest period of an "@every" spec.
	MinEvery = 10 * time.Millisecond
	// MaxCatchUp bounds the missed times that MisfireAll fires at once.
	MaxCatchUp = 100
	// MisfireGrace is how late a fire may be decided and still not count as missed.
	MisfireGrace = time.Second
	// FireTimes is how many of its next nominal times ScheduleInfo.Next lists.
	FireTimes = 5
)

// ScheduleInfo is a schedule with its state.
type ScheduleInfo struct {
	Schedule
	// Paused reports a schedule paused by PauseSchedule.
	Paused bool
	// Next lists the next FireTimes nominal times, earliest first, the next fire's first (it may be
	// put already, waiting on the topic); nil while paused.
	Next []time.Time
	// LastFire and LastFireID are the nominal time and ID of the latest fire put (triggered fires
	// included) whose nominal time has come; zero and "" when none has.
	LastFire   time.Time
	LastFireID string
	// Fires counts the messages the schedule put (less those removed before they were due, by a
	// replace, a delete or a pause), and Misfires the nominal times it passed over (by the misfire
	// or the overlap policy), since it was created.
	Fires, Misfires uint64
	// Created is when the schedule was created, and Updated when it was last set.
	Created, Updated time.Time
}

// ScheduleStats is what [Scheduler.ScheduleStats] counts.
type ScheduleStats struct {
	// Schedules counts the schedules, Paused the paused ones among them.
	Schedules, Paused int64
	// Fires and Misfires count the fires put and the nominal times passed over, by every schedule
	// since the engine's storage was created (deleted schedules' included).
	Fires, Misfires uint64
}

// FireID returns the ID of a schedule's fire at the nominal time at: the name, "@", and at in UTC
// as RFC 3339, with milliseconds when ms is set (a sub-second schedule, or a triggered fire):
// "digest@2026-03-09T13:00:00Z", "tick@2026-03-09T13:00:00.250Z".
func FireID(name string, at time.Time, ms bool) string {
	layout := "2006-01-02T15:04:05Z"
	if ms {
		layout = "2006-01-02T15:04:05.000Z"
	}
	return name + "@" + at.UTC().Format(layout)
}

// ParseFireID splits the ID of a schedule's fire into the schedule's name and the nominal time,
// and reports whether id has that form.
func ParseFireID(id string) (name string, at time.Time, ok bool) {
	i := len(id) - 1
	for i >= 0 && id[i] != '@' {
		i--
	}
	if i <= 0 {
		return "", time.Time{}, false
	}
	s := id[i+1:]
	var layout string
	switch len(s) {
	case len("2006-01-02T15:04:05Z"):
		layout = "2006-01-02T15:04:05Z"
	case len("2006-01-02T15:04:05.000Z"):
		layout = "2006-01-02T15:04:05.000Z"
	default:
		return "", time.Time{}, false
	}
	t, err := time.Parse(layout, s)
	if err != nil {
		return "", time.Time{}, false
	}
	return id[:i], t, true
}
