package delayq

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tockwheel/tock/delayq/internal/format"
	"github.com/tockwheel/tock/delayq/internal/wal"
	"github.com/tockwheel/tock/queue"
)

// receiveFires receives and acks the fires of topic until the bubble's clock reaches until, and
// returns their nominal times, in the order received. It fails on a fire delivered before its
// nominal time, or twice.
func receiveFires(t *testing.T, q *Queue, topic string, until time.Time) []time.Time {
	t.Helper()
	ctx, cancel := context.WithDeadline(context.Background(), until)
	defer cancel()
	var got []time.Time
	seen := map[string]bool{}
	for {
		ds, err := q.Receive(ctx, topic, 100, time.Hour)
		if errors.Is(err, context.DeadlineExceeded) {
			return got
		}
		if err != nil {
			t.Fatalf("Receive: %v", err)
		}
		for _, d := range ds {
			_, at, ok := queue.ParseFireID(d.ID)
			switch {
			case !ok:
				t.Fatalf("delivered %q, not a fire", d.ID)
			case seen[d.ID]:
				t.Fatalf("fire %q delivered twice", d.ID)
			case time.Now().Before(at) || d.DeliverAt.Before(at):
				t.Fatalf("fire %q delivered at %v, due %v: early", d.ID, time.Now(), d.DeliverAt)
			}
			seen[d.ID] = true
			got = append(got, at)
			if err := q.Ack(context.Background(), d.Receipt); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// every returns the times from first to last, step apart.
func every(first, last time.Time, step time.Duration) []time.Time {
	var ts []time.Time
	for t := first; !t.After(last); t = t.Add(step) {
		ts = append(ts, t)
	}
	return ts
}

func sameTimes(a, b []time.Time) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !a[i].Equal(b[i]) {
			return false
		}
	}
	return true
}

// TestScheduleMisfireAfterRestart runs an "@every 2s" schedule of each misfire policy, closes the
// queue for eleven seconds, and opens it again: the fire put ahead before the close comes late (it
// is a message like any), and the nominal times that passed while the queue was closed fire as the
// policy says: each of them (all), the latest (once), or none (skip: the latest is more than
// queue.MisfireGrace late); then the schedule goes on from the next. The misfires are counted, and
// everything holds across the restart.
func TestScheduleMisfireAfterRestart(t *testing.T) {
	for _, misfire := range []queue.Misfire{queue.MisfireAll, queue.MisfireOnce, queue.MisfireSkip} {
		t.Run(string(misfire), func(t *testing.T) {
			dir := t.TempDir()
			synctest.Test(t, func(t *testing.T) {
				ctx := context.Background()
				q := open(t, dir, WithLogger(quiet))
				start := time.Now() // a whole second: the bubble starts on one
				if _, err := q.SetSchedule(ctx, queue.Schedule{Name: "tick", Topic: "t", Spec: "@every 2s", Misfire: misfire}); err != nil {
					t.Fatal(err)
				}
				sec := func(n int) time.Time { return start.Add(time.Duration(n) * time.Second) }
				got := receiveFires(t, q, "t", start.Add(6500*time.Millisecond))
				if want := every(sec(2), sec(6), 2*time.Second); !sameTimes(got, want) {
					t.Fatalf("before the restart: fires %v; want %v", got, want)
				}
				check(t, q)
				if err := q.Close(); err != nil {
					t.Fatal(err)
				}
				time.Sleep(11 * time.Second) // closed from 6.5 s to 17.5 s
				q = open(t, dir, WithLogger(quiet))
				check(t, q)
				got = receiveFires(t, q, "t", start.Add(22500*time.Millisecond))
				// 8 s was put ahead at 6 s; 10 to 16 s passed while closed; 18 s is put ahead at 17.5 s.
				var want []time.Time
				missed := 0
				switch misfire {
				case queue.MisfireAll:
					want = every(sec(8), sec(22), 2*time.Second)
				case queue.MisfireOnce:
					want = append([]time.Time{sec(8), sec(16)}, every(sec(18), sec(22), 2*time.Second)...)
					missed = 3
				case queue.MisfireSkip:
					want = append([]time.Time{sec(8)}, every(sec(18), sec(22), 2*time.Second)...)
					missed = 4
				}
				if !sameTimes(got, want) {
					t.Fatalf("after eleven seconds closed: fires %v; want %v", got, want)
				}
				info, err := q.Schedule(ctx, "tick")
				if err != nil || info.Misfires != uint64(missed) || info.Fires != uint64(3+len(want)+1) {
					t.Fatalf("Schedule = %+v, %v; want %d misfires, %d fires (one put ahead)", info, err, missed, 3+len(want)+1)
				}
				check(t, q)
			})
		})
	}
}

// TestScheduleSurvivesRestart sets schedules of every kind, changes them, closes the queue (and,
// on the way, copies its directory as a crash would leave it, with log after the checkpoint), and
// checks that both reopen to the same schedules.
func TestScheduleSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		q := open(t, dir, WithLogger(quiet), WithCheckpointInterval(time.Hour))
		set := func(s queue.Schedule) {
			t.Helper()
			if _, err := q.SetSchedule(ctx, s); err != nil {
				t.Fatal(err)
			}
		}
		set(queue.Schedule{Name: "daily", Topic: "mail", Payload: []byte("digest"), Spec: "30 9 * * mon-fri", TimeZone: "Europe/Paris"})
		set(queue.Schedule{Name: "fast", Topic: "t", Spec: "@every 250ms", Misfire: queue.MisfireAll, Overlap: queue.OverlapSkip})
		set(queue.Schedule{Name: "paused", Topic: "t", Spec: "@hourly"})
		set(queue.Schedule{Name: "gone", Topic: "t", Spec: "@hourly"})
		if err := q.PauseSchedule(ctx, "paused"); err != nil {
			t.Fatal(err)
		}
		if err := q.checkpoint(); err != nil {
			t.Fatal(err)
		}
		// After the checkpoint: in the log only.
		time.Sleep(time.Second)
		set(queue.Schedule{Name: "daily", Topic: "mail", Payload: []byte("digest v2"), Spec: "30 9 * * mon-fri", TimeZone: "Europe/Paris"})
		if _, err := q.TriggerSchedule(ctx, "daily"); err != nil {
			t.Fatal(err)
		}
		if ok, err := q.DeleteSchedule(ctx, "gone"); !ok || err != nil {
			t.Fatalf("DeleteSchedule = %v, %v", ok, err)
		}
		time.Sleep(time.Second) // "fast" fires, its fires wait
		// The sleep ends at one of fast's act times: let it be planned before the state is taken,
		// or the reopen would plan it (another misfire) and tell the states apart.
		synctest.Wait()
		check(t, q)
		want := allSchedules(t, q)
		st, _ := q.ScheduleStats(ctx)
		if err := q.log.WaitDurable(q.log.End()); err != nil {
			t.Fatal(err)
		}
		crashed := t.TempDir()
		if err := copyFiles(dir, crashed); err != nil {
			t.Fatal(err)
		}
		if err := q.Close(); err != nil {
			t.Fatal(err)
		}
		for _, d := range []string{dir, crashed} {
			q := open(t, d, WithLogger(quiet))
			check(t, q)
			if got := allSchedules(t, q); got != want {
				t.Fatalf("reopened %s:\n%s\nwant\n%s", d, got, want)
			}
			if st2, _ := q.ScheduleStats(ctx); st2 != st {
				t.Fatalf("reopened: %+v; want %+v", st2, st)
			}
			q.Close()
		}
	})
}

