package queuetest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tockwheel/tock/queue"
)

// The Model's own tests: each plays a story of calls and answers, and checks that the Model takes
// what the contract allows and refuses what it does not, with a message naming the fault.

var t0 = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

func at(d time.Duration) Span { return At(t0.Add(d)) }

// must fails the test if err is not nil.
func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// refused fails the test unless err is a violation whose message contains want.
func refused(t *testing.T, err error, want string) {
	t.Helper()
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("got %v; want a violation saying %q", err, want)
	}
}

func delivery(id, topic, receipt string, attempt int, due time.Duration) queue.Delivery {
	return queue.Delivery{Message: queue.Message{ID: id, Topic: topic, DeliverAt: t0.Add(due)}, Receipt: receipt, Attempt: attempt}
}

func TestModelDeliveries(t *testing.T) {
	m := NewModel(2, 0)
	must(t, m.Put(queue.Message{ID: "a", Topic: "t", DeliverAt: t0.Add(time.Second)}, "a", nil, at(0)))
	refused(t, m.Receive("t", 1, time.Minute, []queue.Delivery{delivery("a", "t", "r1", 1, time.Second)}, nil, at(500*time.Millisecond)), "early")
	refused(t, m.Receive("t", 1, time.Minute, []queue.Delivery{delivery("b", "t", "r1", 1, 0)}, nil, at(2*time.Second)), "never put")
	refused(t, m.Receive("u", 1, time.Minute, []queue.Delivery{delivery("a", "u", "r1", 1, time.Second)}, nil, at(2*time.Second)), "with topic")
	refused(t, m.Receive("t", 1, time.Minute, []queue.Delivery{delivery("a", "t", "r1", 2, time.Second)}, nil, at(2*time.Second)), "attempt 2")
	must(t, m.Receive("t", 1, time.Minute, []queue.Delivery{delivery("a", "t", "r1", 1, time.Second)}, nil, at(2*time.Second)))
	refused(t, m.Receive("t", 1, time.Minute, []queue.Delivery{delivery("a", "t", "r2", 2, time.Second)}, nil, at(3*time.Second)), "leased")
	must(t, m.Ack([]string{"r1"}, nil, at(4*time.Second)))
	refused(t, m.Receive("t", 1, time.Minute, []queue.Delivery{delivery("a", "t", "r3", 2, time.Second)}, nil, at(5*time.Second)), "acked, cancelled or purged")
	must(t, m.Ack([]string{"r1"}, nil, at(6*time.Second))) // idempotent
	refused(t, m.Ack([]string{"r1"}, &queue.AckError{Failed: []queue.ReceiptError{{Receipt: "r1", Err: queue.ErrUnknownReceipt}}}, at(7*time.Second)), "idempotent")
	must(t, m.Receive("t", 1, time.Minute, nil, fmt.Errorf("receive: %w", context.DeadlineExceeded), at(8*time.Second)))
}

func TestModelLeaseRunsOut(t *testing.T) {
	m := NewModel(2, 0)
	must(t, m.Put(queue.Message{Topic: "t"}, "x", nil, at(0)))
	must(t, m.Receive("t", 1, time.Second, []queue.Delivery{delivery("x", "t", "r1", 1, 0)}, nil, at(0)))
	// Before the lease's end, the message is surely leased.
	refused(t, m.CheckTopics([]queue.TopicInfo{{Topic: "t", Due: 1}}, at(500*time.Millisecond)), "has 1 due")
	must(t, m.CheckTopics([]queue.TopicInfo{{Topic: "t", Leased: 1}}, at(500*time.Millisecond)))
	// After it, the engine may or may not have noticed: leased, or due again.
	must(t, m.CheckTopics([]queue.TopicInfo{{Topic: "t", Leased: 1}}, at(2*time.Second)))
	must(t, m.CheckTopics([]queue.TopicInfo{{Topic: "t", Due: 1}}, at(2*time.Second)))
	// Delivered again: attempt 2; the old receipt is stale.
	must(t, m.Receive("t", 1, time.Second, []queue.Delivery{delivery("x", "t", "r2", 2, 1500*time.Millisecond)}, nil, at(2*time.Second)))
	refused(t, m.Ack([]string{"r1"}, nil, at(2*time.Second)), "leased again since")
	// The second lease runs out: the second failure makes it a dead letter, or it is still leased.
	must(t, m.CheckTopics([]queue.TopicInfo{{Topic: "t", Dead: 1}, {Topic: "t.dead", Due: 1}}, at(4*time.Second)))
	must(t, m.Receive("t.dead", 1, time.Minute, []queue.Delivery{delivery("x", "t.dead", "r3", 1, 3*time.Second)}, nil, at(4*time.Second)))
	must(t, m.CheckTopics([]queue.TopicInfo{{Topic: "t.dead", Leased: 1}}, at(5*time.Second)))
	refused(t, m.CheckTopics(nil, at(5*time.Second)), "has 0 leased")
}

