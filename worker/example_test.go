package worker_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tockwheel/tock/delayq"
	"github.com/tockwheel/tock/queue"
	"github.com/tockwheel/tock/worker"
)

// A Worker on an embedded queue: handlers for a topic, a failure for good, and a graceful stop.
// The same code runs on redisq, or on a tockd server through client.Client.Engine.
func Example() {
	dir, _ := os.MkdirTemp("", "worker-example")
	defer os.RemoveAll(dir)
	q, err := delayq.Open(dir)
	if err != nil {
		panic(err)
	}
	defer q.Close()

	reg := prometheus.NewRegistry() // your program's registry, such as prometheus.DefaultRegisterer
	w := worker.New(q, worker.WithConcurrency(8), worker.WithVisibility(time.Minute), worker.WithRegisterer(reg))
	done := make(chan string, 2)
	w.HandleFunc("email", func(ctx context.Context, d queue.Delivery) error {
		if len(d.Payload) == 0 {
			done <- "dead-lettered " + d.ID
			return worker.Permanent(errors.New("no address")) // to email.dead at once
		}
		done <- fmt.Sprintf("sent to %s", d.Payload) // a handler may take longer than a minute: its lease is extended
		return nil                                   // acked
	})

	ctx, stop := context.WithCancel(context.Background())
	stopped := make(chan error)
	go func() { stopped <- w.Run(ctx) }()

	q.Put(ctx, queue.Message{ID: "welcome-1", Topic: "email", Payload: []byte("ada@example.com")})
	q.Put(ctx, queue.Message{ID: "welcome-2", Topic: "email"})
	fmt.Println(<-done)
	fmt.Println(<-done)
	stop() // running handlers finish (up to WithShutdownTimeout), then Run returns
	fmt.Println("Run:", <-stopped)
	// Unordered output:
	// sent to ada@example.com
	// dead-lettered welcome-2
	// Run: <nil>
}