// allSchedules returns the schedules, with their states, as text.
func allSchedules(t *testing.T, q *Queue) string {
	t.Helper()
	page, _, err := q.Schedules(context.Background(), "", queue.MaxPage)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	for _, s := range page {
		fmt.Fprintf(&b, "%s %s %q %s %s %s %s %s paused=%v next=%v last=%v %s fires=%d misfires=%d %v %v\n", s.Name, s.Topic, s.Payload, s.Spec,
			s.TimeZone, s.Misfire, s.Overlap, s.Schedule.Name, s.Paused, s.Next, s.LastFire, s.LastFireID, s.Fires, s.Misfires, s.Created, s.Updated)
	}
	return b.String()
}

// TestScheduleSpringForward runs schedules in America/New_York across the spring-forward of
// 2026-03-08 (02:00 EST becomes 03:00 EDT) through the engine, in a synctest bubble: "30 2 * * *"
// fires at 03:00 EDT that day (the instant the clocks jump) and at 02:30 EDT the next, and
// "*/15 * * * *" fires once at 03:00 for the hour skipped, as queue.Schedule.TimeZone documents.
// Each fire is due at its nominal time, never before.
func TestScheduleSpringForward(t *testing.T) {
	dir := t.TempDir()
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		ny, err := time.LoadLocation("America/New_York")
		if err != nil {
			t.Skipf("no time zone database: %v", err)
		}
		time.Sleep(time.Until(time.Date(2026, 3, 7, 23, 0, 0, 0, ny)))
		q := open(t, dir, WithLogger(quiet), WithNoSync(), WithSlot(time.Minute), WithCheckpointInterval(time.Hour))
		for _, s := range []queue.Schedule{
			{Name: "at0230", Topic: "daily", Spec: "30 2 * * *", TimeZone: "America/New_York"},
			{Name: "quarter", Topic: "quarter", Spec: "*/15 * * * *", TimeZone: "America/New_York"},
		} {
			if _, err := q.SetSchedule(ctx, s); err != nil {
				t.Fatal(err)
			}
		}
		utc := func(h, m int) time.Time { return time.Date(2026, 3, 8, h, m, 0, 0, time.UTC) }
		// The quarters from 01:00 EST (06:00 UTC) to 03:30 EDT (07:30 UTC); then the daily fires,
		// which wait for their consumer meanwhile.
		quarters := receiveFires(t, q, "quarter", utc(7, 31))
		daily := receiveFires(t, q, "daily", time.Date(2026, 3, 9, 12, 0, 0, 0, time.UTC))
		wantDaily := []time.Time{utc(7, 0), time.Date(2026, 3, 9, 6, 30, 0, 0, time.UTC)}
		if !sameTimes(daily, wantDaily) {
			t.Fatalf("30 2 * * * in New York: fires %v; want %v", daily, wantDaily)
		}
		var lateQuarters []time.Time
		for _, qt := range quarters {
			if !qt.Before(utc(6, 0)) {
				lateQuarters = append(lateQuarters, qt)
			}
		}
		wantQuarters := []time.Time{utc(6, 0), utc(6, 15), utc(6, 30), utc(6, 45), utc(7, 0), utc(7, 15), utc(7, 30)}
		if !sameTimes(lateQuarters, wantQuarters) {
			t.Fatalf("*/15 * * * * in New York from 01:00 EST: fires %v; want %v", lateQuarters, wantQuarters)
		}
		check(t, q)
	})
}

