package schedule

import (
	"errors"
	"testing"
	"time"

	"github.com/tockwheel/tock/queue"
)

func mustParse(t testing.TB, spec, zone string, start time.Time) *Spec {
	t.Helper()
	s, err := Parse(spec, zone, start)
	if err != nil {
		t.Fatalf("Parse(%q, %q): %v", spec, zone, err)
	}
	return s
}

func utc(s string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		panic(err)
	}
	return t
}

// The 2026 daylight saving changes: New York springs forward on March 8 at 02:00 EST (07:00Z) and
// falls back on November 1 at 02:00 EDT (06:00Z); Paris on March 29 at 02:00 CET (01:00Z) and on
// October 25 at 03:00 CEST (01:00Z).
func TestNextAcrossDST(t *testing.T) {
	for _, tc := range []struct {
		name, spec, zone, after string
		want                    []string
	}{
		{"NewYork0230Spring", "30 2 * * *", "America/New_York", "2026-03-07T00:00:00Z",
			[]string{"2026-03-07T07:30:00Z", "2026-03-08T07:00:00Z", "2026-03-09T06:30:00Z"}},
		{"Paris0230Spring", "30 2 * * *", "Europe/Paris", "2026-03-28T00:00:00Z",
			[]string{"2026-03-28T01:30:00Z", "2026-03-29T01:00:00Z", "2026-03-30T00:30:00Z"}},
		{"NewYork0230Fall", "30 2 * * *", "America/New_York", "2026-10-31T00:00:00Z",
			[]string{"2026-10-31T06:30:00Z", "2026-11-01T07:30:00Z", "2026-11-02T07:30:00Z"}},
		{"Paris0230Fall", "30 2 * * *", "Europe/Paris", "2026-10-24T00:00:00Z",
			[]string{"2026-10-24T00:30:00Z", "2026-10-25T00:30:00Z", "2026-10-26T01:30:00Z"}},
		{"NewYork0130Fall", "30 1 * * *", "America/New_York", "2026-10-31T00:00:00Z",
			[]string{"2026-10-31T05:30:00Z", "2026-11-01T05:30:00Z", "2026-11-02T06:30:00Z"}},
		{"NewYorkQuarterSpring", "*/15 * * * *", "America/New_York", "2026-03-08T06:40:00Z",
			[]string{"2026-03-08T06:45:00Z", "2026-03-08T07:00:00Z", "2026-03-08T07:15:00Z"}},
		{"NewYorkQuarterFall", "*/15 * * * *", "America/New_York", "2026-11-01T05:40:00Z",
			[]string{"2026-11-01T05:45:00Z", "2026-11-01T07:00:00Z", "2026-11-01T07:15:00Z"}},
		{"NewYorkHourlyFall", "@hourly", "America/New_York", "2026-11-01T04:30:00Z",
			[]string{"2026-11-01T05:00:00Z", "2026-11-01T07:00:00Z", "2026-11-01T08:00:00Z"}},
		{"ParisHourlySpring", "0 * * * *", "Europe/Paris", "2026-03-29T00:00:00Z",
			[]string{"2026-03-29T00:00:00Z", "2026-03-29T01:00:00Z", "2026-03-29T02:00:00Z"}[1:]},
		// From inside the repeated hour: its times were fired the first time through.
		{"NewYorkInRepeatedHour", "*/30 * * * *", "America/New_York", "2026-11-01T06:10:00Z",
			[]string{"2026-11-01T07:00:00Z", "2026-11-01T07:30:00Z"}},
		{"Seconds", "*/20 * * * * *", "", "2026-01-01T00:00:50Z",
			[]string{"2026-01-01T00:01:00Z", "2026-01-01T00:01:20Z"}},
		{"WeekdaysParis", "0 9 * * mon-fri", "Europe/Paris", "2026-03-27T09:00:00Z",
			[]string{"2026-03-30T07:00:00Z", "2026-03-31T07:00:00Z"}},
		{"Leap", "0 0 29 2 *", "", "2026-01-01T00:00:00Z", []string{"2028-02-29T00:00:00Z", "2032-02-29T00:00:00Z"}},
		{"EitherDay", "0 0 13 * fri", "", "2026-02-01T00:00:00Z",
			[]string{"2026-02-06T00:00:00Z", "2026-02-13T00:00:00Z", "2026-02-20T00:00:00Z"}},
		{"Monthly", "@monthly", "Europe/Paris", "2026-01-15T00:00:00Z", []string{"2026-01-31T23:00:00Z", "2026-02-28T23:00:00Z"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := mustParse(t, tc.spec, tc.zone, time.Time{})
			at := utc(tc.after)
			for i, w := range tc.want {
				got := s.Next(at)
				if !got.Equal(utc(w)) {
					t.Fatalf("fire %d after %v: %v (%v); want %s", i, at, got.UTC(), got.In(s.loc), w)
				}
				at = got
			}
		})
	}
}