func TestModelNackToDeath(t *testing.T) {
	m := NewModel(2, 0)
	must(t, m.Put(queue.Message{ID: "x", Topic: "t"}, "x", nil, at(0)))
	must(t, m.Receive("t", 1, time.Hour, []queue.Delivery{delivery("x", "t", "r1", 1, 0)}, nil, at(0)))
	must(t, m.Nack("r1", time.Second, false, nil, at(time.Second)))
	refused(t, m.Nack("r1", 0, false, nil, at(time.Second)), "names no current lease")
	must(t, m.CheckMessages("t", queue.Scheduled, []queue.MessageInfo{{ID: "x", Topic: "t", State: queue.Scheduled, DeliverAt: t0.Add(2 * time.Second)}}, at(time.Second)))
	refused(t, m.CheckMessages("t", queue.Scheduled, nil, at(time.Second)), "does not list")
	must(t, m.Receive("t", 1, time.Hour, []queue.Delivery{delivery("x", "t", "r2", 2, 2*time.Second)}, nil, at(3*time.Second)))
	must(t, m.Nack("r2", 0, false, nil, at(3*time.Second)))
	must(t, m.CheckMessages("t", queue.Dead, []queue.MessageInfo{{ID: "x", Topic: "t", State: queue.Dead, DeliverAt: t0.Add(3 * time.Second)}}, at(3*time.Second)))
	refused(t, m.Requeue("t", nil, 0, nil, at(4*time.Second)), "holds 1")
	must(t, m.Requeue("t", nil, 1, nil, at(4*time.Second)))
	must(t, m.Receive("t", 1, time.Hour, []queue.Delivery{delivery("x", "t", "r3", 1, 4*time.Second)}, nil, at(4*time.Second)))
}

func TestModelAdmin(t *testing.T) {
	m := NewModel(0, 0)
	for i, due := range []time.Duration{time.Hour, 2 * time.Hour, 0} {
		must(t, m.Put(queue.Message{ID: fmt.Sprint("m", i), Topic: "t", DeliverAt: t0.Add(due)}, fmt.Sprint("m", i), nil, at(0)))
	}
	refused(t, m.Cancel("never", true, nil, at(0)), "no such message")
	refused(t, m.DeliverNow("m2", true, nil, at(time.Second)), "not scheduled")
	refused(t, m.DeliverNow("m1", false, nil, at(time.Second)), "scheduled")
	must(t, m.DeliverNow("m1", true, nil, at(time.Second)))
	refused(t, m.Purge("t", queue.Scheduled, 2, nil, at(2*time.Second)), "holds 1")
	must(t, m.Purge("t", queue.Scheduled, 1, nil, at(2*time.Second)))
	must(t, m.CheckTopics([]queue.TopicInfo{{Topic: "t", Due: 2}}, at(2*time.Second)))
	refused(t, m.Cancel("m0", true, nil, at(3*time.Second)), "no such message") // purged
	refused(t, m.Cancel("m1", false, nil, at(3*time.Second)), "for a waiting message")
	m.Pause("t", true)
	refused(t, m.Receive("t", 1, time.Hour, []queue.Delivery{delivery("m1", "t", "r", 1, time.Second)}, nil, at(3*time.Second)), "paused")
	refused(t, m.CheckTopics([]queue.TopicInfo{{Topic: "t", Due: 2}}, at(3*time.Second)), "paused")
	must(t, m.CheckDueCounts(t0.Add(time.Hour), time.Hour, []int{0, 0}, at(3*time.Second)))
}

