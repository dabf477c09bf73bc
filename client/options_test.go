package client_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tockwheel/tock/client"
	"github.com/tockwheel/tock/delayq"
	"github.com/tockwheel/tock/server"
)

// TestCancelTellsMissingMessagesFromWrongURLs is the regression test of
// Cancel reporting (false, nil) for every 404: a wrong base URL, whose
// paths no route has, looked like "message not pending".
func TestCancelTellsMissingMessagesFromWrongURLs(t *testing.T) {
	q, err := delayq.Open(t.TempDir(), delayq.WithNoSync())
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	ts := httptest.NewServer(server.New(q))
	defer ts.Close()
	other := httptest.NewServer(http.NotFoundHandler()) // not tockd at all
	defer other.Close()
	ctx := context.Background()

	c, _ := client.New(ts.URL)
	if ok, err := c.Cancel(ctx, "nobody"); ok || err != nil {
		t.Fatalf("cancel of a message not pending: %v, %v; want false, nil", ok, err)
	}
	for name, base := range map[string]string{"a prefix tockd does not have": ts.URL + "/tock", "another server": other.URL} {
		c, _ := client.New(base)
		ok, err := c.Cancel(ctx, "nobody")
		var ce *client.Error
		if ok || !errors.As(err, &ce) || !errors.Is(err, client.ErrNotFound) || ce.Code == client.CodeNotFound {
			t.Errorf("cancel through %s: %v, %v; want an error matching ErrNotFound", name, ok, err)
		}
	}
	c, _ = client.New(ts.URL + "/tock")
	if _, err := c.Cancel(ctx, "nobody"); !strings.Contains(fmt.Sprint(err), "no such route") {
		t.Errorf("cancel through a wrong prefix: %v, want the server's \"no such route\"", err)
	}
}

func TestOptionsNilAndInvalid(t *testing.T) {
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"status":"ok"}`)
	}))
	defer ts.Close()
	// nil means the default: a nil Option, WithHTTPClient(nil).
	c, err := client.New(ts.URL, nil, client.WithHTTPClient(nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Healthy(context.Background()); err != nil {
		t.Fatalf("healthy with WithHTTPClient(nil): %v", err)
	}
	for _, o := range []client.Option{client.WithRetries(-1, 0), client.WithRetries(1, -time.Second)} {
		if _, err := client.New(ts.URL, o); !errors.Is(err, client.ErrInvalidOption) || !strings.Contains(err.Error(), "WithRetries") {
			t.Errorf("New with a negative retry option: %v, want ErrInvalidOption naming WithRetries", err)
		}
	}
}

// roundTrips answers requests from a list of canned answers, in a synctest
// bubble, recording when each request came.
type roundTrips struct {
	answers []*http.Response
	at      []time.Time
}

func (rt *roundTrips) RoundTrip(req *http.Request) (*http.Response, error) {
	rt.at = append(rt.at, time.Now())
	if len(rt.answers) == 0 {
		return nil, errors.New("no more answers")
	}
	r := rt.answers[0]
	rt.answers = rt.answers[1:]
	r.Request = req
	return r, nil
}

func answer(status int, body string, hdr ...string) *http.Response {
	h := http.Header{"Content-Type": {"application/json"}}
	for i := 0; i+1 < len(hdr); i += 2 {
		h.Set(hdr[i], hdr[i+1])
	}
	return &http.Response{StatusCode: status, Header: h, Body: io.NopCloser(strings.NewReader(body))}
}

// TestRetriesHonourRetryAfter checks what WithRetries documents: 429 is
// retried as 502, 503 and 504 are, a Retry-After header is waited out
// (capped by MaxRetryAfter), and a retry that the context's deadline would
// cut is not waited for.
func TestRetriesHonourRetryAfter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := &roundTrips{answers: []*http.Response{
			answer(429, `{"error":"slow down","code":"error"}`, "Retry-After", "7"),
			answer(503, `{"error":"busy","code":"unavailable"}`, "Retry-After", "3600"),
			answer(200, `{"scheduled":3}`),
		}}
		c, _ := client.New("http://tockd.test", client.WithHTTPClient(&http.Client{Transport: rt}), client.WithRetries(3, time.Millisecond))
		start := time.Now()
		st, err := c.Stats(context.Background())
		if err != nil || st.Scheduled != 3 {
			t.Fatalf("stats after 429 and 503: %+v, %v", st, err)
		}
		if len(rt.at) != 3 || rt.at[1].Sub(start) != 7*time.Second || rt.at[2].Sub(rt.at[1]) != client.MaxRetryAfter {
			t.Fatalf("requests at %v after %v; want retries after 7s and then MaxRetryAfter", rt.at, start)
		}

		// A Retry-After beyond the context's deadline: the error at once.
		rt = &roundTrips{answers: []*http.Response{answer(503, `{"error":"busy","code":"unavailable"}`, "Retry-After", "30")}}
		c, _ = client.New("http://tockd.test", client.WithHTTPClient(&http.Client{Transport: rt}))
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		start = time.Now()
		if err := c.Ready(ctx); !errors.Is(err, client.ErrUnavailable) || time.Since(start) != 0 {
			t.Fatalf("ready: %v after %v; want ErrUnavailable at once", err, time.Since(start))
		}

		// Anything else is not retried.
		rt = &roundTrips{answers: []*http.Response{answer(500, `{"error":"bug","code":"internal"}`), answer(200, `{}`)}}
		c, _ = client.New("http://tockd.test", client.WithHTTPClient(&http.Client{Transport: rt}))
		if err := c.Ready(context.Background()); !errors.Is(err, client.ErrServer) || len(rt.at) != 1 {
			t.Fatalf("ready on a 500: %v after %d requests; want ErrServer after one", err, len(rt.at))
		}
	})
}
