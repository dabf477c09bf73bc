package redisq_test

import (
	"context"
	"log"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tockwheel/tock/queue"
	"github.com/tockwheel/tock/redisq"
)

// A producer and a consumer of one deployment on a Redis Cluster. (Examples that need a Redis
// server are compiled, not run.)
func Example() {
	ctx := context.Background()
	rdb := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs: []string{"10.0.0.1:6379", "10.0.0.2:6379", "10.0.0.3:6379"},
		// Notice a failover within a couple of seconds, not go-redis's default minute.
		ClusterStateReloadInterval: 2 * time.Second,
	})
	q, err := redisq.Open(ctx, rdb, redisq.WithPrefix("billing"))
	if err != nil {
		log.Fatal(err)
	}
	defer q.Close()

	// Remind the customer in an hour, unless the reminder is cancelled first.
	id, err := q.Put(ctx, queue.Message{ID: "remind:order-42", Topic: "email", Payload: []byte("order 42"),
		DeliverAt: time.Now().Add(time.Hour)})
	if err != nil {
		log.Fatal(err)
	}
	log.Println("scheduled", id)

	for {
		ds, err := q.Receive(ctx, "email", 32, 30*time.Second)
		if err != nil {
			log.Fatal(err)
		}
		for _, d := range ds {
			log.Printf("sending %s (attempt %d)", d.Payload, d.Attempt)
			if err := q.Ack(ctx, d.Receipt); err != nil {
				log.Print(err)
			}
		}
	}
}

// Cancel a message by its ID before it is due.
func ExampleQueue_Cancel() {
	ctx := context.Background()
	q, err := redisq.Open(ctx, redis.NewClient(&redis.Options{Addr: "localhost:6379"}))
	if err != nil {
		log.Fatal(err)
	}
	defer q.Close()
	cancelled, err := q.Cancel(ctx, "remind:order-42")
	if err != nil {
		log.Fatal(err)
	}
	log.Println("cancelled:", cancelled)
}

// Put several messages, all or none.
func ExampleQueue_PutBatch() {
	ctx := context.Background()
	q, err := redisq.Open(ctx, redis.NewClient(&redis.Options{Addr: "localhost:6379"}))
	if err != nil {
		log.Fatal(err)
	}
	defer q.Close()
	now := time.Now()
	ids, err := q.PutBatch(ctx, []queue.Message{
		{Topic: "email", Payload: []byte("day 1"), DeliverAt: now.Add(24 * time.Hour)},
		{Topic: "email", Payload: []byte("day 7"), DeliverAt: now.Add(7 * 24 * time.Hour)},
	})
	if err != nil {
		log.Fatal(err)
	}
	log.Println(ids)
}
