package delayq_test

import (
	"context"
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
