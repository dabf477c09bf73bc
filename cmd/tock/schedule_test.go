package main

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tockwheel/tock/api"
	"github.com/tockwheel/tock/internal/redistest"
	"github.com/tockwheel/tock/redisq"
	"github.com/tockwheel/tock/server"
)

// startScheduleServer serves a redisq queue, which keeps schedules, on a real redis-server.
func startScheduleServer(t *testing.T) string {
	t.Helper()
	s := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	q, err := redisq.Open(ctx, rdb)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(server.New(q, server.WithLogger(slog.New(slog.DiscardHandler))))
	t.Cleanup(func() {
		ts.Close()
		q.Close()
		rdb.Close()
	})
	return ts.URL
}

func runSchedule(t *testing.T, name string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = scheduleCommands()[name](context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

// TestScheduleCommands sets a schedule from the command line, lists it, triggers, pauses,
// resumes and deletes it, and checks the clear refusal of a bad spec.
func TestScheduleCommands(t *testing.T) {
	url := startScheduleServer(t)
	out := mustRun(t, runSchedule, "schedule", "--server", url, "--tz", "Europe/Paris", "digest", "mail", "30 9 * * mon-fri", `{"kind":"digest"}`)
	if !strings.HasPrefix(out, "created digest: 30 9 * * mon-fri in Europe/Paris on mail") || strings.Count(out, "next ") != 5 ||
		!strings.Contains(out, "09:30:00.000 CE") {
		t.Fatalf("tock schedule printed %q", out)
	}
	out = mustRun(t, runSchedule, "schedule", "--server", url, "--tz", "Europe/Paris", "digest", "mail", "0 10 * * mon-fri", `{"kind":"digest2"}`)
	if !strings.HasPrefix(out, "replaced digest") {
		t.Fatalf("second tock schedule printed %q", out)
	}
	code, _, errs := runSchedule(t, "schedule", "--server", url, "bad", "mail", "61 * * * *")
	if code != exitFailed || !strings.Contains(errs, "spec") || !strings.Contains(errs, "HTTP 400") {
		t.Fatalf("tock schedule with a bad spec: exit %d, %q", code, errs)
	}
	code, _, errs = runSchedule(t, "schedule", "--server", url, "--tz", "Mars/Olympus", "bad", "mail", "@daily")
	if code != exitFailed || !strings.Contains(errs, "time_zone") {
		t.Fatalf("tock schedule with a bad zone: exit %d, %q", code, errs)
	}
	out = mustRun(t, runSchedule, "schedules", "--server", url)
	if !strings.Contains(out, "NAME") || !strings.Contains(out, "digest") || !strings.Contains(out, "0 10 * * mon-fri") || !strings.Contains(out, "running") {
		t.Fatalf("tock schedules printed %q", out)
	}
	id := strings.TrimSpace(mustRun(t, runSchedule, "trigger", "--server", url, "digest"))
	if !strings.HasPrefix(id, "digest@") {
		t.Fatalf("tock trigger printed %q", id)
	}
	got := mustRun(t, runCmd, "receive", "--server", url, "--max", "1", "--wait", "5s", "mail")
	var d api.Delivery
	if err := json.Unmarshal([]byte(got), &d); err != nil || d.ID != id || string(d.Payload) != `{"kind":"digest2"}` {
		t.Fatalf("received %q (%v); want the triggered fire %q", got, err, id)
	}
	if out := mustRun(t, runSchedule, "pause-schedule", "--server", url, "digest"); !strings.HasPrefix(out, "paused digest") {
		t.Fatalf("tock pause-schedule printed %q", out)
	}
	out = mustRun(t, runSchedule, "schedules", "--server", url, "--json")
	var s api.Schedule
	if err := json.Unmarshal([]byte(out), &s); err != nil || !s.Paused || s.Name != "digest" {
		t.Fatalf("tock schedules --json printed %q (%v)", out, err)
	}
	if out := mustRun(t, runSchedule, "resume-schedule", "--server", url, "digest"); !strings.HasPrefix(out, "resumed digest") {
		t.Fatalf("tock resume-schedule printed %q", out)
	}
	mustRun(t, runSchedule, "unschedule", "--server", url, "digest")
	if code, _, _ := runSchedule(t, "unschedule", "--server", url, "digest"); code != exitNotFound {
		t.Fatalf("second tock unschedule: exit %d; want %d", code, exitNotFound)
	}
	if out := mustRun(t, runSchedule, "schedules", "--server", url); out != "no schedules\n" {
		t.Fatalf("tock schedules after unschedule printed %q", out)
	}
}
