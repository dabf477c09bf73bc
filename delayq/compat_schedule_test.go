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
)

// The schedule fixtures: queue directories holding schedules, written by every checkpoint version
// from the first that kept them (testdata/vN/schedules, by TestWriteFixture) and opened by every
// later one.

// scheduleFixtureOptions are the options the schedule fixtures are written and opened with.
func scheduleFixtureOptions() []Option {
	return []Option{WithSlot(100 * time.Millisecond), WithHorizon(10 * time.Second), WithSegmentSize(4 << 10),
		WithCheckpointInterval(time.Hour), WithCompaction(0, 0), WithLogger(quiet)}
}

// TestOpensScheduleDirectories opens the schedule fixtures of every version that kept schedules
// (testdata/v10/schedules, written on the commit that added checkpoint version 10, and
// testdata/v11/schedules, by version 11),
// at the moment each was taken: the schedules must be those SCHEDULES lists, with their state, and
// the messages as many; then again after a Close, from the checkpoint this version writes.
func TestOpensScheduleDirectories(t *testing.T) {
	for _, name := range []string{"v10/schedules/crashed", "v10/schedules/closed", "v11/schedules/crashed", "v11/schedules/closed"} {
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
