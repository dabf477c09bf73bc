package delayq

import (
	"context"
	"testing"
	"testing/synctest"
	"time"
)

func open(t testing.TB, dir string, opts ...Option) *Queue {
	t.Helper()
	q, err := Open(dir, opts...)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { q.Close() })
	return q
}

func TestPutReceiveAck(t *testing.T) {
	dir := t.TempDir()
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		q := open(t, dir)
		start := time.Now()
		id, err := q.Put(ctx, Message{Topic: "t", Payload: []byte("hello"), DeliverAt: start.Add(90 * time.Minute)})
		if err != nil {
			t.Fatal(err)
		}
		ds, err := q.Receive(ctx, "t", 10, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if len(ds) != 1 || ds[0].ID != id || string(ds[0].Payload) != "hello" || ds[0].Attempt != 1 {
			t.Fatalf("got %+v", ds)
		}
		if now := time.Now(); now.Before(ds[0].DeliverAt) || now.Sub(ds[0].DeliverAt) > 2*time.Millisecond {
			t.Fatalf("delivered at %v for %v", now, ds[0].DeliverAt)
		}
		if err := q.Ack(ctx, ds[0].Receipt); err != nil {
			t.Fatal(err)
		}
		if err := q.Ack(ctx, ds[0].Receipt); err != nil {
			t.Fatalf("a retried ack: %v", err)
		}
		if err := q.Close(); err != nil {
			t.Fatal(err)
		}
	})
}

func TestReopenDeliversPending(t *testing.T) {
	dir := t.TempDir()
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		q := open(t, dir, WithHorizon(time.Minute))
		start := time.Now()
		want := map[string]time.Time{}
		for i, d := range []time.Duration{0, time.Second, 30 * time.Second, 5 * time.Minute, 3 * time.Hour} {
			at := start.Add(d + time.Duration(i)*time.Millisecond)
			id, err := q.Put(ctx, Message{Topic: "t", DeliverAt: at})
			if err != nil {
				t.Fatal(err)
			}
			want[id] = at
		}
		cancelID, err := q.Put(ctx, Message{Topic: "t", DeliverAt: start.Add(2 * time.Hour)})
		if err != nil {
			t.Fatal(err)
		}
		if ok, err := q.Cancel(ctx, cancelID); !ok || err != nil {
			t.Fatalf("Cancel = %v, %v", ok, err)
		}
		if ok, err := q.Cancel(ctx, cancelID); ok || err != nil {
			t.Fatalf("second Cancel = %v, %v", ok, err)
		}
		check(t, q)
		if err := q.Close(); err != nil {
			t.Fatal(err)
		}
		q = open(t, dir)
		check(t, q)
		defer q.Close()
		for len(want) > 0 {
			ds, err := q.Receive(ctx, "t", 10, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range ds {
				at, ok := want[d.ID]
				if !ok {
					t.Fatalf("unexpected delivery %s", d.ID)
				}
				if time.Now().Before(at) {
					t.Fatalf("%s early: %v < %v", d.ID, time.Now(), at)
				}
				delete(want, d.ID)
				if err := q.Ack(ctx, d.Receipt); err != nil {
					t.Fatal(err)
				}
			}
		}
		ctx2, cancel := context.WithTimeout(ctx, 4*time.Hour)
		defer cancel()
		if ds, err := q.Receive(ctx2, "t", 10, time.Minute); err == nil {
			t.Fatalf("cancelled message delivered: %+v", ds)
		}
	})
}