// TestScheduleLateIsNotMissed plans schedules three seconds late while the queue is open, as a
// machine too busy to run the planner on time would (the planner's step, called with a moment
// three seconds on), and checks that a schedule of each misfire and overlap policy fires every
// nominal time of those seconds, late, with no misfire: the policies are for times that came while
// nothing could fire them. An OverlapSkip schedule's times are late as an OverlapAllow one's: it
// puts each at its time, so it has no fire put ahead to spare it, and its previous fire does not
// wait. In a synctest bubble.
func TestScheduleLateIsNotMissed(t *testing.T) {
	dir := t.TempDir()
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		q := open(t, dir, WithLogger(quiet), WithNoSync())
		defer q.Close()
		var names []string
		start := time.Now()
		for _, o := range []queue.Overlap{queue.OverlapAllow, queue.OverlapSkip} {
			for _, m := range []queue.Misfire{queue.MisfireOnce, queue.MisfireSkip, queue.MisfireAll} {
				name := string(o) + "-" + string(m)
				names = append(names, name)
				if _, err := q.SetSchedule(ctx, queue.Schedule{Name: name, Topic: name, Spec: "@every 100ms", Misfire: m, Overlap: o}); err != nil {
					t.Fatal(err)
				}
			}
		}
		end := start.Add(3 * time.Second)
		q.mu.Lock()
		more, err := q.fireDueLocked(end.UnixNano(), len(names))
		q.mu.Unlock()
		if more || err != nil {
			t.Fatalf("fireDueLocked = %v, %v", more, err)
		}
		// The counts of the late plan, before the times after it come (those of an OverlapSkip
		// schedule are skipped while its late fires wait to be received: misfires of its
		// overlap policy).
		for _, name := range names {
			if info, err := q.Schedule(ctx, name); err != nil || info.Misfires != 0 || info.Fires < 30 {
				t.Errorf("%s: Schedule = %+v, %v; want 30 fires or more, no misfire", name, info, err)
			}
		}
		time.Sleep(4 * time.Second)
		for _, name := range names {
			got := receiveFires(t, q, name, time.Now().Add(time.Second))
			n := 0
			for _, at := range got {
				if at.After(start) && !at.After(end) {
					n++
				}
			}
			if n != 30 {
				t.Errorf("%s: %d fires of the 30 nominal times planned late; fires %v", name, n, got)
			}
		}
		check(t, q)
	})
}

