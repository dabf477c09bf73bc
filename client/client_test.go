package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tockwheel/tock/client"
	"github.com/tockwheel/tock/delayq"
	"github.com/tockwheel/tock/server"
)

// flaky answers 503 to the first n requests, then 200 with body.
func flaky(n int32, body string) (*httptest.Server, *atomic.Int32) {
	var calls atomic.Int32
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) <= n {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprint(w, `{"error":"shutting down"}`)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, body)
	}))
	return ts, &calls
}

func TestRetriesIdempotentCalls(t *testing.T) {
	ts, calls := flaky(2, `{"scheduled":7}`)
	defer ts.Close()
	c, err := client.New(ts.URL, client.WithRetries(3, time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	st, err := c.Stats(context.Background())
	if err != nil || st.Scheduled != 7 || calls.Load() != 3 {
		t.Fatalf("stats after two 503s: %+v, %v, %d calls; want scheduled 7 after 3 calls", st, err, calls.Load())
	}
}

func TestDoesNotRetryPuts(t *testing.T) {
	ts, calls := flaky(1, `{"id":"x"}`)
	defer ts.Close()
	c, _ := client.New(ts.URL, client.WithRetries(3, time.Millisecond))
	_, err := c.Put(context.Background(), "t", client.Message{})
	var ce *client.Error
	if !errors.As(err, &ce) || !errors.Is(err, client.ErrUnavailable) || ce.Message != "shutting down" || calls.Load() != 1 {
		t.Fatalf("put on 503: %v (%d calls); want one call and ErrUnavailable with the server's message", err, calls.Load())
	}
}

func TestRetriesGiveUp(t *testing.T) {
	ts, calls := flaky(100, ``)
	defer ts.Close()
	c, _ := client.New(ts.URL, client.WithRetries(2, time.Millisecond))
	if err := c.Ready(context.Background()); !errors.Is(err, client.ErrUnavailable) || calls.Load() != 3 {
		t.Fatalf("ready: %v after %d calls; want ErrUnavailable after 3", err, calls.Load())
	}
	// A context that ends stops the retries.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := c.Cancel(ctx, "x"); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancel with a done context: %v", err)
	}
}

func TestNewRejectsBadURLs(t *testing.T) {
	for _, u := range []string{"", "127.0.0.1:7070", "ftp://x", "http://", "://"} {
		if _, err := client.New(u); err == nil {
			t.Errorf("New(%q) succeeded", u)
		}
	}
}

func TestMessageValidation(t *testing.T) {
	c, _ := client.New("http://127.0.0.1:1")
	ctx := context.Background()
	if _, err := c.Put(ctx, "t", client.Message{Delay: time.Second, DeliverAt: time.Now()}); err == nil {
		t.Error("both Delay and DeliverAt accepted")
	}
	if _, err := c.Put(ctx, "t", client.Message{Delay: -time.Second}); err == nil {
		t.Error("negative Delay accepted")
	}
}

func TestErrorsMatchSentinels(t *testing.T) {
	for code, want := range map[int]error{400: client.ErrBadRequest, 401: client.ErrUnauthorized, 404: client.ErrNotFound,
		413: client.ErrTooLarge, 503: client.ErrUnavailable, 500: client.ErrServer} {
		err := error(&client.Error{StatusCode: code, Message: "m"})
		if !errors.Is(err, want) {
			t.Errorf("%d does not match %v", code, want)
		}
		if code != 500 && code != 503 && errors.Is(err, client.ErrServer) {
			t.Errorf("%d matches ErrServer", code)
		}
	}
}

func Example() {
	// A server over a queue in a temporary directory; in real use, run
	// tockd and pass its URL.
	dir, _ := os.MkdirTemp("", "tock-example-")
	defer os.RemoveAll(dir)
	q, err := delayq.Open(dir)
	if err != nil {
		panic(err)
	}
	defer q.Close()
	ts := httptest.NewServer(server.New(q))
	defer ts.Close()

	c, err := client.New(ts.URL)
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	res, err := c.Put(ctx, "emails", client.Message{
		ID:      "welcome-42",
		Payload: json.RawMessage(`{"to":"ada@example.com"}`),
		Delay:   50 * time.Millisecond,
	})
	if err != nil {
		panic(err)
	}
	fmt.Println("scheduled", res.ID)

	ds, err := c.Receive(ctx, "emails", client.ReceiveOptions{Wait: 5 * time.Second})
	if err != nil {
		panic(err)
	}
	for _, d := range ds {
		fmt.Printf("deliver %s %s (attempt %d, on time: %v)\n", d.ID, d.Payload, d.Attempt, !time.Now().Before(d.DeliverAt))
		if err := c.Ack(ctx, d.Receipt); err != nil {
			panic(err)
		}
	}
	// Output:
	// scheduled welcome-42
	// deliver welcome-42 {"to":"ada@example.com"} (attempt 1, on time: true)
}

// TestDefaultTransportKeepsItsConnections checks that a Client made
// without WithHTTPClient keeps the connections of concurrent calls for the
// next ones: net/http's default transport keeps 2 and dials the others
// again, which cost a receive of 100 messages a tenth of its CPU.
func TestDefaultTransportKeepsItsConnections(t *testing.T) {
	const calls = 16
	var conns atomic.Int32
	var arrived sync.WaitGroup
	ts := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived.Done()
		arrived.Wait() // every call of the round is in flight at once
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"status":"ok"}`)
	}))
	ts.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	ts.Start()
	defer ts.Close()
	c, err := client.New(ts.URL)
	if err != nil {
		t.Fatal(err)
	}
	for round := range 3 {
		arrived.Add(calls)
		var wg sync.WaitGroup
		for range calls {
			wg.Go(func() {
				if err := c.Healthy(context.Background()); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		if n := conns.Load(); n != calls {
			t.Fatalf("after round %d of %d concurrent calls: %d connections opened; want %d, kept for the next rounds", round+1, calls, n, calls)
		}
	}
}
