package client_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tockwheel/tock"
	"github.com/tockwheel/tock/api"
	"github.com/tockwheel/tock/client"
	"github.com/tockwheel/tock/delayq"
	"github.com/tockwheel/tock/internal/contract"
	"github.com/tockwheel/tock/queue"
	"github.com/tockwheel/tock/server"
)

// A gate serves requests through a handler, holding each request while it
// is closed, and records what each asked for: the path and, for a batch or
// an ack, how many messages or receipts it carried.
type gate struct {
	h http.Handler

	mu       sync.Mutex
	held     chan struct{} // non-nil while closed: requests wait for it
	requests []string
}

func (g *gate) RoundTrip(req *http.Request) (*http.Response, error) {
	var body []byte
	if req.Body != nil {
		body, _ = io.ReadAll(req.Body)
		req.Body = io.NopCloser(bytes.NewReader(body))
	}
	what := req.URL.Path
	var b struct {
		Messages []json.RawMessage `json:"messages"`
		Receipts []string          `json:"receipts"`
	}
	if json.Unmarshal(body, &b) == nil && (b.Messages != nil || b.Receipts != nil) {
		what += fmt.Sprintf(" %d", len(b.Messages)+len(b.Receipts))
	}
	g.mu.Lock()
	g.requests = append(g.requests, what)
	held := g.held
	g.mu.Unlock()
	if held != nil {
		<-held
	}
	return cutTransport{g.h}.RoundTrip(req)
}

// cutTransport is a handlerTransport whose handler may cut the connection
// by panicking with a cutConnection.
type cutTransport struct{ h http.Handler }

func (t cutTransport) RoundTrip(req *http.Request) (resp *http.Response, err error) {
	defer func() {
		if v := recover(); v != nil {
			cut, ok := v.(cutConnection)
			if !ok {
				panic(v)
			}
			resp, err = nil, cut.err
		}
	}()
	return handlerTransport{t.h}.RoundTrip(req)
}

// close makes the next requests wait until open.
func (g *gate) close() {
	g.mu.Lock()
	g.held = make(chan struct{})
	g.mu.Unlock()
}

// next lets the requests held so far go, and holds the later ones.
func (g *gate) next() {
	g.mu.Lock()
	close(g.held)
	g.held = make(chan struct{})
	g.mu.Unlock()
}

func (g *gate) open() {
	g.mu.Lock()
	close(g.held)
	g.held = nil
	g.mu.Unlock()
}

// sent returns the requests made so far and forgets them.
func (g *gate) sent() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	r := g.requests
	g.requests = nil
	return r
}

// coalescing returns a client of a real server over q, through a gate,
// coalescing with one request in flight.
func coalescing(t *testing.T, q queue.Engine, opts ...server.Option) (*client.Client, *gate) {
	w := tock.New()
	t.Cleanup(func() { w.Stop() })
	g := &gate{h: contract.Handler(t, server.New(q, append([]server.Option{server.WithWheel(w)}, opts...)...))}
	c, err := client.New("http://tockd.test", client.WithHTTPClient(&http.Client{Transport: g}), client.WithCoalescing(1))
	if err != nil {
		t.Fatal(err)
	}
	return c, g
}

func openQueue(t *testing.T) *delayq.Queue {
	q, err := delayq.Open(t.TempDir(), delayq.WithNoSync())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })
	return q
}

// A putOutcome is what one Put returned.
type putOutcome struct {
	res client.PutResult
	err error
}

// putWhileHeld makes one Put that the gate holds, then the Puts of ms
// concurrently while it is held, and returns the outcomes of the held one
// and of ms once the gate opens.
func putWhileHeld(t *testing.T, c *client.Client, g *gate, ctx context.Context, ms []client.Message) (putOutcome, []putOutcome) {
	t.Helper()
	g.close()
	var first putOutcome
	var wg sync.WaitGroup
	wg.Go(func() { first.res, first.err = c.Put(context.Background(), "t", client.Message{}) })
	synctest.Wait() // the first Put is in flight, held
	out := make([]putOutcome, len(ms))
	for i, m := range ms {
		wg.Go(func() { out[i].res, out[i].err = c.Put(ctx, "t", m) })
	}
	synctest.Wait() // the others wait for it
	g.open()
	wg.Wait()
	return first, out
}

