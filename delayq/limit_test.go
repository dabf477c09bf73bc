package delayq

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/tockwheel/tock/queue"
)

// TestLimitsAndReasonsSurviveRestarts sets limits and fails messages with reasons, then opens the
// directory again twice: after Close (from the checkpoint) and from a copy taken as a kill -9
// would leave it before any checkpoint held them (from the log). Both keep every limit, the
// reasons and the failure for good; a limit removed stays removed.
func TestLimitsAndReasonsSurviveRestarts(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	q, err := Open(dir, WithCheckpointInterval(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	set := func(topic string, l queue.Limit) {
		t.Helper()
		if err := q.SetLimit(ctx, topic, l); err != nil {
			t.Fatal(err)
		}
	}
	set("a", queue.Limit{Rate: 12.5, Burst: 3, Concurrency: 2})
	set("b", queue.Limit{Concurrency: 7})
	set("gone", queue.Limit{Rate: 1})
	set("gone", queue.Limit{})
	retried, _ := q.Put(ctx, Message{Topic: "t"})
	poison, _ := q.Put(ctx, Message{Topic: "t"})
	for _, d := range mustReceive(t, q, "t", 2) {
		opts := []queue.NackOption{queue.WithReason("smtp: 451")}
		delay := time.Hour
		if d.ID == poison {
			opts, delay = []queue.NackOption{queue.WithReason("no such mailbox"), queue.WithDeadLetter()}, 0
		}
		if err := q.Nack(ctx, d.Receipt, delay, opts...); err != nil {
			t.Fatal(err)
		}
	}
	want := []queue.TopicLimit{
		{Topic: "a", Limit: queue.Limit{Rate: 12.5, Burst: 3, Concurrency: 2}},
		{Topic: "b", Limit: queue.Limit{Concurrency: 7}},
	}
	check := func(q *Queue, how string) {
		t.Helper()
		ls, err := q.Limits(ctx)
		if err != nil || len(ls) != len(want) || ls[0] != want[0] || ls[1] != want[1] {
			t.Fatalf("limits %s: %+v, %v; want %+v", how, ls, err, want)
		}
		for _, c := range []struct{ id, failure, reason string }{
			{retried, "nacked", "smtp: 451"},
			{poison, "dead-lettered", "no such mailbox"},
		} {
			m, err := q.Message(ctx, c.id)
			if err != nil || m.LastFailure != c.failure || m.Reason != c.reason {
				t.Fatalf("message %s %s: %q %q, %v; want %q %q", c.id, how, m.LastFailure, m.Reason, err, c.failure, c.reason)
			}
		}
	}
	check(q, "before a restart")
	crashed := filepath.Join(t.TempDir(), "crashed")
	crashCopy(t, nil, q, dir, crashed) // closes q, after the copy
	for _, c := range []struct{ dir, how string }{{dir, "after Close"}, {crashed, "after a crash before a checkpoint"}} {
		q, err := Open(c.dir)
		if err != nil {
			t.Fatal(err)
		}
		check(q, c.how)
		q.Close()
	}
}

func mustReceive(t *testing.T, q *Queue, topic string, n int) []Delivery {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out []Delivery
	for len(out) < n {
		ds, err := q.Receive(ctx, topic, n-len(out), time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, ds...)
	}
	return out
}
