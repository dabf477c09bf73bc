package delayq_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/tockwheel/tock/delayq"
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
