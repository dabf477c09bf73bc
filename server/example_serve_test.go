package server_test

import (
	"context"
	"log"
	"net"
	"os"
	"os/signal"
	"time"

	"github.com/tockwheel/tock/delayq"
	"github.com/tockwheel/tock/server"
)

// A program that embeds the server serves it as tockd does: with Serve,
// which caps and times its connections, and Shutdown on a signal.
func ExampleServer_Serve() {
	q, err := delayq.Open("./tock-data")
	if err != nil {
		log.Fatal(err)
	}
	defer q.Close() // after Shutdown: no request uses the queue any more
	s := server.New(q, server.WithConnLimits(server.ConnLimits{MaxConns: 1000, HeaderTimeout: 5 * time.Second}))
	ln, err := net.Listen("tcp", "127.0.0.1:7070")
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	shutdown := make(chan struct{})
	go func() {
		defer close(shutdown)
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := s.Shutdown(sctx); err != nil {
			log.Print(err)
		}
	}()
	if err := s.Serve(ln); err != nil && ctx.Err() == nil {
		log.Fatal(err)
	}
	<-shutdown // Serve returns as Shutdown begins; the requests in flight end with it
}
