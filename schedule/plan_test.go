package schedule

import (
	"fmt"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tockwheel/tock/queue"
)

func TestPlanMisfire(t *testing.T) {
	s := mustParse(t, "@every 1s", "", utc("2026-01-01T00:00:00Z"))
	next := utc("2026-01-01T00:00:10Z")
	now := utc("2026-01-01T00:01:09.5Z") // 60 times came, 00:00:10 to 00:01:09
	sec := func(n int) time.Time { return utc("2026-01-01T00:00:00Z").Add(time.Duration(n) * time.Second) }
	for _, tc := range []struct {
		misfire queue.Misfire
		overlap queue.Overlap
		fire    []time.Time
		missed  int
		next    time.Time
		act     time.Time
	}{
		{queue.MisfireOnce, queue.OverlapAllow, []time.Time{sec(69), sec(70)}, 59, sec(71), sec(70)},
		{"", "", []time.Time{sec(69), sec(70)}, 59, sec(71), sec(70)},
		{queue.MisfireSkip, queue.OverlapAllow, []time.Time{sec(69), sec(70)}, 59, sec(71), sec(70)},
		{queue.MisfireOnce, queue.OverlapSkip, []time.Time{sec(69)}, 59, sec(70), sec(70)},
		{queue.MisfireAll, queue.OverlapSkip, timesFrom(sec(10), 60), 0, sec(70), sec(70)},
	} {
		t.Run(fmt.Sprint(tc.misfire, "/", tc.overlap), func(t *testing.T) {
			p := s.Plan(next, now, tc.misfire, tc.overlap)
			if !slices.EqualFunc(p.Fire, tc.fire, time.Time.Equal) || p.Missed != tc.missed || !p.Next.Equal(tc.next) || !p.Act.Equal(tc.act) {
				t.Fatalf("Plan = fire %v, missed %d, next %v, act %v; want %v, %d, %v, %v", p.Fire, p.Missed, p.Next, p.Act, tc.fire, tc.missed, tc.next, tc.act)
			}
		})
	}
	// skip passes over a time that came more than MisfireGrace ago.
	m := mustParse(t, "0 * * * * *", "", time.Time{})
	p := m.Plan(utc("2026-01-01T00:01:00Z"), utc("2026-01-01T00:10:00Z").Add(queue.MisfireGrace+time.Millisecond), queue.MisfireSkip, queue.OverlapSkip)
	if len(p.Fire) != 0 || p.Missed != 10 {
		t.Fatalf("skip, late by more than the grace: fire %v, missed %d; want none, 10", p.Fire, p.Missed)
	}
	p = m.Plan(utc("2026-01-01T00:01:00Z"), utc("2026-01-01T00:10:00Z").Add(queue.MisfireGrace), queue.MisfireSkip, queue.OverlapSkip)
	if len(p.Fire) != 1 || p.Missed != 9 {
		t.Fatalf("skip, late by the grace: fire %v, missed %d; want 00:10, 9", p.Fire, p.Missed)
	}
	// all fires at most MaxCatchUp, the latest.
	p = s.Plan(sec(1), sec(1000), queue.MisfireAll, queue.OverlapSkip)
	if len(p.Fire) != queue.MaxCatchUp || !p.Fire[0].Equal(sec(1000-queue.MaxCatchUp+1)) || p.Missed != 1000-queue.MaxCatchUp {
		t.Fatalf("all, 1000 missed: %d fires from %v, missed %d", len(p.Fire), p.Fire[0], p.Missed)
	}
	// A cron schedule missed for years is planned without walking every time.
	c := mustParse(t, "* * * * * *", "Europe/Paris", time.Time{})
	p = c.Plan(utc("2020-01-01T00:00:00Z"), utc("2026-01-01T00:00:00Z"), queue.MisfireAll, queue.OverlapSkip)
	if len(p.Fire) != queue.MaxCatchUp || !p.Fire[len(p.Fire)-1].Equal(utc("2026-01-01T00:00:00Z")) || p.Missed < countLimit-queue.MaxCatchUp {
		t.Fatalf("years of seconds: %d fires, last %v, missed %d", len(p.Fire), p.Fire[len(p.Fire)-1], p.Missed)
	}
}