// TestCoalescedPutsShareOneBatch checks that Puts made while a request is
// in flight go together in one batch when it ends, each with its own ID
// and the due time the server holds, and that a Client that is not busy
// sends each Put on its own at once.
func TestCoalescedPutsShareOneBatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := openQueue(t)
		c, g := coalescing(t, q)
		ctx := context.Background()
		for range 3 {
			if _, err := c.Put(ctx, "t", client.Message{}); err != nil {
				t.Fatal(err)
			}
		}
		put := api.PutPath("t")
		if got := g.sent(); !slices.Equal(got, []string{put, put, put}) {
			t.Fatalf("three Puts one after the other sent %q; want three puts", got)
		}
		ms := []client.Message{{Delay: time.Hour}, {ID: "chosen", Delay: 2 * time.Hour}, {Payload: json.RawMessage(`{"a":1}`)}, {}}
		first, out := putWhileHeld(t, c, g, ctx, ms)
		if got, want := g.sent(), []string{put, api.BatchPath("t") + " 4"}; !slices.Equal(got, want) {
			t.Fatalf("four Puts made while one was in flight sent %q; want %q", got, want)
		}
		if first.err != nil {
			t.Fatal(first.err)
		}
		ids := map[string]bool{first.res.ID: true}
		for i, o := range out {
			if o.err != nil {
				t.Fatalf("put %d: %v", i, o.err)
			}
			if ids[o.res.ID] {
				t.Fatalf("put %d: ID %q given twice", i, o.res.ID)
			}
			ids[o.res.ID] = true
			info, err := c.Message(ctx, o.res.ID)
			if err != nil {
				t.Fatalf("put %d: %v", i, err)
			}
			if !info.DeliverAt.Equal(o.res.DeliverAt) {
				t.Errorf("put %d: due %v; the server holds it due %v", i, o.res.DeliverAt, info.DeliverAt)
			}
		}
		if out[1].res.ID != "chosen" || !out[1].res.DeliverAt.Equal(time.Now().Add(2*time.Hour)) {
			t.Errorf("put of a chosen ID due in 2h: %+v", out[1].res)
		}
	})
}

// TestCoalescedPutsRefusedGetTheirOwnAnswers checks that when the server
// refuses a batch, which stores nothing, each of its Puts is sent again on
// its own and gets the answer it would have got alone.
func TestCoalescedPutsRefusedGetTheirOwnAnswers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := openQueue(t)
		c, g := coalescing(t, q)
		ctx := context.Background()
		waiting, err := c.Put(ctx, "t", client.Message{ID: "taken", Delay: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		g.sent()
		ms := []client.Message{{}, {ID: "taken", Delay: 2 * time.Hour}, {ID: "free"}}
		_, out := putWhileHeld(t, c, g, ctx, ms)
		var de *queue.DuplicateError
		if !errors.As(out[1].err, &de) || de.ID != "taken" || !de.DeliverAt.Equal(waiting.DeliverAt) {
			t.Fatalf("coalesced put of a waiting ID: %v; want its own *queue.DuplicateError", out[1].err)
		}
		if out[0].err != nil || out[2].err != nil || out[2].res.ID != "free" {
			t.Fatalf("the other puts of the refused batch: %+v, %+v; want them stored", out[0], out[2])
		}
		put := api.PutPath("t")
		got := g.sent()
		if len(got) != 5 || got[0] != put || got[1] != api.BatchPath("t")+" 3" {
			t.Fatalf("sent %q; want a put, the batch of 3, and the 3 puts again", got)
		}
		if st := q.Snapshot(); st.Pending != 1 || st.Due != 3 {
			t.Fatalf("stored %d scheduled, %d due; want 1 (the waiting one) and 3", st.Pending, st.Due)
		}
	})
}