// TestInstantMonotone walks every minute of the 2026 change days in both zones: instants never go
// back as local times grow, each existing local time maps to itself (its first occurrence), and
// each skipped one to the instant of the jump.
func TestInstantMonotone(t *testing.T) {
	for _, zone := range []string{"America/New_York", "Europe/Paris", "Australia/Lord_Howe"} {
		loc, err := LoadZone(zone)
		if err != nil {
			t.Fatal(err)
		}
		for _, day := range []string{"2026-03-08", "2026-03-29", "2026-10-25", "2026-11-01", "2026-04-05", "2026-10-04"} {
			c := utc(day + "T00:00:00Z")
			var prev time.Time
			for range 24 * 60 {
				i := instant(c, loc)
				if i.Before(prev) {
					t.Fatalf("%s: local %v at %v, before the previous local time's %v", zone, c, i.UTC(), prev.UTC())
				}
				if got := civil(i.In(loc)); got.Before(c) {
					t.Fatalf("%s: local %v at %v, which is local %v: earlier", zone, c, i.UTC(), got)
				}
				prev = i
				c = c.Add(time.Minute)
			}
		}
	}
}

func TestNextEvery(t *testing.T) {
	start := utc("2026-01-01T00:00:00.3Z")
	s := mustParse(t, "@every 1s", "", start)
	if got, want := s.Start(), utc("2026-01-01T00:00:01Z"); !got.Equal(want) {
		t.Fatalf("start %v; want %v, rounded up to the second", got, want)
	}
	if got := s.Next(start); !got.Equal(utc("2026-01-01T00:00:02Z")) {
		t.Fatalf("first fire %v; want one period after the start", got)
	}
	if got := s.Next(utc("2026-01-01T01:00:00Z")); !got.Equal(utc("2026-01-01T01:00:01Z")) {
		t.Fatalf("fire after 01:00:00 %v", got)
	}
	if s.SubSecond() {
		t.Fatal("@every 1s is sub-second")
	}
	f := mustParse(t, "@every 10ms", "", start)
	if !f.SubSecond() {
		t.Fatal("@every 10ms is not sub-second")
	}
	// No drift: the millionth fire is exactly a million periods after the start.
	at := f.Start()
	for range 1000 {
		at = f.Next(at)
	}
	if want := f.Start().Add(1000 * 10 * time.Millisecond); !at.Equal(want) {
		t.Fatalf("1000th fire at %v; want %v", at, want)
	}
	if got := f.Next(at.Add(-time.Nanosecond)); !got.Equal(at) {
		t.Fatalf("Next just before a fire time %v; want it, %v", got, at)
	}
	if id := f.FireID("tick", at); id != "tick@2026-01-01T00:00:10.300Z" {
		t.Fatalf("sub-second fire ID %q", id)
	}
	if id := s.FireID("tick", s.Next(start)); id != "tick@2026-01-01T00:00:02Z" {
		t.Fatalf("fire ID %q", id)
	}
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct{ spec, zone, field string }{
		{"", "", "spec"},
		{"* * *", "", "spec"},
		{"61 * * * *", "", "spec"},
		{"* * * * * * *", "", "spec"},
		{"0 0 30 2 *", "", "spec"},
		{"0 0 31 4,6,9,11 *", "", "spec"},
		{"@every 5ms", "", "spec"},
		{"@every 1500us", "", "spec"},
		{"@every -1s", "", "spec"},
		{"@every", "", "spec"},
		{"@everyday", "", "spec"},
		{"@fortnightly", "", "spec"},
		{"CRON_TZ=Europe/Paris 0 9 * * *", "", "spec"},
		{"TZ=UTC 0 9 * * *", "", "spec"},
		{"0 9 * * *", "Mars/Olympus", "time_zone"},
		{"0 9 * * *", "Local", "time_zone"},
		{"0 9 * * *", "../../etc/passwd", "time_zone"},
	} {
		_, err := Parse(tc.spec, tc.zone, time.Time{})
		if !errors.Is(err, queue.ErrInvalid) {
			t.Errorf("Parse(%q, %q): %v; want ErrInvalid", tc.spec, tc.zone, err)
			continue
		}
		if got := err.Error(); len(got) < len(tc.field) || got[:len(tc.field)] != tc.field {
			t.Errorf("Parse(%q, %q): %q; want it to begin with the field %q", tc.spec, tc.zone, got, tc.field)
		}
	}
}

