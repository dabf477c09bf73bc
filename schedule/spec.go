package schedule

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
	"github.com/tockwheel/tock/queue"
)

// parser reads cron expressions: an optional seconds field, then minute, hour, day of month,
// month and day of week, or a descriptor. "@every" never reaches it (see Parse).
var parser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month |
	cron.Dow | cron.Descriptor)

// starBit marks a field written "*" (or "?") in robfig/cron's bit sets: it decides how the two
// day fields combine.
const starBit = 1 << 63

// A Spec is a parsed schedule spec in its time zone: it gives the schedule's nominal fire times.
// It is immutable and safe for concurrent use.
type Spec struct {
	text  string
	loc   *time.Location
	every time.Duration // > 0 for "@every"
	start time.Time     // the anchor of "@every": fires at start + k·every, k ≥ 1

	// The cron fields as bit sets: bit i set when value i matches.
	sec, min, hour, dom, month, dow uint64
}

// Parse parses spec in the IANA zone ("" is UTC). start anchors an "@every" spec: its fires are
// at start (rounded up to the second when the period is a whole number of seconds, and to the
// millisecond otherwise) plus each whole multiple of the period; other specs ignore it. Parse
// fails with an error matching [queue.ErrInvalid] that names the field at fault, "spec" or
// "time_zone".
func Parse(spec, zone string, start time.Time) (*Spec, error) {
	loc, err := LoadZone(zone)
	if err != nil {
		return nil, err
	}
	s := &Spec{text: spec, loc: loc}
	if strings.HasPrefix(spec, "TZ=") || strings.HasPrefix(spec, "CRON_TZ=") {
		return nil, specErr(spec, errors.New("give the zone as time_zone, not in the spec"))
	}
	if rest, ok := strings.CutPrefix(spec, "@every "); ok {
		d, err := time.ParseDuration(strings.TrimSpace(rest))
		switch {
		case err != nil:
			return nil, specErr(spec, err)
		case d < queue.MinEvery:
			return nil, specErr(spec, fmt.Errorf("period %v is below %v", d, queue.MinEvery))
		case d%time.Millisecond != 0:
			return nil, specErr(spec, fmt.Errorf("period %v is not a whole number of milliseconds", d))
		}
		s.every = d
		unit := time.Millisecond
		if d%time.Second == 0 {
			unit = time.Second
		}
		s.start = ceil(start, unit)
		return s, nil
	}
	if strings.HasPrefix(spec, "@every") {
		return nil, specErr(spec, errors.New(`want "@every <duration>"`))
	}
	sched, err := parser.Parse(spec)
	if err != nil {
		return nil, specErr(spec, err)
	}
	c, ok := sched.(*cron.SpecSchedule)
	if !ok {
		return nil, specErr(spec, fmt.Errorf("unsupported form %T", sched))
	}
	s.sec, s.min, s.hour, s.dom, s.month, s.dow = c.Second, c.Minute, c.Hour, c.Dom, c.Month, c.Dow
	if !s.satisfiable() {
		return nil, specErr(spec, errors.New("no month has that day: it never fires"))
	}
	return s, nil
}

func specErr(spec string, err error) error {
	return fmt.Errorf("spec %q: %v: %w", spec, err, queue.ErrInvalid)
}

// LoadZone returns the location of an IANA zone name ("" and "UTC" are UTC). It refuses, with an
// error matching [queue.ErrInvalid] naming the field time_zone, a name the database does not
// have, and "Local", which would make a schedule's times depend on the process computing them.
func LoadZone(zone string) (*time.Location, error) {
	if zone == "" || zone == "UTC" {
		return time.UTC, nil
	}
	if zone == "Local" {
		return nil, fmt.Errorf("time_zone %q: name an IANA zone, such as Europe/Paris: %w", zone, queue.ErrInvalid)
	}
	loc, err := time.LoadLocation(zone)
	if err != nil {
		return nil, fmt.Errorf("time_zone %q: unknown time zone: %w", zone, queue.ErrInvalid)
	}
	return loc, nil
}

// ceil rounds t up to a multiple of unit.
func ceil(t time.Time, unit time.Duration) time.Time {
	r := t.Truncate(unit)
	if r.Before(t) {
		r = r.Add(unit)
	}
	return r
}

// String returns the spec as it was given.
func (s *Spec) String() string { return s.text }

// Every returns the period of an "@every" spec, and 0 for a cron expression or descriptor.
func (s *Spec) Every() time.Duration { return s.every }

// Start returns the anchor of an "@every" spec (zero for others).
func (s *Spec) Start() time.Time { return s.start }

// SubSecond reports whether the spec fires at times that are not whole seconds: fire IDs then
// show milliseconds.
func (s *Spec) SubSecond() bool { return s.every > 0 && s.every%time.Second != 0 }

// FireID returns the ID of the schedule name's fire at nominal time at.
func (s *Spec) FireID(name string, at time.Time) string {
	return queue.FireID(name, at, s.SubSecond())
}

// satisfiable reports whether some day matches the day fields: a day of month that some chosen
// month has (February has 29), or any weekday when the day of week is restricted.
func (s *Spec) satisfiable() bool {
	if s.dom&starBit == 0 && s.dow&starBit == 0 {
		return true // either day field matches: some weekday always comes
	}
	if s.dom&starBit != 0 {
		return s.dow&^starBit != 0
	}
	days := [13]int{0, 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31}
	for m := 1; m <= 12; m++ {
		if s.month&(1<<m) == 0 {
			continue
		}
		for d := 1; d <= days[m]; d++ {
			if s.dom&(1<<d) != 0 {
				return true
			}
		}
	}
	return false
}