// TestCoalescedBatchTooLarge checks that a batch over the server's
// -max-batch is sent again as single puts, and that the Client's next
// batches are smaller, half as large after each refusal, until the server
// takes them.
func TestCoalescedBatchTooLarge(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := openQueue(t)
		c, g := coalescing(t, q, server.WithLimits(server.Limits{MaxBatch: 4}))
		ctx := context.Background()
		_, out := putWhileHeld(t, c, g, ctx, make([]client.Message, 10))
		for i, o := range out {
			if o.err != nil {
				t.Fatalf("put %d: %v", i, o.err)
			}
		}
		if got := g.sent(); len(got) != 12 || got[1] != api.BatchPath("t")+" 10" {
			t.Fatalf("sent %q; want a put, the batch of 10 refused, and 10 puts", got)
		}
		put, batch := api.PutPath("t"), api.BatchPath("t")
		for _, round := range []struct {
			puts int
			want []string
		}{
			{8, []string{put, batch + " 5", put, put, put, put, put, batch + " 2", put}},
			{6, []string{put, batch + " 2", batch + " 2", batch + " 2"}},
		} {
			_, out = putWhileHeld(t, c, g, ctx, make([]client.Message, round.puts))
			for i, o := range out {
				if o.err != nil {
					t.Fatalf("put %d: %v", i, o.err)
				}
			}
			if got := g.sent(); !slices.Equal(got, round.want) {
				t.Fatalf("%d puts sent %q; want %q", round.puts, got, round.want)
			}
		}
	})
}

// TestCoalescedPutWithdrawn checks that a Put whose context ends while it
// waits is not sent, and that one whose context ends while its batch is in
// flight returns at once while the batch goes on for the others.
func TestCoalescedPutWithdrawn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := openQueue(t)
		c, g := coalescing(t, q)
		bg := context.Background()
		g.close()
		var wg sync.WaitGroup
		wg.Go(func() { c.Put(bg, "t", client.Message{}) })
		synctest.Wait()
		ctx, cancel := context.WithCancel(bg)
		var withdrawn, kept, gaveUp, stayed error
		wg.Go(func() { _, withdrawn = c.Put(ctx, "t", client.Message{ID: "withdrawn"}) })
		wg.Go(func() { _, kept = c.Put(bg, "t", client.Message{ID: "kept"}) })
		synctest.Wait()
		cancel()
		synctest.Wait()
		if !errors.Is(withdrawn, context.Canceled) || errors.Is(withdrawn, client.ErrMaybeStored) {
			t.Fatalf("put whose context ended while it waited: %v; want context.Canceled, not ErrMaybeStored", withdrawn)
		}
		// The put held goes; the one left of the two waiting goes next, and
		// is held in flight with two more waiting behind it.
		g.next()
		synctest.Wait()
		ctx, cancel = context.WithCancel(bg)
		defer cancel()
		wg.Go(func() { _, gaveUp = c.Put(ctx, "t", client.Message{ID: "gave-up"}) })
		wg.Go(func() { _, stayed = c.Put(bg, "t", client.Message{ID: "stayed"}) })
		synctest.Wait()
		g.next() // "kept" goes; the batch of "gave-up" and "stayed" is held
		synctest.Wait()
		cancel()
		synctest.Wait()
		if !errors.Is(gaveUp, context.Canceled) || !errors.Is(gaveUp, client.ErrMaybeStored) {
			t.Fatalf("put whose context ended while its batch was in flight: %v; want context.Canceled and ErrMaybeStored at once", gaveUp)
		}
		g.open()
		wg.Wait()
		if kept != nil || stayed != nil {
			t.Fatal(kept, stayed)
		}
		put := api.PutPath("t")
		if got, want := g.sent(), []string{put, put, api.BatchPath("t") + " 2"}; !slices.Equal(got, want) {
			t.Fatalf("sent %q; want %q", got, want)
		}
		if _, err := c.Message(bg, "withdrawn"); !errors.Is(err, queue.ErrNotFound) {
			t.Fatalf("the withdrawn put: %v; want it not stored", err)
		}
		for _, id := range []string{"kept", "gave-up", "stayed"} {
			if _, err := c.Message(bg, id); err != nil {
				t.Fatalf("%s: %v; want it stored", id, err)
			}
		}
	})
}

