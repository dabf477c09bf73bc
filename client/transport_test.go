package client

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// countingConn counts the writes made on a connection.
type countingConn struct {
	net.Conn
	writes *atomic.Int32
}

func (c countingConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

// TestRequestInOneWrite checks that the default transport writes a request of the size of a
// coalesced batch, headers and body, in one write, where net/http's default buffer of 4 KiB
// wrote the batch of 32 puts of 100 bytes in two; and one of the largest coalesced batch too.
func TestRequestInOneWrite(t *testing.T) {
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"ids":[]}`)
	}))
	defer ts.Close()
	c, err := New(ts.URL)
	if err != nil {
		t.Fatal(err)
	}
	var writes atomic.Int32
	tr := c.http.Transport.(*http.Transport)
	var d net.Dialer
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := d.DialContext(ctx, network, addr)
		return countingConn{Conn: conn, writes: &writes}, err
	}
	payload := []byte(`"` + strings.Repeat("x", 98) + `"`)
	for _, n := range []int{32, maxCoalescedBytes / 150} {
		ms := make([]Message, n)
		for i := range ms {
			ms[i] = Message{Payload: payload, Delay: time.Hour}
		}
		writes.Store(0)
		if _, err := c.PutBatch(context.Background(), "t", ms); err != nil {
			t.Fatal(err)
		}
		if got := writes.Load(); got != 1 {
			t.Errorf("a batch of %d puts of 100 bytes was written in %d writes; want 1", n, got)
		}
	}
}
