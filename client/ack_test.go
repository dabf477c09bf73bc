package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
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

// handlerTransport sends requests straight to a handler, without a
// network, so that a client and a server can run in one synctest bubble.
type handlerTransport struct{ h http.Handler }

func (t handlerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	rec := httptest.NewRecorder()
	t.h.ServeHTTP(rec, req)
	if err := req.Context().Err(); err != nil {
		// As net/http's transport fails a round trip whose context ends
		// before the answer is read: the server writes no answer to a
		// request whose client went away, and a recorder would hand the
		// client an empty 200 instead.
		return nil, err
	}
	return rec.Result(), nil
}

// TestAckReturnsTheReceiptsNotAcked is the regression test of Ack failing
// as a whole with ErrBadRequest when some receipts were stale, although
// the server had acked the others: the error is a *queue.AckError listing
// exactly the receipts not acked, in order, and the others are acked.
func TestAckReturnsTheReceiptsNotAcked(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q, err := delayq.Open(t.TempDir(), delayq.WithNoSync(), delayq.WithBackoff(10*time.Millisecond, 10*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		defer q.Close()
		// The server's long polls run on a wheel the bubble stops.
		w := tock.New()
		defer w.Stop()
		c, err := client.New("http://tockd.test", client.WithHTTPClient(&http.Client{
			Transport: handlerTransport{contract.Handler(t, server.New(q, server.WithWheel(w)))}}))
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		if _, err := c.PutBatch(ctx, "t", []client.Message{{}, {}}); err != nil {
			t.Fatal(err)
		}
		first, err := c.Receive(ctx, "t", client.ReceiveOptions{Max: 1, Visibility: time.Second})
		if err != nil || len(first) != 1 {
			t.Fatalf("receive: %v, %v", first, err)
		}
		time.Sleep(2 * time.Second) // the lease runs out
		again, err := c.Receive(ctx, "t", client.ReceiveOptions{Max: 10, Visibility: time.Minute})
		if err != nil || len(again) != 2 {
			t.Fatalf("receive after the lease ran out: %v, %v; want both messages", again, err)
		}
		stale, forged := first[0].Receipt, "forged-receipt"
		err = c.Ack(ctx, again[0].Receipt, stale, forged, again[1].Receipt)
		var ae *queue.AckError
		if !errors.As(err, &ae) || !errors.Is(err, queue.ErrUnknownReceipt) || !errors.Is(err, client.ErrBadRequest) {
			t.Fatalf("ack of two good receipts, a stale and a forged one: %v; want a *queue.AckError", err)
		}
		var got []string
		for _, f := range ae.Failed {
			got = append(got, f.Receipt)
			var ce *client.Error
			if !errors.Is(f.Err, queue.ErrUnknownReceipt) || !errors.As(f.Err, &ce) || ce.Code != api.CodeUnknownReceipt {
				t.Errorf("reason for %q: %v; want an *Error matching queue.ErrUnknownReceipt", f.Receipt, f.Err)
			}
		}
		if !slices.Equal(got, []string{stale, forged}) {
			t.Fatalf("AckError lists %q; want the stale and the forged receipt, in order", got)
		}
		st, err := c.Stats(ctx)
		if err != nil || st.Acks != 2 || st.Leased != 0 {
			t.Fatalf("stats after the ack: %d acks, %d leased, %v; want 2 acks, none leased", st.Acks, st.Leased, err)
		}
	})
}

// answerJSON is a canned answer of status with v as its JSON body.
func answerJSON(status int, v any) *http.Response {
	b, _ := json.Marshal(v)
	return answer(status, string(b))
}

// TestPutOfAWaitingIDReturnsTheDuplicate checks that a 409 becomes an
// *Error that carries a *queue.DuplicateError, with the waiting message's
// ID and due time, and matches queue.ErrDuplicate.
func TestPutOfAWaitingIDReturnsTheDuplicate(t *testing.T) {
	due := time.Date(2030, 1, 2, 15, 4, 5, 123456789, time.UTC)
	rt := &roundTrips{answers: []*http.Response{
		answerJSON(409, api.DuplicateBody{ErrorBody: api.ErrorBody{Message: "already waiting", Code: api.CodeDuplicate}, ID: "order-7", DeliverAt: due}),
		answerJSON(409, api.DuplicateBody{ErrorBody: api.ErrorBody{Message: "messages[1]: already waiting", Code: api.CodeDuplicate}, ID: "order-7", DeliverAt: due}),
	}}
	c, _ := client.New("http://tockd.test", client.WithHTTPClient(&http.Client{Transport: rt}))
	_, err := c.Put(context.Background(), "t", client.Message{ID: "order-7"})
	_, berr := c.PutBatch(context.Background(), "t", []client.Message{{}, {ID: "order-7"}})
	for _, err := range []error{err, berr} {
		var de *queue.DuplicateError
		var ce *client.Error
		if !errors.As(err, &de) || !errors.Is(err, queue.ErrDuplicate) || !errors.As(err, &ce) || ce.StatusCode != 409 {
			t.Fatalf("put of a waiting ID: %v; want an *Error carrying a *queue.DuplicateError", err)
		}
		if de.ID != "order-7" || !de.DeliverAt.Equal(due) {
			t.Errorf("DuplicateError{%q, %v}; want order-7 due %v", de.ID, de.DeliverAt, due)
		}
	}
}