// TestCoalescedPutsCancelledAtRandom attacks the coalescing of Puts with
// callers that give up at any moment: 16 producers put 40 messages each,
// half the Puts' contexts cancelled after a random number of yields (before it
// waits, while it waits, while its batch is in flight, after its answer),
// the other half never.
// Every Put returns (not so when the coalescer waits for a caller that
// never returns), each with the answer it promises: a
// Put that succeeded is stored, one that failed with the context's error
// and not ErrMaybeStored is not, and no other error comes; and the Client
// puts as before once they are done.
func TestCoalescedPutsCancelledAtRandom(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := openQueue(t)
		c, _ := coalescing(t, q)
		bg := context.Background()
		type outcome struct {
			id  string
			err error
		}
		outs := make([][]outcome, 16)
		var wg sync.WaitGroup
		for p := range outs {
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(p), 24))
				for i := range 40 {
					id := fmt.Sprintf("p%d-%d", p, i)
					ctx, cancel := context.WithCancel(bg)
					if rng.IntN(2) == 0 {
						yields := rng.IntN(64)
						go func() {
							for range yields {
								runtime.Gosched()
							}
							cancel()
						}()
					}
					_, err := c.Put(ctx, "t", client.Message{ID: id, Delay: time.Hour})
					outs[p] = append(outs[p], outcome{id, err})
					cancel()
				}
			})
		}
		done := make(chan struct{})
		go func() {
			wg.Wait()
			close(done)
		}()
		select {
		case <-done:
		case <-time.After(time.Hour):
			// The bubble's clock runs only while every goroutine in it
			// waits: an hour is producers waiting for good.
			t.Fatal("the producers' Puts had not all returned an hour later")
		}
		counts := map[string]int{}
		for _, o := range slices.Concat(outs...) {
			_, err := c.Message(bg, o.id)
			stored := err == nil
			if err != nil && !errors.Is(err, queue.ErrNotFound) {
				t.Fatalf("%s: %v", o.id, err)
			}
			switch {
			case o.err == nil:
				counts["stored"]++
				if !stored {
					t.Errorf("%s: Put succeeded, but the message is not stored", o.id)
				}
			case errors.Is(o.err, client.ErrMaybeStored) && errors.Is(o.err, context.Canceled):
				counts["maybe stored"]++
			case errors.Is(o.err, context.Canceled):
				counts["not stored"]++
				if stored {
					t.Errorf("%s: Put failed with %v, which promises nothing was stored, but it is", o.id, o.err)
				}
			default:
				t.Errorf("%s: %v; want nil or the context's error", o.id, o.err)
			}
		}
		t.Logf("outcomes: %v", counts)
		if _, err := c.Put(bg, "t", client.Message{}); err != nil {
			t.Fatalf("a Put after the others: %v", err)
		}
	})
}

// TestCoalescedBatchServerError checks that an error that leaves a batch's
// outcome unknown is every Put's error, and that no Put is sent again.
func TestCoalescedBatchServerError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := openQueue(t)
		c, g := coalescing(t, q)
		g.intercept(isBatchOfT, func(w http.ResponseWriter, _ *http.Request, _ http.Handler) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusInternalServerError)
			fmt.Fprint(w, `{"error":"engine failed","code":"internal"}`)
		})
		_, out := putWhileHeld(t, c, g, context.Background(), make([]client.Message, 3))
		for i, o := range out {
			if !errors.Is(o.err, client.ErrServer) || !errors.Is(o.err, client.ErrMaybeStored) {
				t.Fatalf("put %d of a batch answered 500: %v; want the 500, matching ErrMaybeStored", i, o.err)
			}
		}
		if got := g.sent(); len(got) != 2 {
			t.Fatalf("sent %q; want the put and the batch only", got)
		}
	})
}