func TestModelDuplicates(t *testing.T) {
	m := NewModel(0, 0)
	msg := queue.Message{ID: "c", Topic: "t", Payload: []byte("p"), DeliverAt: t0.Add(time.Hour)}
	must(t, m.Put(msg, "c", nil, at(0)))
	must(t, m.Put(msg, "c", nil, at(time.Second))) // a retried Put
	other := msg
	other.Payload = []byte("q")
	refused(t, m.Put(other, "c", nil, at(time.Second)), "succeeded")
	must(t, m.Put(other, "", &queue.DuplicateError{ID: "c", DeliverAt: t0.Add(time.Hour)}, at(time.Second)))
	refused(t, m.Put(other, "", &queue.DuplicateError{ID: "c", DeliverAt: t0}, at(time.Second)), "due")
	refused(t, m.Put(queue.Message{Topic: "t"}, "", fmt.Errorf("%w", queue.ErrDuplicate), at(time.Second)), "no reason")
	fresh := queue.Message{ID: "d", Topic: "t"}
	refused(t, m.PutBatch([]queue.Message{msg, fresh}, []string{"c", "d"}, nil, at(2*time.Second)), "retried beside new ones")
	must(t, m.PutBatch([]queue.Message{msg, fresh}, nil, queue.ErrDuplicate, at(2*time.Second)))
	must(t, m.PutBatch([]queue.Message{fresh, fresh}, nil, queue.ErrInvalid, at(2*time.Second)))
	refused(t, m.Put(queue.Message{Topic: "t"}, "c", nil, at(3*time.Second)), "generated the ID")
}