func timesFrom(t time.Time, n int) []time.Time {
	ts := make([]time.Time, n)
	for i := range ts {
		ts[i] = t.Add(time.Duration(i) * time.Second)
	}
	return ts
}

// epoch2026 is how far a bubble's clock, which starts at 2000-01-01 UTC, is moved to run in 2026.
var epoch2026 = utc("2026-01-01T00:00:00Z").Sub(time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC))

// driver fires a schedule as an engine does, on a clock moved to 2026: it plans when the plan
// says to act, puts each fire (recording its nominal time and when it was put), and keeps next.
// It stops acting while down says so, as an engine that is closed.
type driver struct {
	spec    *Spec
	misfire queue.Misfire
	overlap queue.Overlap
	next    time.Time
	fires   map[time.Time]int
	order   []time.Time
	missed  int
}

func now2026() time.Time { return time.Now().Add(epoch2026) }

func (d *driver) run(until time.Time, down func(time.Time) bool) {
	p := d.spec.Plan(d.next, now2026(), d.misfire, d.overlap)
	for {
		for _, f := range p.Fire {
			d.fires[f]++
			d.order = append(d.order, f)
		}
		d.missed += p.Missed
		d.next = p.Next
		if p.Act.IsZero() || p.Act.After(until) {
			return
		}
		time.Sleep(p.Act.Sub(now2026()))
		for down(now2026()) {
			time.Sleep(time.Minute)
		}
		p = d.spec.Plan(d.next, now2026(), d.misfire, d.overlap)
	}
}

// TestDSTDays runs a 02:30 schedule, a quarter-hourly one and an hourly one over the 2026 spring
// forward and fall back days of New York and Paris in a synctest bubble, as an engine would fire
// them: every fire at the expected instant, once.
func TestDSTDays(t *testing.T) {
	for _, tc := range []struct {
		name, spec, zone, from, until string
		want                          []string // fires, or a count and the fires that must be among them
		count                         int
	}{
		{"NewYork0230Spring", "30 2 * * *", "America/New_York", "2026-03-06T12:00:00Z", "2026-03-10T12:00:00Z",
			[]string{"2026-03-07T07:30:00Z", "2026-03-08T07:00:00Z", "2026-03-09T06:30:00Z", "2026-03-10T06:30:00Z"}, 0},
		{"NewYork0230Fall", "30 2 * * *", "America/New_York", "2026-10-30T12:00:00Z", "2026-11-03T12:00:00Z",
			[]string{"2026-10-31T06:30:00Z", "2026-11-01T07:30:00Z", "2026-11-02T07:30:00Z", "2026-11-03T07:30:00Z"}, 0},
		{"Paris0230Spring", "30 2 * * *", "Europe/Paris", "2026-03-27T12:00:00Z", "2026-03-31T12:00:00Z",
			[]string{"2026-03-28T01:30:00Z", "2026-03-29T01:00:00Z", "2026-03-30T00:30:00Z", "2026-03-31T00:30:00Z"}, 0},
		{"Paris0230Fall", "30 2 * * *", "Europe/Paris", "2026-10-23T12:00:00Z", "2026-10-27T12:00:00Z",
			[]string{"2026-10-24T00:30:00Z", "2026-10-25T00:30:00Z", "2026-10-26T01:30:00Z", "2026-10-27T01:30:00Z"}, 0},
		// A day of 23 hours has 92 quarter hours; one of 25 hours has 96, the repeated hour's once.
		{"NewYorkQuarterSpring", "*/15 * * * *", "America/New_York", "2026-03-08T05:00:00Z", "2026-03-09T04:00:00Z",
			[]string{"2026-03-08T06:45:00Z", "2026-03-08T07:00:00Z", "2026-03-08T07:15:00Z"}, 92},
		{"ParisQuarterFall", "*/15 * * * *", "Europe/Paris", "2026-10-24T22:00:00Z", "2026-10-25T23:00:00Z",
			[]string{"2026-10-25T00:45:00Z", "2026-10-25T02:00:00Z"}, 96},
		{"ParisHourlyFall", "@hourly", "Europe/Paris", "2026-10-24T22:00:00Z", "2026-10-25T23:00:00Z",
			[]string{"2026-10-25T00:00:00Z", "2026-10-25T02:00:00Z"}, 24},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				time.Sleep(utc(tc.from).Sub(now2026()))
				s := mustParse(t, tc.spec, tc.zone, now2026())
				d := &driver{spec: s, next: s.Next(now2026()), fires: map[time.Time]int{}}
				d.run(utc(tc.until), func(time.Time) bool { return false })
				for f, n := range d.fires {
					if n != 1 {
						t.Errorf("%v fired %d times", f.UTC(), n)
					}
				}
				var due []time.Time
				for _, f := range d.order {
					if !f.After(utc(tc.until)) {
						due = append(due, f)
					}
				}
				if tc.count == 0 {
					if len(due) != len(tc.want) {
						t.Fatalf("fired %v; want %v", due, tc.want)
					}
				} else if len(due) != tc.count {
					t.Fatalf("fired %d times; want %d", len(due), tc.count)
				}
				for _, w := range tc.want {
					if d.fires[utc(w)] != 1 {
						t.Errorf("%s not fired once: fires %v", w, due)
					}
				}
				if d.missed != 0 {
					t.Errorf("%d misfires while nothing was down", d.missed)
				}
			})
		})
	}
}