// TestCoalescedBatchStoredAnswerLost attacks the coalesced puts with a
// server that stores a batch and then loses or mangles its answer: one
// answers with an ID and a due time missing, another cuts the connection
// after storing it. Every Put of the batch fails, saying it may have been
// stored (ErrMaybeStored), none is sent again on its own, and each put
// again with its ID and DeliverAt stores no second copy.
func TestCoalescedBatchStoredAnswerLost(t *testing.T) {
	at := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name string
		lose func(rec *httptest.ResponseRecorder, w http.ResponseWriter) error
	}{
		{"answer missing an item", func(rec *httptest.ResponseRecorder, w http.ResponseWriter) error {
			var res api.BatchResponse
			if err := json.Unmarshal(rec.Body.Bytes(), &res); err != nil {
				return err
			}
			res.IDs, res.DeliverAt = res.IDs[1:], res.DeliverAt[1:]
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(rec.Code)
			return json.NewEncoder(w).Encode(res)
		}},
		{"connection cut", func(*httptest.ResponseRecorder, http.ResponseWriter) error {
			return io.ErrUnexpectedEOF
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				q := openQueue(t)
				c, g := coalescing(t, q)
				g.intercept(isBatchOfT, func(w http.ResponseWriter, r *http.Request, real http.Handler) {
					rec := httptest.NewRecorder()
					real.ServeHTTP(rec, r)
					if rec.Code/100 != 2 {
						t.Errorf("the batch was answered %d: %s", rec.Code, rec.Body.Bytes())
					}
					if err := tc.lose(rec, w); err != nil {
						panic(cutConnection{err})
					}
				})
				ms := []client.Message{{ID: "a", DeliverAt: at}, {ID: "b", DeliverAt: at}, {ID: "c", DeliverAt: at}}
				_, out := putWhileHeld(t, c, g, context.Background(), ms)
				for i, o := range out {
					if !errors.Is(o.err, client.ErrMaybeStored) {
						t.Errorf("put %d of a batch stored, its answer lost: %v; want an error matching ErrMaybeStored", i, o.err)
					}
				}
				if got := g.sent(); len(got) != 2 || got[1] != api.BatchPath("t")+" 3" {
					t.Fatalf("sent %q; want the put and the batch only", got)
				}
				if st := q.Snapshot(); st.Pending != 3 {
					t.Fatalf("%d scheduled; want the batch's 3 stored", st.Pending)
				}
				for _, m := range ms {
					if res, err := c.Put(context.Background(), "t", m); err != nil || res.ID != m.ID {
						t.Fatalf("%s put again: %+v, %v; want it answered as stored", m.ID, res, err)
					}
				}
				if st := q.Snapshot(); st.Pending != 3 {
					t.Fatalf("%d scheduled after the puts again; want 3", st.Pending)
				}
			})
		})
	}
}

// intercept has the gate's server answer the requests take chooses with answer, and the others as
// before; answer may call real, the server's own handler. take sees the request's body, which
// stays to be read.
func (g *gate) intercept(take func(r *http.Request, body []byte) bool, answer func(w http.ResponseWriter, r *http.Request, real http.Handler)) {
	real := g.h
	g.h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		if !take(r, body) {
			real.ServeHTTP(w, r)
			return
		}
		answer(w, r, real)
	})
}

// isBatchOfT takes the batch puts of topic t.
func isBatchOfT(r *http.Request, _ []byte) bool { return r.URL.Path == api.BatchPath("t") }

// A cutConnection, panicked by a handler behind a gate, makes the gate's
// round trip fail with err after the handler's work is done, as a
// connection cut before the answer arrives.
type cutConnection struct{ err error }

// TestCoalescedPutsOnAnOlderServer checks that a batch answer without due
// times, as a tockd older than the client gives, turns coalescing off, the
// Puts of that batch reporting the due times the client estimates.
func TestCoalescedPutsOnAnOlderServer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := openQueue(t)
		c, g := coalescing(t, q)
		g.intercept(isBatchOfT, func(w http.ResponseWriter, r *http.Request, real http.Handler) {
			rec := httptest.NewRecorder()
			real.ServeHTTP(rec, r)
			var res api.BatchResponse
			json.Unmarshal(rec.Body.Bytes(), &res)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(rec.Code)
			json.NewEncoder(w).Encode(struct {
				IDs []string `json:"ids"`
			}{res.IDs})
		})
		at := time.Now().Add(time.Hour)
		_, out := putWhileHeld(t, c, g, context.Background(), []client.Message{{Delay: time.Minute}, {DeliverAt: at}})
		if out[0].err != nil || out[1].err != nil {
			t.Fatal(out[0].err, out[1].err)
		}
		if !out[0].res.DeliverAt.Equal(time.Now().Add(time.Minute)) || !out[1].res.DeliverAt.Equal(at) {
			t.Fatalf("due times estimated: %v, %v; want now+1m and %v", out[0].res.DeliverAt, out[1].res.DeliverAt, at)
		}
		g.sent()
		putWhileHeld(t, c, g, context.Background(), make([]client.Message, 3))
		if got := g.sent(); slices.Contains(got, api.BatchPath("t")+" 3") {
			t.Fatalf("sent %q after an answer without due times; want no more batches", got)
		}
	})
}

