package server

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tockwheel/tock/api"
	"github.com/tockwheel/tock/delayq"
)

// startServe serves s with Serve on a loopback port until the test ends,
// and returns the port's address.
func startServe(t *testing.T, s *Server) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- s.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		s.Shutdown(ctx)
		if err := <-served; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("Serve returned %v after Shutdown; want http.ErrServerClosed", err)
		}
	})
	return ln.Addr().String()
}

// newServed is a Server of a fresh delayq queue, served with Serve.
func newServed(t *testing.T, opts ...Option) (*Server, string) {
	t.Helper()
	q, err := delayq.Open(t.TempDir(), delayq.WithNoSync())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })
	s := New(q, opts...)
	return s, startServe(t, s)
}

// rawRequest writes req on a new connection to addr and returns the
// connection.
func rawRequest(t *testing.T, addr, req string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	return c
}

// readJSONAnswer reads one answer from c, failing unless it arrives within
// timeout as a JSON error, and returns its status and error body.
func readJSONAnswer(t *testing.T, c net.Conn, timeout time.Duration) (int, api.ErrorBody) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(timeout))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer within %v: %v", timeout, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var e api.ErrorBody
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" || json.Unmarshal(body, &e) != nil || e.Message == "" || e.Code == "" {
		t.Fatalf("answer %d (%s) %q is not a JSON error with a code", resp.StatusCode, ct, body)
	}
	return resp.StatusCode, e
}

// TestServeAnswersJSON checks the answers net/http writes on its own,
// before any handler runs: Serve turns each into a JSON error with the same
// status and a message saying what was wrong, and headers that do not
// arrive in time get a 408 rather than a silent close.
func TestServeAnswersJSON(t *testing.T) {
	_, addr := newServed(t, WithConnLimits(ConnLimits{HeaderTimeout: 300 * time.Millisecond}))
	for _, tc := range []struct {
		name, req string
		status    int
		code, msg string
	}{
		{"garbage", "GARBAGE\r\n\r\n", 400, "bad_request", "malformed HTTP request"},
		{"no Host", "GET /healthz HTTP/1.1\r\n\r\n", 400, "bad_request", "missing required Host header"},
		{"bad header", "GET /healthz HTTP/1.1\r\nHost: x\r\nBad Header: x\r\n\r\n", 400, "bad_request", "header"},
		{"headers over the limit", "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("a", MaxHeaderBytes+10<<10) + "\r\n\r\n",
			431, "headers_too_large", "request headers too large"},
		{"HTTP/3.0", "GET /healthz HTTP/3.0\r\nHost: x\r\n\r\n", 505, "http_version", "version"},
		{"unknown transfer encoding", "POST /v1/ack HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n", 501, "not_implemented", "transfer encoding"},
		{"unknown expectation", "POST /v1/ack HTTP/1.1\r\nHost: x\r\nExpect: magic\r\nContent-Length: 2\r\n\r\n", 417, "expectation_failed", "100-continue"},
		{"slow headers", "GET /healthz HTTP/1.1\r\nHost: x\r\n", 408, "header_timeout", "did not arrive in time"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := rawRequest(t, addr, tc.req)
			status, e := readJSONAnswer(t, c, 10*time.Second)
			if status != tc.status || e.Code != tc.code || !strings.Contains(strings.ToLower(e.Message), strings.ToLower(tc.msg)) {
				t.Errorf("%d %+v, want %d %s saying %q", status, e, tc.status, tc.code, tc.msg)
			}
		})
	}
}

// TestShutdownClosesWhatIsLeft starts a put whose body never ends and shuts
// down: Shutdown waits for it until its context ends, then closes the
// connection and says so, and the metrics counted the connection.
func TestShutdownClosesWhatIsLeft(t *testing.T) {
	q, err := delayq.Open(t.TempDir(), delayq.WithNoSync())
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	s := New(q)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- s.Serve(ln) }()
	c := rawRequest(t, ln.Addr().String(), "POST /v1/topics/t/messages HTTP/1.1\r\nHost: 127.0.0.1\r\n"+
		"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"payload\":")
	// The put must be in its handler, reading the body, before Shutdown: net/http drops a request
	// it reads after Shutdown began (it closes the connection, runs no handler), and then nothing
	// is in flight for Shutdown to wait for. An accepted connection (ConnStats().Open) is not yet
	// a request read, as a loaded machine showed (Shutdown returned nil).
	inFlight := `tock_http_requests_in_flight{route="` + api.RoutePut + `"} 1` + "\n"
	for !strings.Contains(string(serve(t, s, "GET", "/metrics", "").body), inFlight) {
		time.Sleep(time.Millisecond)
	}
	if got := serve(t, s, "GET", "/metrics", "").body; !strings.Contains(string(got), "tock_http_connections 1\n") {
		t.Errorf("metrics do not count the open connection:\n%s", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	err = s.Shutdown(ctx)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "closed 1 connection") {
		t.Errorf("Shutdown with a body still arriving: %v; want it to say it closed 1 connection", err)
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		t.Errorf("Serve returned %v; want http.ErrServerClosed", err)
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadAll(c); err != nil {
		t.Errorf("the connection was not closed: %v", err)
	}
	if st := s.ConnStats(); st.Open != 0 {
		t.Errorf("%+v after Shutdown; want no connection open", st)
	}
}
