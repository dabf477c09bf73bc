package delayq

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tockwheel/tock/queue"
)

// The schedule fixtures: queue directories holding schedules, written by the checkpoint version
// that first kept them (testdata/v10) and opened by every later one.

// scheduleFixtureOptions are the options the schedule fixtures are written and opened with.
func scheduleFixtureOptions() []Option {
	return []Option{WithSlot(100 * time.Millisecond), WithHorizon(10 * time.Second), WithSegmentSize(4 << 10),
		WithCheckpointInterval(time.Hour), WithCompaction(0, 0), WithLogger(quiet)}
}

// TestWriteScheduleFixture writes testdata/vN (N the checkpoint version this code writes) with
// schedules of every kind (a cron spec in a zone, replaced; @every at a sub-second rate with
// OverlapSkip and MisfireAll, fired several times; one paused; one triggered; one deleted) on both
// sides of a checkpoint, and a few messages: a directory copied while the queue was open ("crashed",
// log to replay after the checkpoint) and one after Close ("closed"). Each holds SCHEDULES (the
// moment it was taken and the number of messages, fires included, then the schedules with their
// state as allSchedules prints them). It runs only when
// DELAYQ_WRITE_SCHEDULE_FIXTURE names the directory to write into.
func TestWriteScheduleFixture(t *testing.T) {
	out := os.Getenv("DELAYQ_WRITE_SCHEDULE_FIXTURE")
	if out == "" {
		t.Skip("set DELAYQ_WRITE_SCHEDULE_FIXTURE to the directory to write into")
	}
	base := t.TempDir()
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		dir := filepath.Join(base, "q")
		q := open(t, dir, scheduleFixtureOptions()...)
		set := func(s queue.Schedule) {
			t.Helper()
			if _, err := q.SetSchedule(ctx, s); err != nil {
				t.Fatal(err)
			}
		}
		set(queue.Schedule{Name: "digest", Topic: "mail", Payload: []byte("digest v1"), Spec: "30 9 * * mon-fri", TimeZone: "Europe/Paris"})
		set(queue.Schedule{Name: "tick", Topic: "ticks", Spec: "@every 250ms", Misfire: queue.MisfireAll, Overlap: queue.OverlapSkip})
		set(queue.Schedule{Name: "hourly", Topic: "ticks", Payload: []byte("h"), Spec: "@hourly", Misfire: queue.MisfireSkip})
		set(queue.Schedule{Name: "held", Topic: "ticks", Spec: "*/5 * * * * *"})
		set(queue.Schedule{Name: "gone", Topic: "ticks", Spec: "@daily"})
		if err := q.PauseSchedule(ctx, "held"); err != nil {
			t.Fatal(err)
		}
		if _, err := q.Put(ctx, Message{ID: "user-1", Topic: "t", Payload: []byte("one"), DeliverAt: time.Now().Add(30 * time.Second)}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second + 100*time.Millisecond) // tick fires
		if err := q.checkpoint(); err != nil {
			t.Fatal(err)
		}
		// After the checkpoint: in the log only.
		set(queue.Schedule{Name: "digest", Topic: "mail", Payload: []byte("digest v2"), Spec: "30 9 * * mon-fri", TimeZone: "Europe/Paris"})
		if _, err := q.TriggerSchedule(ctx, "hourly"); err != nil {
			t.Fatal(err)
		}
		if ok, err := q.DeleteSchedule(ctx, "gone"); !ok || err != nil {
			t.Fatalf("DeleteSchedule = %v, %v", ok, err)
		}
		if _, err := q.Put(ctx, Message{Topic: "t", Payload: []byte("two"), DeliverAt: time.Now().Add(20 * time.Second)}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second + 30*time.Millisecond) // tick fires again, its fires wait
		synctest.Wait()
		check(t, q)
		if err := q.log.WaitDurable(q.log.End()); err != nil {
			t.Fatal(err)
		}
		st := q.Snapshot()
		text := fmt.Sprintf("# taken at %d with %d messages\n", time.Now().UnixNano(), st.Pending+int64(st.Due)) + allSchedules(t, q)
		write := func(name string) {
			t.Helper()
			target := filepath.Join(out, name)
			if err := copyFiles(dir, target); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(target, "SCHEDULES"), []byte(text), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Remove(filepath.Join(target, "LOCK")); err != nil && !os.IsNotExist(err) {
				t.Fatal(err)
			}
		}
		write("crashed")
		if err := q.Close(); err != nil {
			t.Fatal(err)
		}
		write("closed")
	})
}

// TestOpensScheduleDirectories opens the schedule fixtures of every version that kept schedules
// (testdata/v10, written by TestWriteScheduleFixture on the commit that added checkpoint version 10),
// at the moment each was taken: the schedules must be those SCHEDULES lists, with their state, and
// the messages as many; then again after a Close, from the checkpoint this version writes.
func TestOpensScheduleDirectories(t *testing.T) {
	for _, name := range []string{"v10/crashed", "v10/closed"} {
		t.Run(name, func(t *testing.T) {
			src := filepath.Join("testdata", name)
			b, err := os.ReadFile(filepath.Join(src, "SCHEDULES"))
			if err != nil {
				t.Fatal(err)
			}
			header, want, _ := strings.Cut(string(b), "\n")
			var taken, messages int64
			if _, err := fmt.Sscanf(header, "# taken at %d with %d messages", &taken, &messages); err != nil {
				t.Fatalf("SCHEDULES header %q: %v", header, err)
			}
			dir := filepath.Join(t.TempDir(), "q")
			copyDir(t, src, dir)
			synctest.Test(t, func(t *testing.T) {
				time.Sleep(time.Until(time.Unix(0, taken)))
				for range 2 {
					q := open(t, dir, scheduleFixtureOptions()...)
					check(t, q)
					if st := q.Snapshot(); st.CorruptRecords != 0 || st.Pending+int64(st.Due) != messages {
						t.Fatalf("after Open: %+v; want %d messages", st, messages)
					}
					if got := allSchedules(t, q); got != want {
						t.Fatalf("schedules:\n%s\nwant\n%s", got, want)
					}
					// The chosen ID of a message on the disk wheel is still known.
					if _, err := q.Put(context.Background(), Message{ID: "user-1", Topic: "t", Payload: []byte("other")}); err == nil {
						t.Fatal("Put with the ID of a pending message of the fixture succeeded")
					}
					if err := q.Close(); err != nil {
						t.Fatal(err)
					}
				}
			})
		})
	}
}