// TestCoalescedAcksSplitTheirOutcomes checks that Acks made while one is
// in flight share one request, and that each learns which of its own
// receipts were not acked.
func TestCoalescedAcksSplitTheirOutcomes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := openQueue(t)
		c, g := coalescing(t, q)
		ctx := context.Background()
		if _, err := c.PutBatch(ctx, "t", make([]client.Message, 5)); err != nil {
			t.Fatal(err)
		}
		ds, err := c.Receive(ctx, "t", client.ReceiveOptions{Max: 5, Visibility: time.Hour})
		if err != nil || len(ds) != 5 {
			t.Fatalf("receive: %d, %v", len(ds), err)
		}
		g.sent()
		g.close()
		errs := make([]error, 4)
		var wg sync.WaitGroup
		wg.Go(func() { errs[0] = c.Ack(ctx, ds[0].Receipt) })
		synctest.Wait()
		calls := [][]string{
			{ds[1].Receipt, ds[2].Receipt},
			{ds[3].Receipt, "forged-receipt-1", ds[4].Receipt},
			{"forged-receipt-2"},
		}
		for i, rs := range calls {
			wg.Go(func() { errs[i+1] = c.Ack(ctx, rs...) })
		}
		synctest.Wait()
		g.open()
		wg.Wait()
		if got, want := g.sent(), []string{api.PathAck + " 1", api.PathAck + " 6"}; !slices.Equal(got, want) {
			t.Fatalf("sent %q; want %q", got, want)
		}
		if errs[0] != nil || errs[1] != nil {
			t.Fatalf("acks of good receipts: %v, %v", errs[0], errs[1])
		}
		for i, want := range map[int]string{2: "forged-receipt-1", 3: "forged-receipt-2"} {
			var ae *queue.AckError
			if !errors.As(errs[i], &ae) || len(ae.Failed) != 1 || ae.Failed[0].Receipt != want || !errors.Is(ae.Failed[0].Err, queue.ErrUnknownReceipt) {
				t.Errorf("ack %d: %v; want an AckError listing only %s", i, errs[i], want)
			}
		}
		if st := q.Snapshot(); st.Acked != 5 || st.Leased != 0 {
			t.Fatalf("%d acked, %d leased; want 5 and 0", st.Acked, st.Leased)
		}
	})
}

// TestCoalescedExtendsSplitTheirOutcomes checks that Extends made while
// one is in flight share requests, one per visibility, and that each
// learns whether its own lease was extended.
func TestCoalescedExtendsSplitTheirOutcomes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := openQueue(t)
		c, g := coalescing(t, q)
		ctx := context.Background()
		if _, err := c.PutBatch(ctx, "t", make([]client.Message, 5)); err != nil {
			t.Fatal(err)
		}
		ds, err := c.Receive(ctx, "t", client.ReceiveOptions{Max: 5, Visibility: time.Hour})
		if err != nil || len(ds) != 5 {
			t.Fatalf("receive: %d, %v", len(ds), err)
		}
		g.sent()
		g.close()
		calls := []struct {
			receipt string
			vis     time.Duration
		}{
			{ds[0].Receipt, time.Minute}, // in flight while the others come
			{ds[1].Receipt, time.Minute},
			{"forged-receipt", time.Minute},
			{ds[2].Receipt, time.Minute},
			{ds[3].Receipt, 2 * time.Minute},
			{ds[4].Receipt, time.Minute},
		}
		errs := make([]error, len(calls))
		var wg sync.WaitGroup
		for i, cl := range calls {
			wg.Go(func() { errs[i] = c.Extend(ctx, cl.receipt, cl.vis) })
			synctest.Wait() // each waits in turn, in this order
		}
		g.open()
		wg.Wait()
		want := []string{api.PathExtend, api.PathExtend + " 3", api.PathExtend, api.PathExtend}
		if got := g.sent(); !slices.Equal(got, want) {
			t.Fatalf("sent %q; want %q", got, want)
		}
		for i, err := range errs {
			if i == 2 {
				if !errors.Is(err, queue.ErrUnknownReceipt) {
					t.Errorf("extend of a forged receipt: %v; want an error matching queue.ErrUnknownReceipt", err)
				}
			} else if err != nil {
				t.Errorf("extend %d: %v", i, err)
			}
		}
		deadlines := make(map[string]time.Time)
		page, _, err := q.Messages(ctx, "t", queue.Leased, "", 10)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range page {
			deadlines[m.ID] = m.LeaseDeadline
		}
		for i, d := range ds {
			vis := time.Minute
			if i == 3 {
				vis = 2 * time.Minute
			}
			if !deadlines[d.ID].Equal(time.Now().Add(vis)) {
				t.Errorf("lease of %s ends %v; want %v from now", d.ID, deadlines[d.ID].Sub(time.Now()), vis)
			}
		}
	})
}

