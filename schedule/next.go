package schedule

import "time"

// maxSearch bounds the search for a cron expression's next match, in civil years: February the
// 29th on a given weekday comes at least every 28 years, and every other satisfiable expression
// sooner.
const maxSearch = 30

// Next returns the first nominal time after t, in UTC, or the zero time when there is none before
// [queue.MaxDeliverAt].
func (s *Spec) Next(t time.Time) time.Time {
	var n time.Time
	if s.every > 0 {
		n = s.nextEvery(t)
	} else {
		n = s.nextCron(t)
	}
	if n.After(maxTime) {
		return time.Time{}
	}
	return n.UTC()
}

// Upcoming returns the first n nominal times after t, earliest first (fewer when the schedule
// ends before [queue.MaxDeliverAt]).
func (s *Spec) Upcoming(t time.Time, n int) []time.Time {
	var ts []time.Time
	for range n {
		t = s.Next(t)
		if t.IsZero() {
			break
		}
		ts = append(ts, t)
	}
	return ts
}

func (s *Spec) nextEvery(t time.Time) time.Time {
	if t.Before(s.start) {
		return s.start.Add(s.every)
	}
	k := t.Sub(s.start)/s.every + 1
	return s.start.Add(k * s.every)
}

// nextCron finds the first instant after t of a local time that matches. The instant of a local
// time grows with it (see instant), and the instant of t's own local time is not after t, so the
// search starts at t's local time and passes over the matches whose instant is not after t (those
// of the hour a fall back repeats).
func (s *Spec) nextCron(t time.Time) time.Time {
	c := civil(t.In(s.loc))
	for {
		var ok bool
		c, ok = s.nextCivil(c)
		if !ok {
			return time.Time{}
		}
		if i := instant(c, s.loc); i.After(t) {
			return i
		}
		c = c.Add(time.Second)
	}
}

// civil returns t's local date and clock as the same fields in UTC, where calendar arithmetic has
// no daylight saving to mind.
func civil(t time.Time) time.Time {
	y, mo, d := t.Date()
	h, mi, s := t.Clock()
	return time.Date(y, mo, d, h, mi, s, 0, time.UTC)
}

// nextCivil returns the first local time at or after c (a civil time, see civil) whose fields
// match, or false when none comes within maxSearch years.
func (s *Spec) nextCivil(c time.Time) (time.Time, bool) {
	limit := c.Year() + maxSearch
	has := func(set uint64, v int) bool { return set&(1<<uint(v)) != 0 }
wrap:
	if c.Year() > limit {
		return time.Time{}, false
	}
	for !has(s.month, int(c.Month())) {
		c = time.Date(c.Year(), c.Month()+1, 1, 0, 0, 0, 0, time.UTC)
		if c.Month() == time.January {
			goto wrap
		}
	}
	for !s.dayMatches(c) {
		c = time.Date(c.Year(), c.Month(), c.Day()+1, 0, 0, 0, 0, time.UTC)
		if c.Day() == 1 {
			goto wrap
		}
	}
	for !has(s.hour, c.Hour()) {
		c = c.Truncate(time.Hour).Add(time.Hour)
		if c.Hour() == 0 {
			goto wrap
		}
	}
	for !has(s.min, c.Minute()) {
		c = c.Truncate(time.Minute).Add(time.Minute)
		if c.Minute() == 0 {
			goto wrap
		}
	}
	for !has(s.sec, c.Second()) {
		c = c.Add(time.Second)
		if c.Second() == 0 {
			goto wrap
		}
	}
	return c, true
}

// dayMatches applies cron's rule for the two day fields: when either is "*", both must match;
// when both are restricted, either may.
func (s *Spec) dayMatches(c time.Time) bool {
	dom := s.dom&(1<<uint(c.Day())) != 0
	dow := s.dow&(1<<uint(c.Weekday())) != 0
	if s.dom&starBit != 0 || s.dow&starBit != 0 {
		return dom && dow
	}
	return dom || dow
}

// instant returns the instant of the local time c (a civil time, see civil) in loc: the instant
// itself when it occurs once; its first occurrence when the clocks fell back over it; and the
// instant the clocks jumped when they sprang forward over it. So instants never decrease as local
// times grow.
func instant(c time.Time, loc *time.Location) time.Time {
	y, mo, d := c.Date()
	h, mi, sec := c.Clock()
	t := time.Date(y, mo, d, h, mi, sec, 0, loc)
	if loc == time.UTC {
		return t
	}
	lc := civil(t)
	switch {
	case lc.Equal(c):
		start, _ := t.ZoneBounds()
		if start.IsZero() {
			return t
		}
		_, prev := start.Add(-time.Second).Zone()
		_, off := t.Zone()
		if prev > off {
			// The clocks fell back at start: c may have occurred before it too.
			if e := t.Add(-time.Duration(prev-off) * time.Second); e.Before(start) && civil(e.In(loc)).Equal(c) {
				return e
			}
		}
		return t
	case lc.Before(c):
		// c was skipped: time.Date read it with the offset before the jump, which ends t's zone.
		if _, end := t.ZoneBounds(); !end.IsZero() {
			return end
		}
	default:
		// c was skipped, read with the offset after the jump, which starts t's zone.
		if start, _ := t.ZoneBounds(); !start.IsZero() {
			return start
		}
	}
	return t
}
