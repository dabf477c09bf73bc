package delayq

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"
)

// TestChosenIDIsUnique is the regression test of two pending messages with one chosen ID: Cancel
// returned true, then false, while a copy stayed pending. A chosen ID is unique among pending
// messages: a retried Put (the same message) succeeds with no second copy, a different message
// fails with ErrDuplicate naming the pending one's due time, and after a Cancel the ID is free.
// The pending message is in the disk wheel, waiting in memory, ready, or leased.
func TestChosenIDIsUnique(t *testing.T) {
	for _, where := range []string{"disk", "memory", "ready", "leased"} {
		t.Run(where, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx := context.Background()
				q := open(t, t.TempDir(), WithLogger(quiet))
				delay := map[string]time.Duration{"disk": time.Hour, "memory": 500 * time.Millisecond}[where]
				due := time.Now().Add(delay)
				m := Message{ID: "key", Topic: "t", Payload: []byte("a"), DeliverAt: due}
				if id, err := q.Put(ctx, m); err != nil || id != "key" {
					t.Fatalf("Put = %q, %v", id, err)
				}
				if where == "leased" {
					receiveOne(t, q, "t", time.Second, time.Hour)
				}
				for _, retry := range []Message{m, {ID: "key", Topic: "t", Payload: []byte("a"), DeliverAt: due}} {
					if id, err := q.Put(ctx, retry); err != nil || id != "key" {
						t.Fatalf("retried Put = %q, %v", id, err)
					}
				}
				if ids, err := q.PutBatch(ctx, []Message{{Topic: "t"}, m}); err != nil || ids[1] != "key" {
					t.Fatalf("retried in a batch: %v, %v", ids, err)
				}
				for _, other := range []Message{
					{ID: "key", Topic: "t", Payload: []byte("b"), DeliverAt: due},
					{ID: "key", Topic: "u", Payload: []byte("a"), DeliverAt: due},
					{ID: "key", Topic: "t", Payload: []byte("a"), DeliverAt: due.Add(2 * time.Hour)},
				} {
					_, err := q.Put(ctx, other)
					var de *DuplicateError
					if !errors.Is(err, ErrDuplicate) || !errors.As(err, &de) || de.ID != "key" || !de.DeliverAt.Equal(due) {
						t.Fatalf("Put of a different message with a pending ID = %v, want a DuplicateError due %v", err, due)
					}
				}
				if _, err := q.PutBatch(ctx, []Message{{Topic: "t"}, {ID: "key", Topic: "t"}}); !errors.Is(err, ErrDuplicate) {
					t.Fatalf("batch with a duplicate: %v", err)
				}
				st := q.Snapshot()
				if st.Puts != 2 || st.Pending+int64(st.Due)+int64(st.Leased) != 2 {
					t.Fatalf("after retries and refused duplicates: %+v; want 2 messages", st)
				}
				check(t, q)
				if ok, err := q.Cancel(ctx, "key"); !ok || err != nil {
					t.Fatalf("Cancel = %v, %v", ok, err)
				}
				if ok, err := q.Cancel(ctx, "key"); ok || err != nil {
					t.Fatalf("second Cancel = %v, %v: a copy was pending", ok, err)
				}
				// The ID is free again.
				if id, err := q.Put(ctx, Message{ID: "key", Topic: "t", Payload: []byte("b")}); err != nil || id != "key" {
					t.Fatalf("Put after Cancel = %q, %v", id, err)
				}
				check(t, q)
			})
		})
	}
}

// TestRepeatedIDsInOneBatchAreInvalid checks a batch against itself, as queue.Engine has it: a
// chosen ID that repeats within a batch fails the whole batch with ErrInvalid, whether the
// messages differ or not (a retried batch repeats every message, not one within itself).
func TestRepeatedIDsInOneBatchAreInvalid(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		q := open(t, t.TempDir(), WithLogger(quiet))
		at := time.Now().Add(time.Hour)
		m := Message{ID: "x", Topic: "t", Payload: []byte("p"), DeliverAt: at}
		if _, err := q.PutBatch(ctx, []Message{{Topic: "t"}, m, {ID: "x", Topic: "t", Payload: []byte("q"), DeliverAt: at}}); !errors.Is(err, ErrInvalid) {
			t.Fatalf("batch with two messages of one ID: %v; want ErrInvalid", err)
		}
		if ids, err := q.PutBatch(ctx, []Message{m, m}); !errors.Is(err, ErrInvalid) || ids != nil {
			t.Fatalf("batch of one message twice: %v, %v; want ErrInvalid", ids, err)
		}
		if st := q.Snapshot(); st.Puts != 0 {
			t.Fatalf("refused batches stored %d messages", st.Puts)
		}
		if ids, err := q.PutBatch(ctx, []Message{m}); err != nil || fmt.Sprint(ids) != "[x]" {
			t.Fatalf("batch of the message once: %v, %v", ids, err)
		}
		check(t, q)
	})
}

// TestDueAtTheLaterOfDeliverAtAndPut is the regression test of a DeliverAt in the past, or before
// 1970, kept as given: deliveries reported it, so their lateness measured the caller's choice, not
// the queue. A message is due at the later of DeliverAt and its Put; a DeliverAt past the range
// is refused with a plain ErrInvalid message.
func TestDueAtTheLaterOfDeliverAtAndPut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		q := open(t, t.TempDir(), WithLogger(quiet))
		for _, at := range []time.Time{{}, time.Unix(-5, 0), time.Now().Add(-time.Hour), time.Now()} {
			put := time.Now()
			if _, err := q.Put(ctx, Message{Topic: "t", DeliverAt: at}); err != nil {
				t.Fatal(err)
			}
			if d := receiveOne(t, q, "t", time.Millisecond, time.Minute); !d.DeliverAt.Equal(put) {
				t.Fatalf("DeliverAt %v put at %v: delivered reporting %v", at, put, d.DeliverAt)
			}
			time.Sleep(time.Second)
		}
		if l := q.Snapshot().Lateness; l.Max > time.Millisecond {
			t.Fatalf("lateness %+v of messages due at their put", l)
		}
		_, err := q.Put(ctx, Message{Topic: "t", DeliverAt: time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC)})
		if !errors.Is(err, ErrInvalid) || err.Error() != "delayq: deliver_at 3000-01-01T00:00:00Z is after 2262-01-01T00:00:00Z, the latest time accepted: invalid argument" {
			t.Fatalf("Put in the year 3000: %v", err)
		}
		if _, err := q.Put(ctx, Message{Topic: "t", DeliverAt: time.Date(2261, 12, 31, 0, 0, 0, 0, time.UTC)}); err != nil {
			t.Fatalf("Put at the end of the range: %v", err)
		}
	})
}