// TestCoalescedAcksAndExtendsOnAFailingServer attacks coalesced Acks and
// Extends with a server that fails their batch: answered 500 without
// acting, each call gets the 500 and no lease is ended or moved; its
// connection cut after acting on it, the batch is sent again (both are
// idempotent) and each call succeeds, its own lease acked or extended.
func TestCoalescedAcksAndExtendsOnAFailingServer(t *testing.T) {
	for _, tc := range []struct {
		name string
		path string
		call func(c *client.Client, receipt string) error
	}{
		{"ack", api.PathAck, func(c *client.Client, receipt string) error { return c.Ack(context.Background(), receipt) }},
		{"extend", api.PathExtend, func(c *client.Client, receipt string) error {
			return c.Extend(context.Background(), receipt, 2*time.Hour)
		}},
	} {
		for _, fail := range []string{"500", "cut"} {
			t.Run(tc.name+" "+fail, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					q := openQueue(t)
					c, g := coalescing(t, q)
					ctx := context.Background()
					if _, err := c.PutBatch(ctx, "t", make([]client.Message, 4)); err != nil {
						t.Fatal(err)
					}
					ds, err := c.Receive(ctx, "t", client.ReceiveOptions{Max: 4, Visibility: time.Hour})
					if err != nil || len(ds) != 4 {
						t.Fatalf("receive: %d, %v", len(ds), err)
					}
					failed := false
					g.intercept(func(r *http.Request, body []byte) bool {
						var b struct{ Receipts []string }
						return !failed && r.URL.Path == tc.path && json.Unmarshal(body, &b) == nil && len(b.Receipts) >= 2
					}, func(w http.ResponseWriter, r *http.Request, real http.Handler) {
						failed = true
						if fail == "500" {
							w.WriteHeader(http.StatusInternalServerError)
							return
						}
						real.ServeHTTP(httptest.NewRecorder(), r)
						panic(cutConnection{io.ErrUnexpectedEOF})
					})
					g.sent()
					g.close()
					start := time.Now()
					errs := make([]error, len(ds))
					var wg sync.WaitGroup
					wg.Go(func() { errs[0] = tc.call(c, ds[0].Receipt) })
					synctest.Wait()
					for i := 1; i < len(ds); i++ {
						wg.Go(func() { errs[i] = tc.call(c, ds[i].Receipt) })
					}
					synctest.Wait()
					g.open()
					wg.Wait()
					if !failed {
						t.Fatalf("sent %q: no batch to fail", g.sent())
					}
					if errs[0] != nil {
						t.Fatalf("the call sent alone: %v", errs[0])
					}
					page, _, err := q.Messages(ctx, "t", queue.Leased, "", 10)
					if err != nil {
						t.Fatal(err)
					}
					leased := make(map[string]time.Time)
					for _, m := range page {
						leased[m.ID] = m.LeaseDeadline
					}
					for i, d := range ds[1:] {
						err := errs[i+1]
						deadline, ok := leased[d.ID]
						switch {
						case fail == "500" && !errors.Is(err, client.ErrServer):
							t.Errorf("%s %d of a batch answered 500: %v; want the 500", tc.name, i+1, err)
						case fail == "500" && (!ok || !deadline.Equal(start.Add(time.Hour))):
							t.Errorf("%s %d of a batch answered 500: lease %v, %v; want it as it was", tc.name, i+1, ok, deadline)
						case fail == "cut" && err != nil:
							t.Errorf("%s %d of a batch whose answer was cut: %v; want it done on the retry", tc.name, i+1, err)
						case fail == "cut" && tc.name == "ack" && ok:
							t.Errorf("ack %d of a batch whose answer was cut: still leased", i+1)
						case fail == "cut" && tc.name == "extend" && (!ok || deadline.Before(start.Add(2*time.Hour))):
							t.Errorf("extend %d of a batch whose answer was cut: lease %v, %v; want it extended", i+1, ok, deadline)
						}
					}
				})
			})
		}
	}
}

