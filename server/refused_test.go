package server

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tockwheel/tock/delayq"
)

// loopbackConn is a pipe connection that says it arrived on 127.0.0.1, so
// that the Host check applies to it.
type loopbackConn struct{ net.Conn }

func (loopbackConn) LocalAddr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 7070} }

// TestRefusedSlowBodyIsAnsweredAtOnce sends requests that the server
// answers without reading their bodies, or after reading only part of one,
// and then trickles the rest of the body a byte every 2 s. net/http reads
// what is left of a body before it writes the answer, with no deadline: the
// answer waited for the whole body, and a client could hold the connection
// for good. Each must be answered at once, with "Connection: close", and
// its connection closed at the body timeout.
func TestRefusedSlowBodyIsAnsweredAtOnce(t *testing.T) {
	const token = "0123456789abcdef"
	for _, tc := range []struct {
		name, head string // request line and headers but Content-Length
		body       string // the part of the body sent at once
		status     int
	}{
		{"wrong host", "POST /v1/topics/t/messages HTTP/1.1\r\nHost: evil.example\r\nAuthorization: Bearer " + token +
			"\r\nContent-Type: application/json\r\n", `{"payload":`, http.StatusMisdirectedRequest},
		{"no token", "POST /v1/topics/t/messages HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n",
			`{"payload":`, http.StatusUnauthorized},
		{"cross-site", "POST /v1/topics/t/messages HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer " + token +
			"\r\nOrigin: https://evil.example\r\nSec-Fetch-Site: cross-site\r\nContent-Type: application/json\r\n",
			`{"payload":`, http.StatusForbidden},
		{"not JSON", "POST /v1/topics/t/messages HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer " + token +
			"\r\nContent-Type: text/plain\r\n", `{"payload":`, http.StatusUnsupportedMediaType},
		{"no route", "POST /v1/nowhere HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer " + token +
			"\r\nContent-Type: application/json\r\n", `{"payload":`, http.StatusNotFound},
		{"wrong method", "PUT /v1/ack HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer " + token +
			"\r\nContent-Type: application/json\r\n", `{"receipts":`, http.StatusMethodNotAllowed},
		{"malformed JSON", "POST /v1/topics/t/messages HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer " + token +
			"\r\nContent-Type: application/json\r\n", `{"payload":x`, http.StatusBadRequest},
		{"route without a body", "GET /v1/stats HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer " + token +
			"\r\nContent-Type: application/json\r\n", `{`, http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			synctest.Test(t, func(t *testing.T) {
				q, err := delayq.Open(dir, delayq.WithNoSync())
				if err != nil {
					t.Fatal(err)
				}
				defer q.Close()
				const timeout = 5 * time.Second
				s := New(q, WithToken(token), WithLimits(Limits{BodyTimeout: timeout}))
				l := newPipeListener()
				hs := &http.Server{Handler: s, ReadHeaderTimeout: time.Second}
				go hs.Serve(l)
				defer hs.Close()

				c, sc := net.Pipe()
				l.conns <- loopbackConn{sc}
				defer c.Close()
				start := time.Now()
				c.SetReadDeadline(start.Add(4 * timeout)) // fail rather than wait for the whole body
				stop := make(chan struct{})
				defer close(stop)
				go func() {
					if _, err := io.WriteString(c, tc.head+"Content-Length: 1000\r\n\r\n"+tc.body); err != nil {
						return
					}
					for {
						select {
						case <-stop:
							return
						case <-time.After(2 * time.Second):
						}
						if _, err := c.Write([]byte(" ")); err != nil {
							return
						}
					}
				}()
				br := bufio.NewReader(c)
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					t.Fatalf("no answer before the body ended: %v", err)
				}
				if took := time.Since(start); resp.StatusCode != tc.status || took != 0 || !resp.Close {
					t.Fatalf("answer %d after %v, closing the connection: %v; want %d at once, closing it", resp.StatusCode, took, resp.Close, tc.status)
				}
				if _, err := io.Copy(io.Discard, br); err != nil {
					t.Fatalf("the connection is still open %v later: %v", time.Since(start), err)
				}
				if took := time.Since(start); took != timeout {
					t.Errorf("the connection closed %v after the request; want the body timeout, %v", took, timeout)
				}
			})
		})
	}
}

// TestServedBodyKeepsTheConnection checks that an answer to a request
// whose body was read whole keeps its connection, and a refused request
// whose body had arrived whole closes it: the client has sent everything,
// but the server cannot tell without reading it.
func TestServedBodyKeepsTheConnection(t *testing.T) {
	ts, _ := newTestServer(t)
	for _, tc := range []struct {
		name, contentType string
		close             bool
	}{
		{"served", "application/json", false},
		{"refused", "text/plain", true},
	} {
		req, _ := http.NewRequest("POST", ts.URL+"/v1/topics/t/messages", strings.NewReader(`{"payload":1}`))
		req.Header.Set("Content-Type", tc.contentType)
		resp, err := ts.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.Close != tc.close {
			t.Errorf("%s: answer %d closes the connection: %v; want %v", tc.name, resp.StatusCode, resp.Close, tc.close)
		}
	}
}
