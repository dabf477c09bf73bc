package server

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tockwheel/tock/api"
	"github.com/tockwheel/tock/delayq"
)

// pipeListener hands net.Pipe connections to an http.Server, so that a
// server's timeouts can be tested in a synctest bubble, on its fake clock.
type pipeListener struct {
	conns chan net.Conn
	done  chan struct{}
}

func newPipeListener() *pipeListener {
	return &pipeListener{conns: make(chan net.Conn), done: make(chan struct{})}
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error   { close(l.done); return nil }
func (l *pipeListener) Addr() net.Addr { return pipeAddr{} }

// dial returns the client end of a new connection to the server.
func (l *pipeListener) dial() net.Conn {
	c, s := net.Pipe()
	l.conns <- s
	return c
}

type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return "pipe" }

// TestSlowBodyIsCutAtTheBodyTimeout sends the first bytes of a put's body
// and then nothing, as a client that sends a byte every few seconds does
// between its bytes. The server must answer 408 with a JSON error once the
// body timeout has passed, rather than hold the connection for good (only
// headers had a timeout), and a long poll after a quick body must not be
// cut by that deadline.
func TestSlowBodyIsCutAtTheBodyTimeout(t *testing.T) {
	dir := t.TempDir()
	synctest.Test(t, func(t *testing.T) {
		// The queue is opened in the bubble, so that a receive waiting on
		// it blocks on the bubble's clock.
		q, err := delayq.Open(dir, delayq.WithNoSync())
		if err != nil {
			t.Fatal(err)
		}
		defer q.Close()
		const timeout = 5 * time.Second
		s := New(q, WithLimits(Limits{BodyTimeout: timeout}))
		l := newPipeListener()
		hs := &http.Server{Handler: s, ReadHeaderTimeout: time.Second}
		go hs.Serve(l)
		defer hs.Shutdown(context.Background())

		c := l.dial()
		defer c.Close()
		start := time.Now()
		c.SetReadDeadline(start.Add(10 * timeout)) // fail rather than hang without a body timeout
		go io.WriteString(c, "POST /v1/topics/slow/messages HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"+
			"Content-Length: 100\r\n\r\n{\"payload\":")
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		var e api.ErrorBody
		if err := json.NewDecoder(resp.Body).Decode(&e); err != nil {
			t.Fatal(err)
		}
		if took := time.Since(start); resp.StatusCode != http.StatusRequestTimeout || e.Code != api.CodeBodyTimeout || took != timeout {
			t.Fatalf("slow body: %d %+v after %v; want 408 %q after %v", resp.StatusCode, e, took, api.CodeBodyTimeout, timeout)
		}

		// A receive whose body came at once waits its whole wait, longer
		// than the body timeout, and answers 200.
		c2 := l.dial()
		defer c2.Close()
		start = time.Now()
		body := `{"wait":"15s"}`
		go io.WriteString(c2, "POST /v1/topics/idle/receive HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"+
			"Content-Length: 14\r\n\r\n"+body)
		resp, err = http.ReadResponse(bufio.NewReader(c2), nil)
		if err != nil {
			t.Fatal(err)
		}
		if took := time.Since(start); resp.StatusCode != 200 || took != 15*time.Second {
			t.Fatalf("long poll: %d after %v; want 200 after 15s", resp.StatusCode, took)
		}
	})
}
