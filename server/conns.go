package server

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tockwheel/tock/api"
)

// A connLimiter is the connection policy of [Server.Serve]. It caps the
// connections open at once, so that slow or idle clients cannot take every
// file descriptor (accept then fails with "too many open files" and even
// /healthz stops answering), and it makes room for a new connection by
// closing the one least likely to be doing useful work:
//
//  1. the connection idle longest between requests (keep-alive), then
//  2. the connection that has spent longest on a request whose headers or
//     body have not arrived yet: a client sending a byte now and then.
//
// Connections whose request has arrived and is being handled (a put waiting
// for its fsync, a long poll, an answer being written) are never closed to
// make room. Only when every connection is of that kind is a new one turned
// away, with a JSON 503 and Retry-After. So an attack by slow clients
// costs legitimate clients nothing but the cap: /healthz and puts keep
// answering, as tockd's end-to-end test checks with hundreds of slow
// connections.
//
// The limiter also serves TLS when given a config, and rewrites the answers
// that net/http writes on its own before any handler runs (see
// trackedConn.Write). To do so it must sit above TLS, so that net/http sees
// its connections rather than *tls.Conn: the server speaks HTTP/1.1 only,
// and handlers see no r.TLS.
//
// One connLimiter serves every listener of a Server. It is safe for
// concurrent use.
type connLimiter struct {
	tls *tls.Config // nil: plain HTTP
	max int
	log *slog.Logger

	mu   sync.Mutex
	open int      // connections accepted and not closed
	idle connList // idle between requests, oldest first
	slow connList // waiting for a request's headers or body, oldest first

	shed, refused atomic.Int64 // connections closed to make room, turned away
	lastWarn      atomic.Int64 // Unix nanoseconds of the last warning about the limit

	handlers sync.WaitGroup // handlers running, for shutdown
	refusing chan struct{}  // bounds the goroutines answering refused connections
}

func newConnLimiter(max int, tlsConfig *tls.Config, log *slog.Logger) *connLimiter {
	return &connLimiter{max: max, tls: tlsConfig, log: log, refusing: make(chan struct{}, 64)}
}

// A conn's place in the limiter: which list it is on.
const (
	onNone = iota // busy in a handler, or closed
	onIdle
	onSlow
)

// trackedConn is a connection of a connLimiter, as net/http sees it.
type trackedConn struct {
	net.Conn
	l *connLimiter

	raw net.Conn // the TCP connection, under TLS if any

	// Guarded by l.mu. A connection joins the tail of its list, so the
	// head of each list is the one that has been on it longest.
	list       int
	prev, next *trackedConn
	bodyDone   bool // the running handler's request body has been read to its end
	closed     bool

	// inHandler is set when a handler starts and cleared when the
	// connection goes idle; atomic, for Read and Write, which must not take
	// l.mu.
	inHandler atomic.Bool
	// partial counts the bytes of a request read before its handler starts:
	// a read deadline that passes with some read is a request too slow to
	// arrive, not an idle connection.
	partial atomic.Int64
}

// limitedListener is a listener whose connections a connLimiter keeps.
type limitedListener struct {
	net.Listener
	l *connLimiter
}

// Accept waits for a connection and returns it, making room for it first
// when the limiter is full.
func (ll limitedListener) Accept() (net.Conn, error) {
	l := ll.l
	for {
		raw, err := ll.Listener.Accept()
		if err != nil {
			return nil, err
		}
		l.mu.Lock()
		full := l.open >= l.max
		if full && !l.shedLocked() {
			l.mu.Unlock()
			l.refuse(raw)
			l.warn()
			continue
		}
		c := &trackedConn{Conn: raw, l: l, raw: raw}
		if l.tls != nil {
			c.Conn = tls.Server(raw, l.tls)
		}
		l.open++
		l.slow.pushLocked(c, onSlow)
		l.mu.Unlock()
		if full {
			l.warn()
		}
		return c, nil
	}
}

// warn logs, at most every ten seconds, that the limit was reached.
func (l *connLimiter) warn() {
	now, last := time.Now().UnixNano(), l.lastWarn.Load()
	if now-last < int64(10*time.Second) || !l.lastWarn.CompareAndSwap(last, now) {
		return
	}
	l.log.Warn("at the connection limit: closing idle and slow connections to make room",
		"max_conns", l.max, "shed", l.shed.Load(), "refused", l.refused.Load())
}

// shedLocked closes the connection that is idle longest, or else the one
// waiting longest for a request's headers or body, and reports whether
// there was one.
func (l *connLimiter) shedLocked() bool {
	victim := l.idle.head
	if victim == nil {
		victim = l.slow.head
	}
	if victim == nil {
		return false
	}
	l.closeLocked(victim)
	// The descriptor is freed now, not when net/http notices. Closing the
	// TCP connection rather than the TLS one sends no alert, which could
	// block on a client that does not read.
	_ = victim.raw.Close()
	l.shed.Add(1)
	return true
}

// overCapacity is the answer to a connection turned away. It is written
// before the request is read, which HTTP/1.1 allows for an error that
// closes the connection.
func overCapacity(max int) []byte {
	body, _ := json.Marshal(api.ErrorBody{
		Message: fmt.Sprintf("the server has %d connections open, each serving a request; retry shortly", max),
		Code:    api.CodeUnavailable,
	})
	return fmt.Appendf(nil, "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\n"+
		"Connection: close\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
}

// refuse answers a connection the limiter has no room for with a 503
// (over TLS, which would need a handshake, it just closes it). Reading what
// the client sent before closing keeps the close from resetting the
// connection under the answer; that takes a goroutine, of which at most
// cap(l.refusing) run at once.
func (l *connLimiter) refuse(raw net.Conn) {
	l.refused.Add(1)
	if l.tls != nil {
		_ = raw.Close()
		return
	}
	select {
	case l.refusing <- struct{}{}:
	default:
		_ = raw.Close()
		return
	}
	go func() {
		defer func() { <-l.refusing }()
		defer raw.Close()
		_ = raw.SetDeadline(time.Now().Add(time.Second))
		if _, err := raw.Write(overCapacity(l.max)); err != nil {
			return
		}
		if tc, ok := raw.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(raw, 64<<10))
	}()
}

