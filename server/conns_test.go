package server

import (
	"bufio"
	"io"
	"log/slog"
	"net"
	"net/http"
	"testing"
	"testing/synctest"
	"time"
)

// send writes s on c without waiting for the server to read it (a pipe
// has no buffer).
func send(c net.Conn, s string) { go io.WriteString(c, s) }

// closedByServer reports whether the server end of c is closed.
func closedByServer(c net.Conn) bool {
	c.SetReadDeadline(time.Now().Add(time.Millisecond))
	defer c.SetReadDeadline(time.Time{})
	_, err := c.Read(make([]byte, 1))
	return err == io.EOF
}

// TestLimiterMakesRoomFromIdleThenSlow checks the order in which a full
// connLimiter makes room: the connection idle longest, then the one that
// has waited longest for its request, never one whose request is being
// served; with none to close, the new connection gets a JSON 503.
func TestLimiterMakesRoomFromIdleThenSlow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		pl := newPipeListener()
		l := newConnLimiter(3, nil, slog.New(slog.DiscardHandler))
		release := make(chan struct{})
		mux := http.NewServeMux()
		mux.HandleFunc("/quick", func(w http.ResponseWriter, r *http.Request) {})
		mux.HandleFunc("/block", func(w http.ResponseWriter, r *http.Request) { <-release })
		hs := &http.Server{Handler: l.handler(mux), ConnState: l.connState, ConnContext: l.connContext}
		go hs.Serve(limitedListener{pl, l})

		idle := pl.dial()
		send(idle, "GET /quick HTTP/1.1\r\nHost: x\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(idle), nil)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("quick request: %v, %v", resp, err)
		}
		slowHeaders := pl.dial()
		send(slowHeaders, "GET /quick HTTP/1.1\r\n")
		busy := pl.dial()
		send(busy, "GET /block HTTP/1.1\r\nHost: x\r\n\r\n")
		synctest.Wait()

		// Full: the idle connection makes room first...
		next := pl.dial()
		synctest.Wait()
		if !closedByServer(idle) || closedByServer(slowHeaders) || closedByServer(busy) {
			t.Fatal("the first connection over the limit did not replace the idle one")
		}
		// ... then the one waiting longest for its headers, not the newer one.
		last := pl.dial()
		synctest.Wait()
		if !closedByServer(slowHeaders) || closedByServer(next) || closedByServer(busy) {
			t.Fatal("the second connection over the limit did not replace the slowest one")
		}
		// A request whose body is on its way is as slow as one whose headers are.
		send(next, "POST /block HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n{")
		send(last, "GET /block HTTP/1.1\r\nHost: x\r\n\r\n")
		synctest.Wait()
		extra := pl.dial()
		synctest.Wait()
		if !closedByServer(next) || closedByServer(last) || closedByServer(busy) {
			t.Fatal("the connection over the limit did not replace the one sending its body")
		}

		// Every connection busy: the next one is turned away.
		send(extra, "GET /block HTTP/1.1\r\nHost: x\r\n\r\n")
		synctest.Wait()
		refused := pl.dial()
		resp, err = http.ReadResponse(bufio.NewReader(refused), nil)
		if err != nil || resp.StatusCode != 503 || resp.Header.Get("Content-Type") != "application/json" || resp.Header.Get("Retry-After") != "1" {
			t.Fatalf("connection over a limit of busy ones: %v, %v; want a JSON 503 with Retry-After", resp, err)
		}
		refused.Close()
		if st := l.stats(); st != (ConnStats{Open: 3, Shed: 3, Refused: 1}) {
			t.Errorf("stats: %+v; want 3 open, 3 shed, 1 refused", st)
		}
		close(release)
		for _, c := range []net.Conn{busy, last, extra} {
			if resp, err := http.ReadResponse(bufio.NewReader(c), nil); err != nil || resp.StatusCode != 200 {
				t.Errorf("busy request: %v, %v; want it served", resp, err)
			}
		}
		hs.Close()
		synctest.Wait()
	})
}

// TestHeaderTimeoutAnswers408 checks that headers cut short by the header
// timeout get a JSON 408, while a connection that sent nothing, or went
// idle after a request, is closed without a word, as HTTP/1.1 expects.
func TestHeaderTimeoutAnswers408(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		pl := newPipeListener()
		l := newConnLimiter(10, nil, slog.New(slog.DiscardHandler))
		hs := &http.Server{
			Handler:           l.handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})),
			ReadHeaderTimeout: time.Second, IdleTimeout: 5 * time.Second,
			ConnState: l.connState, ConnContext: l.connContext,
		}
		go hs.Serve(limitedListener{pl, l})

		slow := pl.dial()
		send(slow, "GET / HTTP/1.1\r\nHost: x\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(slow), nil)
		if err != nil || resp.StatusCode != 408 || resp.Header.Get("Content-Type") != "application/json" {
			t.Fatalf("slow headers: %v, %v; want a JSON 408", resp, err)
		}

		silent := pl.dial()
		if b, err := io.ReadAll(silent); len(b) != 0 || err != nil {
			t.Errorf("connection that sent nothing: read %q, %v; want a silent close", b, err)
		}

		idle := pl.dial()
		send(idle, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
		br := bufio.NewReader(idle)
		if resp, err := http.ReadResponse(br, nil); err != nil || resp.StatusCode != 200 {
			t.Fatalf("request: %v, %v", resp, err)
		}
		if b, err := io.ReadAll(br); len(b) != 0 || err != nil {
			t.Errorf("idle connection: read %q, %v; want a silent close", b, err)
		}
		hs.Close()
		synctest.Wait()
	})
}
