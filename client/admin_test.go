package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"os"
	"testing"
	"time"

	"github.com/tockwheel/tock/api"
	"github.com/tockwheel/tock/client"
	"github.com/tockwheel/tock/delayq"
	"github.com/tockwheel/tock/internal/contract"
	"github.com/tockwheel/tock/queue"
	"github.com/tockwheel/tock/server"
)

// newAdminClient returns a client of a server over a delayq queue on which a message dies at its
// first failed delivery, and the queue.
func newAdminClient(t *testing.T, engine func(*delayq.Queue) queue.Engine) *client.Client {
	t.Helper()
	q, err := delayq.Open(t.TempDir(), delayq.WithNoSync(), delayq.WithMaxAttempts(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })
	var e queue.Engine = q
	if engine != nil {
		e = engine(q)
	}
	ts := httptest.NewServer(contract.Handler(t, server.New(e, server.WithLogger(slog.New(slog.DiscardHandler)))))
	t.Cleanup(ts.Close)
	c, err := client.New(ts.URL, client.WithRetries(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// kill puts a message with id on topic and fails its one delivery, so that it dies.
func kill(t *testing.T, c *client.Client, topic, id string) {
	t.Helper()
	ctx := context.Background()
	if _, err := c.Put(ctx, topic, client.Message{ID: id, Payload: json.RawMessage(`"` + id + `"`)}); err != nil {
		t.Fatal(err)
	}
	ds, err := c.Receive(ctx, topic, client.ReceiveOptions{Max: 1, Wait: time.Second})
	if err != nil || len(ds) != 1 {
		t.Fatalf("receive of %s: %v, %v", id, ds, err)
	}
	if err := c.Nack(ctx, ds[0].Receipt, 0); err != nil {
		t.Fatal(err)
	}
}

func TestAdminCalls(t *testing.T) {
	c := newAdminClient(t, nil)
	ctx := context.Background()
	for i := range 7 {
		if _, err := c.Put(ctx, "jobs", client.Message{ID: fmt.Sprintf("s%d", i), Delay: time.Duration(i+1) * time.Hour}); err != nil {
			t.Fatal(err)
		}
	}
	kill(t, c, "jobs", "d1")
	kill(t, c, "jobs", "d2")
	kill(t, c, "jobs", "d3")

	ts, err := c.Topics(ctx)
	if err != nil || len(ts) != 2 || ts[0].Topic != "jobs" || ts[0].Scheduled != 7 || ts[0].Dead != 3 {
		t.Fatalf("Topics: %+v, %v; want jobs with 7 scheduled and 3 dead, then jobs.dead", ts, err)
	}

	page, next, err := c.Messages(ctx, "jobs", queue.Scheduled, "", 3)
	if err != nil || len(page) != 3 || next == "" || page[0].ID != "s0" {
		t.Fatalf("first page: %+v, %q, %v", page, next, err)
	}
	var ids []string
	for m, err := range c.AllMessages(ctx, "jobs", queue.Scheduled, 3) {
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, m.ID)
	}
	if fmt.Sprint(ids) != "[s0 s1 s2 s3 s4 s5 s6]" {
		t.Fatalf("AllMessages: %v", ids)
	}
	for m, err := range c.AllMessages(ctx, "jobs", "nothing", 3) {
		if !errors.Is(err, queue.ErrInvalid) || m.ID != "" {
			t.Fatalf("AllMessages of a bad state: %+v, %v; want an ErrInvalid", m, err)
		}
	}
	if _, _, err := c.Messages(ctx, "jobs", queue.Scheduled, "", api.MaxPage+1); !errors.Is(err, queue.ErrInvalid) {
		t.Fatalf("Messages over MaxPage: %v; want ErrInvalid", err)
	}

	m, err := c.Message(ctx, "d1")
	if err != nil || m.State != "dead" || string(m.Payload) != `"d1"` || m.LastFailure == "" {
		t.Fatalf("Message(d1): %+v, %v", m, err)
	}
	if _, err := c.Message(ctx, "nothing"); !errors.Is(err, queue.ErrNotFound) || !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("Message of none: %v; want ErrNotFound", err)
	}

	if ok, err := c.DeliverNow(ctx, "s6"); !ok || err != nil {
		t.Fatalf("DeliverNow(s6): %v, %v", ok, err)
	}
	if ok, err := c.DeliverNow(ctx, "s6"); ok || err != nil {
		t.Fatalf("DeliverNow(s6) again: %v, %v; want false, nil", ok, err)
	}

	if _, err := c.Requeue(ctx, "jobs"); !errors.Is(err, queue.ErrInvalid) {
		t.Fatalf("Requeue of no IDs: %v; want ErrInvalid", err)
	}
	if n, err := c.Requeue(ctx, "jobs", "d1", "s0"); n != 1 || err != nil {
		t.Fatalf("Requeue(d1, s0): %d, %v; want 1", n, err)
	}
	if n, err := c.RequeueAll(ctx, "jobs"); n != 2 || err != nil {
		t.Fatalf("RequeueAll: %d, %v; want 2", n, err)
	}
	if n, err := c.Purge(ctx, "jobs", queue.Scheduled); n != 6 || err != nil {
		t.Fatalf("Purge scheduled: %d, %v; want 6", n, err)
	}
	if _, err := c.Purge(ctx, "jobs", queue.Leased); !errors.Is(err, queue.ErrInvalid) {
		t.Fatalf("Purge leased: %v; want ErrInvalid", err)
	}

	if err := c.Pause(ctx, "jobs"); err != nil {
		t.Fatal(err)
	}
	if ds, err := c.Receive(ctx, "jobs", client.ReceiveOptions{Max: 10}); len(ds) != 0 || err != nil {
		t.Fatalf("Receive on a paused topic: %v, %v", ds, err)
	}
	if err := c.Resume(ctx, "jobs"); err != nil {
		t.Fatal(err)
	}
	if ds, err := c.Receive(ctx, "jobs", client.ReceiveOptions{Max: 10, Wait: time.Second}); len(ds) != 4 || err != nil {
		t.Fatalf("Receive after Resume: %d, %v; want s6, d1, d2, d3", len(ds), err)
	}
}

// plain hides that the engine is a queue.Admin.
type plain struct{ queue.Engine }

func TestAdminCallsOfAPlainEngine(t *testing.T) {
	c := newAdminClient(t, func(q *delayq.Queue) queue.Engine { return plain{q} })
	_, err := c.Topics(context.Background())
	var e *client.Error
	if !errors.As(err, &e) || e.StatusCode != 501 || e.Code != api.CodeNotImplemented || !errors.Is(err, client.ErrServer) {
		t.Fatalf("Topics of a plain engine: %v; want a 501 not_implemented", err)
	}
}

func ExampleClient_AllMessages() {
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
	for i, to := range []string{"ada", "bob", "cy"} {
		payload := json.RawMessage(fmt.Sprintf(`{"to":%q}`, to))
		if _, err := c.Put(ctx, "emails", client.Message{Payload: payload, Delay: time.Duration(i+1) * time.Hour}); err != nil {
			panic(err)
		}
	}

	// Walk the scheduled messages, two a page, without consuming them.
	for m, err := range c.AllMessages(ctx, "emails", queue.Scheduled, 2) {
		if err != nil {
			panic(err)
		}
		fmt.Println(m.State, m.Preview)
	}
	// Output:
	// scheduled {"to":"ada"}
	// scheduled {"to":"bob"}
	// scheduled {"to":"cy"}
}

func ExampleClient_RequeueAll() {
	dir, _ := os.MkdirTemp("", "tock-example-")
	defer os.RemoveAll(dir)
	q, err := delayq.Open(dir, delayq.WithMaxAttempts(1))
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
	if _, err := c.Put(ctx, "emails", client.Message{ID: "welcome-42"}); err != nil {
		panic(err)
	}
	ds, err := c.Receive(ctx, "emails", client.ReceiveOptions{Wait: time.Second})
	if err != nil {
		panic(err)
	}
	_ = c.Nack(ctx, ds[0].Receipt, 0) // the one attempt failed: a dead letter

	dead, _, err := c.Messages(ctx, "emails", queue.Dead, "", 0)
	if err != nil {
		panic(err)
	}
	fmt.Println("dead:", dead[0].ID, dead[0].LastFailure)
	n, err := c.RequeueAll(ctx, "emails")
	if err != nil {
		panic(err)
	}
	fmt.Println("requeued", n)
	// Output:
	// dead: welcome-42 nacked
	// requeued 1
}
