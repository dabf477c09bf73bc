package server

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"testing"
	"time"

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
	q, err := delayq.Open(t.TempDir(), delayq.WithNoSync())
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	e := leasesAfterHangUp{q, make(chan string, 10)}
	ts := newHTTPTestServer(t, New(e, WithLogger(slog.New(slog.DiscardHandler))))
	ctx := context.Background()
	id, err := q.Put(ctx, queue.Message{Topic: "t", Payload: []byte(`"hello"`)})
	if err != nil {
		t.Fatal(err)
	}

	rctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, "POST", ts.URL+"/v1/topics/t/receive",
		bytes.NewReader([]byte(`{"max":10,"visibility":"1m","wait":"10s"}`)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("the long poll answered %d; want the client's own timeout", resp.StatusCode)
	}

	// No time is promised: a minute bounds a server that never nacks, however loaded the machine.
	select {
	case <-e.nacked:
	case <-time.After(time.Minute):
		t.Fatal("the server kept the message leased for its gone client: no Nack in a minute")
	}
	wctx, wcancel := context.WithTimeout(ctx, time.Minute)
	defer wcancel()
	ds, err := q.Receive(wctx, "t", 10, time.Minute)
	if err != nil {
		t.Fatalf("the message leased for the gone client is not due again: %v", err)
	}
	if len(ds) != 1 || ds[0].ID != id || ds[0].Attempt != 2 {
		t.Fatalf("delivered %+v; want %s, attempt 2", ds, id)
	}
}
