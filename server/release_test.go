package server

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tockwheel/tock"
	"github.com/tockwheel/tock/delayq"
	"github.com/tockwheel/tock/queue"
)

// leasesAfterHangUp is the delayq engine with Receive made to lose the race the server cannot
// win by itself: it leases what is due only once the request's context has ended, as a
// Receive that was handing messages over when its client hung up does. It reports each Nack.
type leasesAfterHangUp struct {
	queue.Engine
	nacked chan string
}

func (e leasesAfterHangUp) Receive(ctx context.Context, topic string, max int, visibility time.Duration) ([]queue.Delivery, error) {
	<-ctx.Done()
	return e.Engine.Receive(context.Background(), topic, max, visibility)
}

func (e leasesAfterHangUp) Nack(ctx context.Context, receipt string, delay time.Duration, opts ...queue.NackOption) error {
	err := e.Engine.Nack(ctx, receipt, delay, opts...)
	e.nacked <- receipt
	return err
}

// TestDeliveriesOfAGoneClientAreDueAgain is the regression test of a long poll whose client
// went away as the engine leased messages for it: the answer went nowhere and the messages
// waited out their visibility timeout (a minute here) with no consumer holding them. The server
// now nacks them, due again at once, with the attempt counted.
func TestDeliveriesOfAGoneClientAreDueAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q, err := delayq.Open(t.TempDir(), delayq.WithNoSync())
		if err != nil {
			t.Fatal(err)
		}
		defer q.Close()
		w := tock.New()
		defer w.Stop()
		e := leasesAfterHangUp{q, make(chan string, 10)}
		s := New(e, WithWheel(w), WithLogger(slog.New(slog.DiscardHandler)))
		ctx := context.Background()
		id, err := q.Put(ctx, queue.Message{Topic: "t", Payload: []byte(`"hello"`)})
		if err != nil {
			t.Fatal(err)
		}

		// The client hangs up 200 ms into a long poll of 10 s: its request's context ends, as
		// net/http ends it when the connection closes.
		rctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		req := httptest.NewRequestWithContext(rctx, "POST", "/v1/topics/t/receive",
			strings.NewReader(`{"max":10,"visibility":"1m","wait":"10s"}`))
		req.Header.Set("Content-Type", "application/json")
		s.ServeHTTP(httptest.NewRecorder(), req)
		if rctx.Err() == nil {
			t.Fatal("the long poll was answered before its client hung up")
		}

		synctest.Wait() // the server is done with the request: nacked, or never will
		select {
		case <-e.nacked:
		default:
			t.Fatal("the server kept the message leased for its gone client: no Nack")
		}
		ds, err := q.Receive(ctx, "t", 10, time.Minute)
		if err != nil {
			t.Fatalf("the message leased for the gone client is not due again: %v", err)
		}
		if len(ds) != 1 || ds[0].ID != id || ds[0].Attempt != 2 {
			t.Fatalf("delivered %+v; want %s, attempt 2", ds, id)
		}
	})
}