// TestMisfireAfterDowntime stops the driver for 10 minutes of an @every 1s schedule and checks
// what each policy fires when it is back, and that no time fires twice.
func TestMisfireAfterDowntime(t *testing.T) {
	for _, tc := range []struct {
		misfire       queue.Misfire
		overlap       queue.Overlap
		fires, missed int
	}{
		// 1800 s: up until 600.5 s, down until 1200.5 s, up until 1800 s. Under OverlapAllow the
		// fire of 601 s was put ahead before the downtime, and 602 s to 1200 s came while down
		// (599 times); under OverlapSkip, 601 s to 1200 s (600).
		{queue.MisfireOnce, queue.OverlapAllow, 1202, 598},
		{queue.MisfireSkip, queue.OverlapAllow, 1202, 598},
		{queue.MisfireAll, queue.OverlapAllow, 1201 + queue.MaxCatchUp, 599 - queue.MaxCatchUp},
		{queue.MisfireSkip, queue.OverlapSkip, 1201, 599},
		{queue.MisfireAll, queue.OverlapSkip, 1200 + queue.MaxCatchUp, 600 - queue.MaxCatchUp},
	} {
		t.Run(fmt.Sprint(tc.misfire, "/", tc.overlap), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				start := now2026()
				s := mustParse(t, "@every 1s", "", start)
				d := &driver{spec: s, misfire: tc.misfire, overlap: tc.overlap, next: s.Next(start), fires: map[time.Time]int{}}
				downFrom, downTo := start.Add(600*time.Second+500*time.Millisecond), start.Add(1200*time.Second+500*time.Millisecond)
				d.run(start.Add(1800*time.Second), func(now time.Time) bool {
					if now.After(downFrom) && now.Before(downTo) {
						time.Sleep(downTo.Sub(now))
					}
					return false
				})
				n := 0
				for f, c := range d.fires {
					if c != 1 {
						t.Fatalf("%v fired %d times", f, c)
					}
					if !f.After(start.Add(1800 * time.Second)) {
						n++
					}
				}
				if n != tc.fires || d.missed != tc.missed {
					t.Fatalf("%d fires, %d missed; want %d, %d", n, d.missed, tc.fires, tc.missed)
				}
			})
		})
	}
}