// TestExtendBatch checks Client.ExtendBatch: one request, its outcome per
// receipt; and, on a tockd that takes one receipt per extend (older than
// the client), a request per receipt, after which Extends are no longer
// coalesced.
func TestExtendBatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := openQueue(t)
		c, g := coalescing(t, q)
		ctx := context.Background()
		if _, err := c.PutBatch(ctx, "t", make([]client.Message, 3)); err != nil {
			t.Fatal(err)
		}
		ds, err := c.Receive(ctx, "t", client.ReceiveOptions{Max: 3, Visibility: time.Hour})
		if err != nil || len(ds) != 3 {
			t.Fatalf("receive: %d, %v", len(ds), err)
		}
		if err := c.Ack(ctx, ds[1].Receipt); err != nil {
			t.Fatal(err)
		}
		batch := []string{ds[0].Receipt, ds[1].Receipt, "forged-receipt", ds[2].Receipt}
		extendBatch := func(what string) {
			t.Helper()
			err := c.ExtendBatch(ctx, batch, time.Minute)
			var xe *queue.ExtendError
			if !errors.As(err, &xe) || len(xe.Failed) != 2 || xe.Failed[0].Receipt != batch[1] || xe.Failed[1].Receipt != batch[2] ||
				!errors.Is(err, queue.ErrUnknownReceipt) {
				t.Fatalf("%s: %v; want an ExtendError listing the acked and the forged receipt", what, err)
			}
		}
		g.sent()
		extendBatch("ExtendBatch")
		if got, want := g.sent(), []string{api.PathExtend + " 4"}; !slices.Equal(got, want) {
			t.Fatalf("sent %q; want %q", got, want)
		}
		if err := c.ExtendBatch(ctx, nil, time.Minute); err != nil {
			t.Fatalf("ExtendBatch of no receipts: %v", err)
		}
		if err := c.ExtendBatch(ctx, batch, 0); !errors.Is(err, queue.ErrInvalid) {
			t.Fatalf("ExtendBatch with a zero visibility: %v; want queue.ErrInvalid", err)
		}
		if got := g.sent(); len(got) != 0 {
			t.Fatalf("sent %q; want nothing", got)
		}

		// A tockd older than the client refuses "receipts", as a field it does not know.
		g.intercept(func(r *http.Request, body []byte) bool {
			return r.URL.Path == api.PathExtend && bytes.Contains(body, []byte(`"receipts"`))
		}, func(w http.ResponseWriter, _ *http.Request, _ http.Handler) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			w.Write([]byte(`{"error":"json: unknown field \"receipts\"","code":"bad_request"}`))
		})
		extendBatch("ExtendBatch on an older tockd")
		if got, want := g.sent(), []string{api.PathExtend + " 4", api.PathExtend, api.PathExtend, api.PathExtend, api.PathExtend}; !slices.Equal(got, want) {
			t.Fatalf("sent %q; want %q", got, want)
		}
		g.close()
		var wg sync.WaitGroup
		for _, rc := range []string{ds[0].Receipt, ds[2].Receipt, ds[0].Receipt} {
			wg.Go(func() {
				if err := c.Extend(ctx, rc, time.Minute); err != nil {
					t.Errorf("Extend: %v", err)
				}
			})
		}
		synctest.Wait()
		g.open()
		wg.Wait()
		if got := g.sent(); !slices.Equal(got, []string{api.PathExtend, api.PathExtend, api.PathExtend}) {
			t.Fatalf("sent %q after an older tockd was met; want an extend of one receipt per Extend", got)
		}
	})
}