func TestModelReplace(t *testing.T) {
	leasedErr := &queue.DuplicateError{ID: "r", DeliverAt: t0, Leased: true}
	m := NewModel(0, 0)
	// Without a message waiting, a Replace is a Put.
	must(t, m.Put(queue.Message{ID: "r", Topic: "t", Payload: []byte("a"), DeliverAt: t0.Add(time.Hour), Replace: true}, "r", nil, at(0)))
	refused(t, m.Put(queue.Message{ID: "r", Topic: "t", Replace: true}, "", leasedErr, at(time.Second)), "no lease")
	refused(t, m.Put(queue.Message{ID: "r", Topic: "t", Replace: true}, "", &queue.DuplicateError{ID: "r", DeliverAt: t0.Add(time.Hour)}, at(time.Second)),
		"refused as a duplicate")
	// A scheduled message is replaced: new topic, payload and due time.
	must(t, m.Put(queue.Message{ID: "r", Topic: "u", Payload: []byte("b"), DeliverAt: t0.Add(2 * time.Hour), Replace: true}, "r", nil, at(time.Second)))
	refused(t, m.CheckMessages("t", queue.Scheduled, []queue.MessageInfo{{ID: "r", Topic: "t", State: queue.Scheduled, DeliverAt: t0.Add(time.Hour)}}, at(time.Second)),
		`lists "r" on "u"`)
	must(t, m.CheckMessages("u", queue.Scheduled, []queue.MessageInfo{{ID: "r", Topic: "u", State: queue.Scheduled, DeliverAt: t0.Add(2 * time.Hour)}}, at(time.Second)))
	// A due message is replaced, and its attempts count from zero again.
	must(t, m.Put(queue.Message{ID: "r", Topic: "u", Replace: true}, "r", nil, at(2*time.Second)))
	must(t, m.Receive("u", 1, time.Minute, []queue.Delivery{delivery("r", "u", "r1", 1, 2*time.Second)}, nil, at(2*time.Second)))
	must(t, m.Nack("r1", 0, false, nil, at(3*time.Second)))
	must(t, m.Put(queue.Message{ID: "r", Topic: "u", Replace: true}, "r", nil, at(4*time.Second)))
	refused(t, m.Receive("u", 1, time.Minute, []queue.Delivery{delivery("r", "u", "r2", 2, 4*time.Second)}, nil, at(4*time.Second)), "attempt 2")
	// A leased message is not: the Put fails, saying so.
	must(t, m.Receive("u", 1, time.Minute, []queue.Delivery{delivery("r", "u", "r2", 1, 4*time.Second)}, nil, at(4*time.Second)))
	refused(t, m.Put(queue.Message{ID: "r", Topic: "u", Replace: true}, "r", nil, at(5*time.Second)), "which is leased")
	refused(t, m.Put(queue.Message{ID: "r", Topic: "u", Replace: true}, "", &queue.DuplicateError{ID: "r", DeliverAt: t0.Add(4 * time.Second)}, at(5*time.Second)),
		"refused as a duplicate")
	must(t, m.Put(queue.Message{ID: "r", Topic: "u", Replace: true}, "", leasedErr, at(5*time.Second)))
	must(t, m.Ack([]string{"r2"}, nil, at(6*time.Second))) // still its lease
	// A batch does not replace, but a batch of one may.
	batch := []queue.Message{{ID: "r", Topic: "u", Replace: true}, {ID: "s", Topic: "u"}}
	refused(t, m.PutBatch(batch, []string{"r", "s"}, nil, at(7*time.Second)), "only a message put alone replaces")
	must(t, m.PutBatch(batch, nil, queue.ErrInvalid, at(7*time.Second)))
	must(t, m.PutBatch(batch[:1], nil, queue.ErrInvalid, at(7*time.Second)))
	must(t, m.PutBatch(batch[:1], []string{"r"}, nil, at(7*time.Second)))
	must(t, m.CheckTopics([]queue.TopicInfo{{Topic: "u", Due: 1}}, at(7*time.Second)))
}

func TestModelReplaceAfterTheLease(t *testing.T) {
	// Once the lease may have run out, either answer holds; each is followed.
	for _, replaced := range []bool{true, false} {
		m := NewModel(0, 0)
		must(t, m.Put(queue.Message{ID: "r", Topic: "t"}, "r", nil, at(0)))
		must(t, m.Receive("t", 1, time.Second, []queue.Delivery{delivery("r", "t", "r1", 1, 0)}, nil, at(0)))
		if !replaced {
			must(t, m.Put(queue.Message{ID: "r", Topic: "t", Replace: true}, "", &queue.DuplicateError{ID: "r", Leased: true}, at(2*time.Second)))
			// Still possibly leased or due again: the lease's Ack may succeed.
			must(t, m.Ack([]string{"r1"}, nil, at(2*time.Second)))
			continue
		}
		must(t, m.Put(queue.Message{ID: "r", Topic: "t", Payload: []byte("new"), Replace: true}, "r", nil, at(2*time.Second)))
		// The old lease's receipt acks nothing that matters; the new message waits, attempt 1.
		must(t, m.CheckTopics([]queue.TopicInfo{{Topic: "t", Due: 1}}, at(2*time.Second)))
		refused(t, m.CheckTopics([]queue.TopicInfo{{Topic: "t", Leased: 1}}, at(2*time.Second)), "has 0 due")
		refused(t, m.Receive("t", 1, time.Second, []queue.Delivery{delivery("r", "t", "r2", 2, 2*time.Second)}, nil, at(2*time.Second)), "attempt 2")
		must(t, m.Receive("t", 1, time.Second, []queue.Delivery{delivery("r", "t", "r2", 1, 2*time.Second)}, nil, at(2*time.Second)))
	}
}