// connState follows net/http's view of each connection: http.Server.ConnState.
func (l *connLimiter) connState(nc net.Conn, state http.ConnState) {
	c, ok := nc.(*trackedConn)
	if !ok {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if c.closed {
		return
	}
	switch state {
	case http.StateActive:
		// The first bytes of a request: its headers are on their way. A
		// connection that was new stays where it was, so that a client
		// cannot look young by sending a byte.
		if c.list == onIdle {
			l.idle.removeLocked(c)
			l.slow.pushLocked(c, onSlow)
		}
	case http.StateIdle:
		c.bodyDone = false
		c.inHandler.Store(false)
		c.partial.Store(0)
		l.moveLocked(c, &l.idle, onIdle)
	case http.StateHijacked, http.StateClosed:
		l.closeLocked(c)
	}
}

// moveLocked puts c at the tail of list to.
func (l *connLimiter) moveLocked(c *trackedConn, to *connList, which int) {
	l.listOf(c.list).removeLocked(c)
	to.pushLocked(c, which)
}

func (l *connLimiter) listOf(which int) *connList {
	switch which {
	case onIdle:
		return &l.idle
	case onSlow:
		return &l.slow
	}
	return nil
}

// closeLocked forgets c: its descriptor is being closed.
func (l *connLimiter) closeLocked(c *trackedConn) {
	if c.closed {
		return
	}
	c.closed = true
	l.listOf(c.list).removeLocked(c)
	l.open--
}

// CloseWrite shuts down the writing side, as net/http does after an error
// answer so that the client reads it before the connection closes.
func (c *trackedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// Close closes the connection and frees its place.
func (c *trackedConn) Close() error {
	c.l.mu.Lock()
	c.l.closeLocked(c)
	c.l.mu.Unlock()
	return c.Conn.Close()
}

// handler wraps h to tell the limiter when a request's handler starts and
// when its body has arrived, and to count the handlers running.
func (l *connLimiter) handler(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		l.handlers.Add(1)
		defer l.handlers.Done()
		c, _ := r.Context().Value(connKey{}).(*trackedConn)
		if c == nil {
			h.ServeHTTP(w, r)
			return
		}
		c.inHandler.Store(true)
		waiting := r.ContentLength != 0 && r.Body != nil && r.Body != http.NoBody
		if waiting {
			// It stays where it is, among the slow, until its body arrives.
			r.Body = &watchedBody{ReadCloser: r.Body, c: c}
		} else {
			c.bodyArrived()
		}
		h.ServeHTTP(w, r)
	})
}

// bodyArrived marks c's request body as read, or absent: its handler is
// busy now, and c is never closed to make room until it is idle again.
func (c *trackedConn) bodyArrived() {
	c.l.mu.Lock()
	defer c.l.mu.Unlock()
	if c.closed || c.bodyDone {
		return
	}
	c.bodyDone = true
	c.l.listOf(c.list).removeLocked(c)
}

// watchedBody tells its connection when the request body has been read to
// its end (or closed by the handler).
type watchedBody struct {
	io.ReadCloser
	c    *trackedConn
	done bool
}

func (b *watchedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF && !b.done {
		b.done = true
		b.c.bodyArrived()
	}
	return n, err
}

func (b *watchedBody) Close() error {
	if !b.done {
		b.done = true
		b.c.bodyArrived()
	}
	return b.ReadCloser.Close()
}

// connKey is the context key of a request's *trackedConn.
type connKey struct{}

// connContext is http.Server.ConnContext: it lets handlers find their
// connection.
func (l *connLimiter) connContext(ctx context.Context, c net.Conn) context.Context {
	if tc, ok := c.(*trackedConn); ok {
		return context.WithValue(ctx, connKey{}, tc)
	}
	return ctx
}

// waitHandlers waits up to d for the handlers running to return, and
// reports whether they did.
func (l *connLimiter) waitHandlers(d time.Duration) bool {
	done := make(chan struct{})
	go func() {
		l.handlers.Wait()
		close(done)
	}()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	}
}

// stats returns the connections open, and those closed to make room or
// turned away since the start.
func (l *connLimiter) stats() ConnStats {
	l.mu.Lock()
	open := l.open
	l.mu.Unlock()
	return ConnStats{Open: open, Shed: l.shed.Load(), Refused: l.refused.Load()}
}

// connList is a list of connections threaded through them, so that moving
// a connection between lists allocates nothing.
type connList struct{ head, tail *trackedConn }

// pushLocked appends c, which must be on no list, as a member of list which.
func (ls *connList) pushLocked(c *trackedConn, which int) {
	c.list = which
	c.prev, c.next = ls.tail, nil
	if ls.tail != nil {
		ls.tail.next = c
	} else {
		ls.head = c
	}
	ls.tail = c
}

// removeLocked takes c off ls; on a nil ls (c is on no list) it does nothing.
func (ls *connList) removeLocked(c *trackedConn) {
	if ls == nil {
		return
	}
	if c.prev != nil {
		c.prev.next = c.next
	} else {
		ls.head = c.next
	}
	if c.next != nil {
		c.next.prev = c.prev
	} else {
		ls.tail = c.prev
	}
	c.prev, c.next, c.list = nil, nil, onNone
}