func TestCheck(t *testing.T) {
	ok := queue.Schedule{Name: "digest.daily:1", Topic: "t", Spec: "@daily"}
	if _, err := Check(ok, time.Time{}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		field string
		edit  func(*queue.Schedule)
	}{
		{"name", func(s *queue.Schedule) { s.Name = "" }},
		{"name", func(s *queue.Schedule) { s.Name = "a@b" }},
		{"name", func(s *queue.Schedule) { s.Name = "a/b" }},
		{"name", func(s *queue.Schedule) { s.Name = string(make([]byte, queue.MaxScheduleName+1)) }},
		{"topic", func(s *queue.Schedule) { s.Topic = "" }},
		{"misfire", func(s *queue.Schedule) { s.Misfire = "twice" }},
		{"overlap", func(s *queue.Schedule) { s.Overlap = "never" }},
		{"spec", func(s *queue.Schedule) { s.Spec = "daily" }},
		{"time_zone", func(s *queue.Schedule) { s.TimeZone = "Nowhere" }},
	} {
		s := ok
		tc.edit(&s)
		_, err := Check(s, time.Time{})
		if !errors.Is(err, queue.ErrInvalid) || err.Error()[:len(tc.field)] != tc.field {
			t.Errorf("Check(%+v): %v; want ErrInvalid naming %s", s, err, tc.field)
		}
	}
}

func TestFireIDRoundTrip(t *testing.T) {
	for _, ms := range []bool{false, true} {
		at := utc("2026-03-08T07:00:00.250Z")
		if !ms {
			at = at.Truncate(time.Second)
		}
		id := queue.FireID("a.b@c", at, ms)
		name, got, ok := queue.ParseFireID(id)
		if !ok || name != "a.b@c" || !got.Equal(at) {
			t.Fatalf("ParseFireID(%q) = %q, %v, %v", id, name, got, ok)
		}
	}
	for _, id := range []string{"x", "@2026-03-08T07:00:00Z", "a@2026-03-08T07:00:00", "a@2026-03-08 07:00:00Z", "a@2026-13-08T07:00:00Z"} {
		if _, _, ok := queue.ParseFireID(id); ok {
			t.Errorf("ParseFireID(%q) accepted it", id)
		}
	}
}

func FuzzParseNext(f *testing.F) {
	for _, s := range []string{"30 2 * * *", "*/15 * * * *", "0 0 29 2 *", "@every 10ms", "@hourly", "0 9 * * mon-fri", "1-59/7 */3 1,15 * *"} {
		f.Add(s, "America/New_York", int64(1772953200))
		f.Add(s, "Europe/Paris", int64(1792112400))
	}
	f.Fuzz(func(t *testing.T, spec, zone string, unix int64) {
		s, err := Parse(spec, zone, time.Unix(1772953200, 0))
		if err != nil {
			if !errors.Is(err, queue.ErrInvalid) {
				t.Fatalf("Parse(%q, %q): %v, not ErrInvalid", spec, zone, err)
			}
			return
		}
		at := time.Unix(unix%(1<<34), 0)
		for range 5 {
			n := s.Next(at)
			if n.IsZero() {
				return
			}
			if !n.After(at) {
				t.Fatalf("%q in %q: Next(%v) = %v, not after it", spec, zone, at, n)
			}
			at = n
		}
	})
}