// TestErrorsMatchQueueSentinels checks which answers match which sentinel
// of package queue: by code where a status has several meanings.
func TestErrorsMatchQueueSentinels(t *testing.T) {
	for _, tc := range []struct {
		status int
		code   string
		want   error
		not    []error
	}{
		{400, api.CodeBadRequest, queue.ErrInvalid, []error{queue.ErrUnknownReceipt}},
		{400, api.CodeUnknownReceipt, queue.ErrUnknownReceipt, []error{queue.ErrInvalid}},
		{404, api.CodeNotFound, queue.ErrNotFound, nil},
		{404, api.CodeNoRoute, client.ErrNotFound, []error{queue.ErrNotFound}},
		{409, api.CodeDuplicate, queue.ErrDuplicate, nil},
		{413, api.CodeTooLarge, queue.ErrTooLarge, []error{queue.ErrInvalid}},
		{503, api.CodeUnavailable, queue.ErrUnavailable, nil},
		{503, "", queue.ErrUnavailable, nil}, // a proxy's 503
		{500, api.CodeInternal, client.ErrServer, []error{queue.ErrUnavailable, queue.ErrInvalid}},
	} {
		err := error(&client.Error{StatusCode: tc.status, Code: tc.code, Message: "m"})
		if !errors.Is(err, tc.want) {
			t.Errorf("%d %q does not match %v", tc.status, tc.code, tc.want)
		}
		for _, n := range tc.not {
			if errors.Is(err, n) {
				t.Errorf("%d %q matches %v", tc.status, tc.code, n)
			}
		}
	}
}

func TestCancelOfAnEmptyIDIsInvalid(t *testing.T) {
	rt := &roundTrips{}
	c, _ := client.New("http://tockd.test", client.WithHTTPClient(&http.Client{Transport: rt}))
	if ok, err := c.Cancel(context.Background(), ""); ok || !errors.Is(err, queue.ErrInvalid) || len(rt.at) != 0 {
		t.Fatalf("Cancel(\"\"): %v, %v after %d requests; want queue.ErrInvalid without a request", ok, err, len(rt.at))
	}
}

func ExampleClient_Ack() {
	dir, _ := os.MkdirTemp("", "tock-example-")
	defer os.RemoveAll(dir)
	q, err := delayq.Open(dir, delayq.WithNoSync())
	if err != nil {
		panic(err)
	}
	defer q.Close()
	ts := httptest.NewServer(server.New(q))
	defer ts.Close()
	c, _ := client.New(ts.URL)
	ctx := context.Background()

	c.Put(ctx, "jobs", client.Message{Payload: json.RawMessage(`1`)})
	ds, _ := c.Receive(ctx, "jobs", client.ReceiveOptions{Wait: 5 * time.Second})
	receipts := []string{ds[0].Receipt, "a-receipt-this-server-never-issued"}

	err = c.Ack(ctx, receipts...)
	var ae *queue.AckError
	if errors.As(err, &ae) {
		// The receipts not listed were acked; those listed were not, and
		// their messages are delivered again once their leases run out.
		for _, f := range ae.Failed {
			fmt.Printf("not acked: %s (unknown receipt: %v)\n", f.Receipt, errors.Is(f.Err, queue.ErrUnknownReceipt))
		}
	}
	// Output:
	// not acked: a-receipt-this-server-never-issued (unknown receipt: true)
}

// losingTransport serves requests through a handler and loses the answer
// of the first request to path: the server acted, the client hears a
// transport error.
type losingTransport struct {
	h     http.Handler
	path  string
	calls int
}

func (t *losingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	rec := httptest.NewRecorder()
	t.h.ServeHTTP(rec, req)
	if req.URL.Path != t.path {
		return rec.Result(), nil
	}
	if t.calls++; t.calls == 1 {
		return nil, errors.New("connection reset by peer")
	}
	return rec.Result(), nil
}

// TestAckIsRetriedAfterALostAnswer checks that Ack is retried as the other
// idempotent calls are: the first attempt acks the receipt and its answer
// is lost, and the retry succeeds, the engine telling a receipt whose
// message is done from a forged one.
func TestAckIsRetriedAfterALostAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q, err := delayq.Open(t.TempDir(), delayq.WithNoSync())
		if err != nil {
			t.Fatal(err)
		}
		defer q.Close()
		w := tock.New()
		defer w.Stop()
		tr := &losingTransport{h: server.New(q, server.WithWheel(w)), path: api.PathAck}
		c, err := client.New("http://tockd.test", client.WithHTTPClient(&http.Client{Transport: tr}))
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		if _, err := c.Put(ctx, "t", client.Message{}); err != nil {
			t.Fatal(err)
		}
		ds, err := c.Receive(ctx, "t", client.ReceiveOptions{Max: 1, Visibility: time.Minute})
		if err != nil || len(ds) != 1 {
			t.Fatalf("receive: %v, %v", ds, err)
		}
		if err := c.Ack(ctx, ds[0].Receipt); err != nil || tr.calls != 2 {
			t.Fatalf("Ack whose first answer was lost: %v after %d calls; want nil after 2", err, tr.calls)
		}
		if st := q.Snapshot(); st.Acked != 1 || st.Leased != 0 {
			t.Fatalf("after the ack: %d acked, %d leased; want 1 and 0", st.Acked, st.Leased)
		}
	})
}
