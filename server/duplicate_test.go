package server

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tockwheel/tock/api"
	"github.com/tockwheel/tock/delayq"
	"github.com/tockwheel/tock/queue"
)

// uniqueIDs keeps chosen IDs unique among the messages put through it, as
// the queue contract says, on top of the delayq engine, which does not yet
// (issue 9): a Put whose ID names one of them is a retry when the message
// is the same, else a *queue.DuplicateError. A Cancel frees the ID. It lets
// the server's answers to duplicates be tested before delayq refuses them
// itself; it forgets nothing else, as the tests below need nothing more.
type uniqueIDs struct {
	queue.Engine
	mu      sync.Mutex
	waiting map[string]queue.Message
}

func (u *uniqueIDs) check(m queue.Message) (retry bool, err error) {
	w, ok := u.waiting[m.ID]
	switch {
	case !ok || m.ID == "":
		return false, nil
	case w.Topic == m.Topic && string(w.Payload) == string(m.Payload) && w.DeliverAt.Equal(m.DeliverAt):
		return true, nil
	}
	return false, &queue.DuplicateError{ID: m.ID, DeliverAt: w.DeliverAt}
}

func (u *uniqueIDs) Put(ctx context.Context, m queue.Message) (string, error) {
	ids, err := u.PutBatch(ctx, []queue.Message{m})
	if err != nil {
		return "", err
	}
	return ids[0], nil
}

func (u *uniqueIDs) PutBatch(ctx context.Context, ms []queue.Message) ([]string, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	retries := 0
	for _, m := range ms {
		retry, err := u.check(m)
		if err != nil {
			return nil, err
		}
		if retry {
			retries++
		}
	}
	if retries == len(ms) {
		ids := make([]string, len(ms))
		for i, m := range ms {
			ids[i] = m.ID
		}
		return ids, nil
	}
	if retries > 0 {
		return nil, fmt.Errorf("a batch that retries some puts and not others: %w", queue.ErrDuplicate)
	}
	ids, err := u.Engine.PutBatch(ctx, ms)
	if err == nil {
		for _, m := range ms {
			if m.ID != "" {
				u.waiting[m.ID] = m
			}
		}
	}
	return ids, err
}

func (u *uniqueIDs) Cancel(ctx context.Context, id string) (bool, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	ok, err := u.Engine.Cancel(ctx, id)
	if ok {
		delete(u.waiting, id)
	}
	return ok, err
}

// TestDuplicateIDIs409 checks the answers to a chosen ID that names a
// waiting message: the same message again is a retried put, 201 with the
// same ID; another one is 409 with code duplicate, the ID and the waiting
// message's due time, alone or in a batch, of which nothing is stored.
func TestDuplicateIDIs409(t *testing.T) {
	q, err := delayq.Open(t.TempDir(), delayq.WithNoSync())
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	ts := newHTTPTestServer(t, New(&uniqueIDs{Engine: q, waiting: map[string]queue.Message{}}))
	at := time.Now().Add(time.Hour).UTC().Truncate(time.Millisecond)
	put := fmt.Sprintf(`{"id":"order-7","payload":{"n":1},"deliver_at":%q}`, at.Format(api.TimeFormat))
	for i := range 2 {
		r := call(t, ts, "POST", "/v1/topics/orders/messages", put)
		var res api.PutResponse
		r.json(t, &res)
		if r.status != 201 || res.ID != "order-7" || !res.DeliverAt.Equal(at) {
			t.Fatalf("put %d of the same message: %d %s; want 201 with its ID and due time", i+1, r.status, r.body)
		}
	}
	for _, body := range []string{
		fmt.Sprintf(`{"id":"order-7","payload":{"n":2},"deliver_at":%q}`, at.Format(api.TimeFormat)),
		fmt.Sprintf(`{"id":"order-7","payload":{"n":1},"deliver_at":%q}`, at.Add(time.Second).Format(api.TimeFormat)),
		`{"id":"order-7","payload":{"n":1}}`,
	} {
		r := call(t, ts, "POST", "/v1/topics/orders/messages", body)
		var dup api.DuplicateBody
		r.json(t, &dup)
		if r.status != 409 || dup.Code != api.CodeDuplicate || dup.ID != "order-7" || !dup.DeliverAt.Equal(at) || dup.Message == "" {
			t.Fatalf("put of another message with a waiting ID, %s: %d %s; want 409 duplicate with order-7 due %v", body, r.status, r.body, at)
		}
	}
	// Another topic is another message too.
	if r := call(t, ts, "POST", "/v1/topics/other/messages", put); r.status != 409 {
		t.Fatalf("same ID on another topic: %d %s; want 409", r.status, r.body)
	}
	// A batch with a waiting ID stores nothing.
	r := call(t, ts, "POST", "/v1/topics/orders/batch", `{"messages":[{"id":"fresh"},{"id":"order-7","payload":3}]}`)
	var dup api.DuplicateBody
	r.json(t, &dup)
	if r.status != 409 || dup.ID != "order-7" || !dup.DeliverAt.Equal(at) || !strings.HasPrefix(dup.Message, "messages[1]: ") {
		t.Fatalf("batch with a waiting ID: %d %s; want 409 naming messages[1]", r.status, r.body)
	}
	if r := call(t, ts, "DELETE", "/v1/messages/fresh", ""); r.status != 404 {
		t.Fatalf("cancel of a message of the refused batch: %d %s; want 404, it was not stored", r.status, r.body)
	}
	var st api.Stats
	call(t, ts, "GET", "/v1/stats", "").json(t, &st)
	if st.Puts != 2 || st.Scheduled != 1 {
		t.Errorf("stats after the duplicates: %d puts, %d scheduled; want 2 and 1", st.Puts, st.Scheduled)
	}
	// Once cancelled, the ID is free again.
	if r := call(t, ts, "DELETE", "/v1/messages/order-7", ""); r.status != 204 {
		t.Fatalf("cancel: %d %s", r.status, r.body)
	}
	if r := call(t, ts, "POST", "/v1/topics/orders/messages", `{"id":"order-7","payload":2}`); r.status != 201 {
		t.Fatalf("put of a cancelled ID: %d %s", r.status, r.body)
	}
	m := call(t, ts, "GET", "/metrics", "")
	if !slices.ContainsFunc(strings.Split(string(m.body), "\n"), func(l string) bool {
		return strings.HasPrefix(l, `tock_http_requests_total{code="409",route="POST /v1/topics/{topic}/messages"} 4`)
	}) {
		t.Errorf("metrics do not count the four 409s")
	}
}