// TestSchedule0230AcrossDST runs "30 2 * * *" through the engine over the 2026 spring-forward and
// fall-back days of New York and Paris, in a synctest bubble, with the queue closed and opened again
// (from its checkpoint and log) a day and a half after the schedule was set, hours before the
// change: on the day 02:30 does not exist it
// fires when the clocks jump (03:00 new time), on the day it occurs twice it fires once, at the
// first; every fire once, due at its nominal time, never before. Package schedule's TestDSTDays
// checks the same days on the spec alone.
func TestSchedule0230AcrossDST(t *testing.T) {
	for _, tc := range []struct {
		name, zone string
		from       time.Time // the schedule is set then; the queue restarts 36 hours later
		want       []string  // its fires until from + 4 days
	}{
		{"NewYorkSpring", "America/New_York", time.Date(2026, 3, 6, 12, 0, 0, 0, time.UTC),
			[]string{"2026-03-07T07:30:00Z", "2026-03-08T07:00:00Z", "2026-03-09T06:30:00Z", "2026-03-10T06:30:00Z"}},
		{"NewYorkFall", "America/New_York", time.Date(2026, 10, 30, 12, 0, 0, 0, time.UTC),
			[]string{"2026-10-31T06:30:00Z", "2026-11-01T07:30:00Z", "2026-11-02T07:30:00Z", "2026-11-03T07:30:00Z"}},
		{"ParisSpring", "Europe/Paris", time.Date(2026, 3, 27, 12, 0, 0, 0, time.UTC),
			[]string{"2026-03-28T01:30:00Z", "2026-03-29T01:00:00Z", "2026-03-30T00:30:00Z", "2026-03-31T00:30:00Z"}},
		{"ParisFall", "Europe/Paris", time.Date(2026, 10, 23, 12, 0, 0, 0, time.UTC),
			[]string{"2026-10-24T00:30:00Z", "2026-10-25T00:30:00Z", "2026-10-26T01:30:00Z", "2026-10-27T01:30:00Z"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			synctest.Test(t, func(t *testing.T) {
				if _, err := time.LoadLocation(tc.zone); err != nil {
					t.Skipf("no time zone database: %v", err)
				}
				time.Sleep(time.Until(tc.from))
				opts := []Option{WithLogger(quiet), WithNoSync(), WithSlot(time.Minute), WithCheckpointInterval(time.Hour)}
				q := open(t, dir, opts...)
				if _, err := q.SetSchedule(context.Background(), queue.Schedule{Name: "at0230", Topic: "daily", Spec: "30 2 * * *", TimeZone: tc.zone}); err != nil {
					t.Fatal(err)
				}
				got := receiveFires(t, q, "daily", tc.from.Add(36*time.Hour))
				if err := q.Close(); err != nil {
					t.Fatal(err)
				}
				q = open(t, dir, opts...)
				got = append(got, receiveFires(t, q, "daily", tc.from.Add(4*24*time.Hour))...)
				var want []time.Time
				for _, w := range tc.want {
					at, _ := time.Parse(time.RFC3339, w)
					want = append(want, at)
				}
				if !sameTimes(got, want) {
					t.Fatalf("30 2 * * * in %s: fires %v; want %v", tc.zone, got, want)
				}
				info, err := q.Schedule(context.Background(), "at0230")
				if err != nil || info.Misfires != 0 {
					t.Fatalf("Schedule = %+v, %v; want no misfire", info, err)
				}
				check(t, q)
				q.Close()
			})
		})
	}
}

// TestPutReplaceOnDisk replaces a message waiting in the disk wheel, and one in memory, and checks
// after a crash (replaying the log) and after a Close (from the checkpoint) that one message waits
// under each ID: the replacement.
func TestPutReplaceOnDisk(t *testing.T) {
	dir := t.TempDir()
	crashed := t.TempDir()
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		q := open(t, dir, WithLogger(quiet), WithCheckpointInterval(time.Hour))
		now := time.Now()
		put := func(m Message) {
			t.Helper()
			if _, err := q.Put(ctx, m); err != nil {
				t.Fatal(err)
			}
		}
		put(Message{ID: "far", Topic: "a", Payload: []byte("1"), DeliverAt: now.Add(2 * time.Hour)})
		put(Message{ID: "near", Topic: "a", Payload: []byte("1"), DeliverAt: now.Add(time.Second)})
		put(Message{ID: "far", Topic: "b", Payload: []byte("2"), DeliverAt: now.Add(3 * time.Hour), Replace: true})
		put(Message{ID: "near", Topic: "b", Payload: []byte("2"), DeliverAt: now.Add(time.Minute), Replace: true})
		if _, err := q.PutBatch(ctx, []Message{{ID: "x", Topic: "a", Replace: true}, {Topic: "a"}}); !errors.Is(err, ErrInvalid) {
			t.Fatalf("PutBatch with a replace: %v; want ErrInvalid", err)
		}
		if err := copyFiles(dir, crashed); err != nil {
			t.Fatal(err)
		}
		for _, d := range []string{"", crashed, dir} {
			if d != "" {
				q.Close()
				q = open(t, d, WithLogger(quiet))
			}
			check(t, q)
			for id, due := range map[string]time.Time{"far": now.Add(3 * time.Hour), "near": now.Add(time.Minute)} {
				m, err := q.Message(ctx, id)
				if err != nil || m.Topic != "b" || string(m.Payload) != "2" || !m.DeliverAt.Equal(due) {
					t.Fatalf("%s: %s: %+v, %v; want the replacement", d, id, m, err)
				}
			}
			if ti, _ := q.Topics(ctx); len(ti) != 1 || ti[0].Topic != "b" || ti[0].Scheduled != 2 {
				t.Fatalf("%s: topics %+v; want two messages on b", d, ti)
			}
		}
	})
}

