package delayq_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/tockwheel/tock/delayq"
	"github.com/tockwheel/tock/queue"
)

func Example() {
	dir, err := os.MkdirTemp("", "delayq-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	q, err := delayq.Open(dir)
	if err != nil {
		log.Fatal(err)
	}
	defer q.Close()
	ctx := context.Background()

	// Durable when Put returns; delivered 50ms from now, never before.
	_, err = q.Put(ctx, delayq.Message{Topic: "email", Payload: []byte("welcome"), DeliverAt: time.Now().Add(50 * time.Millisecond)})
	if err != nil {
		log.Fatal(err)
	}
	ds, err := q.Receive(ctx, "email", 10, 30*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	for _, d := range ds {
		fmt.Printf("%s (attempt %d)\n", d.Payload, d.Attempt)
		if err := q.Ack(ctx, d.Receipt); err != nil {
			log.Fatal(err)
		}
	}
	// Output: welcome (attempt 1)
}

func ExampleQueue_Cancel() {
	dir, _ := os.MkdirTemp("", "delayq-example")
	defer os.RemoveAll(dir)
	q, err := delayq.Open(dir)
	if err != nil {
		log.Fatal(err)
	}
	defer q.Close()
	ctx := context.Background()

	id, _ := q.Put(ctx, delayq.Message{Topic: "reminders", DeliverAt: time.Now().Add(24 * time.Hour)})
	ok, _ := q.Cancel(ctx, id)
	again, _ := q.Cancel(ctx, id)
	fmt.Println(ok, again)
	// Output: true false
}

// A chosen ID works as an idempotency key: a retried Put of the same message stores nothing new,
// a different message with the ID of a pending one is refused.
func ExampleQueue_Put_chosenID() {
	dir, _ := os.MkdirTemp("", "delayq-example")
	defer os.RemoveAll(dir)
	q, err := delayq.Open(dir)
	if err != nil {
		log.Fatal(err)
	}
	defer q.Close()
	ctx := context.Background()

	at := time.Now().Add(time.Hour)
	m := delayq.Message{ID: "invoice-7", Topic: "billing", Payload: []byte("send"), DeliverAt: at}
	id, _ := q.Put(ctx, m)
	again, _ := q.Put(ctx, m) // a retry: the same message
	_, err = q.Put(ctx, delayq.Message{ID: "invoice-7", Topic: "billing", Payload: []byte("other")})
	var dup *delayq.DuplicateError
	fmt.Println(id, again, q.Snapshot().Pending, errors.As(err, &dup) && dup.DeliverAt.Equal(at))
	// Output: invoice-7 invoice-7 1 true
}

// An operator's view: the topics with their counts, and a topic's scheduled messages a page at a
// time, without consuming them.
func ExampleQueue_Messages() {
	dir, _ := os.MkdirTemp("", "delayq-example")
	defer os.RemoveAll(dir)
	q, err := delayq.Open(dir)
	if err != nil {
		log.Fatal(err)
	}
	defer q.Close()
	ctx := context.Background()

	start := time.Now().Add(time.Hour)
	for i := range 5 {
		q.Put(ctx, delayq.Message{Topic: "reports", Payload: fmt.Appendf(nil, "report %d", i), DeliverAt: start.Add(time.Duration(i) * time.Minute)})
	}
	topics, _ := q.Topics(ctx)
	for _, t := range topics {
		fmt.Printf("%s: %d scheduled, %d due\n", t.Topic, t.Scheduled, t.Due)
	}
	cursor := ""
	for {
		page, next, err := q.Messages(ctx, "reports", queue.Scheduled, cursor, 2)
		if err != nil {
			log.Fatal(err)
		}
		for _, m := range page {
			fmt.Printf("%s, due %v after the first\n", m.Payload, m.DeliverAt.Sub(start))
		}
		if next == "" {
			break
		}
		cursor = next
	}
	// Output:
	// reports: 5 scheduled, 0 due
	// report 0, due 0s after the first
	// report 1, due 1m0s after the first
	// report 2, due 2m0s after the first
	// report 3, due 3m0s after the first
	// report 4, due 4m0s after the first
}

// Pausing a topic holds its deliveries, across restarts, until it is resumed; its messages go on
// falling due meanwhile.
func ExampleQueue_Pause() {
	dir, _ := os.MkdirTemp("", "delayq-example")
	defer os.RemoveAll(dir)
	q, err := delayq.Open(dir)
	if err != nil {
		log.Fatal(err)
	}
	defer q.Close()
	ctx := context.Background()

	q.Pause(ctx, "webhooks") // the downstream is down
	q.Put(ctx, delayq.Message{Topic: "webhooks", Payload: []byte("event")})
	wait, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	_, err = q.Receive(wait, "webhooks", 10, time.Minute)
	cancel()
	fmt.Println("while paused:", errors.Is(err, context.DeadlineExceeded))

	q.Resume(ctx, "webhooks")
	ds, _ := q.Receive(ctx, "webhooks", 10, time.Minute)
	fmt.Printf("after Resume: %s\n", ds[0].Payload)
	// Output:
	// while paused: true
	// after Resume: event
}

// Dead letters wait on their dead-letter topic, listed under the topic they died on with why their
// last delivery failed; Requeue sends them back, their attempts counted from zero.
func ExampleQueue_Requeue() {
	dir, _ := os.MkdirTemp("", "delayq-example")
	defer os.RemoveAll(dir)
	q, err := delayq.Open(dir, delayq.WithMaxAttempts(1))
	if err != nil {
		log.Fatal(err)
	}
	defer q.Close()
	ctx := context.Background()

	q.Put(ctx, delayq.Message{ID: "charge-42", Topic: "payments"})
	ds, _ := q.Receive(ctx, "payments", 1, time.Minute)
	q.Nack(ctx, ds[0].Receipt, 0) // its only attempt failed: a dead letter

	dead, _, _ := q.Messages(ctx, "payments", queue.Dead, "", 10)
	fmt.Println(dead[0].ID, dead[0].LastFailure)
	n, _ := q.Requeue(ctx, "payments")
	ds, _ = q.Receive(ctx, "payments", 1, time.Minute)
	fmt.Println(n, ds[0].ID, ds[0].Attempt)
	// Output:
	// charge-42 nacked
	// 1 charge-42 1
}