// TestDamagedScheduleRecords flips a byte of a schedule's record in a crashed queue's log, after
// its checkpoint: Open goes on without the change the record held (a schedule set, or paused), and
// counts the damage; the state passes its checks; and Check names the place and says which
// schedule's record it seems to be (the flip changes the last byte: the name's case).
func TestDamagedScheduleRecords(t *testing.T) {
	for _, tc := range []struct {
		kind   format.Kind
		victim string
	}{{format.KindSchedule, "a"}, {format.KindUnschedule, "c"}, {format.KindFire, "c"}} {
		t.Run(tc.kind.String(), func(t *testing.T) {
			dir, crashed := t.TempDir(), t.TempDir()
			ctx := context.Background()
			q := open(t, dir, WithLogger(quiet), WithSegmentSize(4<<10), WithCheckpointInterval(time.Hour))
			for _, s := range []queue.Schedule{{Name: "a", Topic: "t", Spec: "@daily"}, {Name: "b", Topic: "t", Spec: "@every 1h", Overlap: queue.OverlapSkip},
				{Name: "c", Topic: "t", Spec: "@hourly"}} {
				if _, err := q.SetSchedule(ctx, s); err != nil {
					t.Fatal(err)
				}
			}
			if err := q.PauseSchedule(ctx, "c"); err != nil {
				t.Fatal(err)
			}
			if err := q.ResumeSchedule(ctx, "c"); err != nil {
				t.Fatal(err)
			}
			before := allSchedules(t, q)
			q.log.WaitDurable(q.log.End())
			var victim wal.Pos
			scanRecords(q.log, wal.MakePos(1, 0), 0, func(p wal.Pos, rec *format.Record) error {
				if rec.Kind == tc.kind && rec.Schedule == tc.victim {
					victim = p
				}
				return nil
			}, nil)
			if victim == 0 {
				t.Fatalf("no %v record of %s", tc.kind, tc.victim)
			}
			if err := copyFiles(dir, crashed); err != nil {
				t.Fatal(err)
			}
			q.Close()
			flipLastByte(t, crashed, victim)
			q = open(t, crashed, WithLogger(quiet))
			check(t, q)
			if n := q.Snapshot().CorruptRecords; n != 1 {
				t.Fatalf("%d corrupt records counted; want 1", n)
			}
			after := allSchedules(t, q)
			if after == before {
				t.Fatalf("the damaged %v record of %s changed nothing: %s", tc.kind, tc.victim, after)
			}
			if _, err := q.SetSchedule(ctx, queue.Schedule{Name: tc.victim, Topic: "t", Spec: "@hourly"}); err != nil {
				t.Fatalf("the schedule cannot be set again: %v", err)
			}
			check(t, q)
			q.Close()
			rep, err := Check(crashed)
			if err != nil {
				t.Fatal(err)
			}
			// The Open above reported the damage: Check lists it as accounted for.
			if d := rep.Accounted; len(rep.Damage) != 0 || len(d) != 1 || d[0].Offset != int64(victim.Offset()) || !strings.Contains(strings.ToLower(strings.Join(d[0].Held, ";")), `schedule "`+tc.victim+`"`) {
				t.Fatalf("Check: damage %+v, accounted for %+v; want the damage at %v accounted for, naming schedule %s", rep.Damage, d, victim, tc.victim)
			}
			if rep.Schedules != 3 {
				t.Fatalf("Check counts %d schedules; want 3", rep.Schedules)
			}
		})
	}
}
