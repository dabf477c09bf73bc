package server

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"
)

// MaxHeaderBytes bounds the request headers [Server.Serve] reads, in bytes:
// a request whose headers are larger is answered 431.
const MaxHeaderBytes = 64 << 10

// ConnLimits bounds the connections of [Server.Serve]: how many may be open
// at once and how long a client may take between requests and over its
// headers. (How long a body may take is [Limits.BodyTimeout].) The zero
// value of a field means its default; a negative value is refused (see
// [ConnLimits.Validate]).
type ConnLimits struct {
	// MaxConns is the most connections open at once (default
	// [DefaultMaxConns]). At the limit a new connection takes the place of
	// the one idle longest between requests, or else of the one that has
	// waited longest for a request's headers or body; only when every
	// connection is serving a request is the new one turned away, with 503
	// and Retry-After (over TLS, closed).
	MaxConns int
	// HeaderTimeout bounds the time a request's headers may take to arrive
	// (default 10s). Headers cut short by it are answered 408.
	HeaderTimeout time.Duration
	// IdleTimeout closes a connection idle between requests for this long
	// (default 1m).
	IdleTimeout time.Duration
}

// Validate reports the first field of l that is negative. [New] panics
// with this error for the limits of [WithConnLimits]; a program that reads
// limits from its configuration calls Validate first.
func (l ConnLimits) Validate() error {
	switch {
	case l.MaxConns < 0:
		return fmt.Errorf("server: ConnLimits.MaxConns is negative (%d); zero means the default", l.MaxConns)
	case l.HeaderTimeout < 0:
		return fmt.Errorf("server: ConnLimits.HeaderTimeout is negative (%v); zero means the default", l.HeaderTimeout)
	case l.IdleTimeout < 0:
		return fmt.Errorf("server: ConnLimits.IdleTimeout is negative (%v); zero means the default", l.IdleTimeout)
	}
	return nil
}

func (l ConnLimits) withDefaults() ConnLimits {
	if l.MaxConns <= 0 {
		l.MaxConns = DefaultMaxConns()
	}
	if l.HeaderTimeout <= 0 {
		l.HeaderTimeout = 10 * time.Second
	}
	if l.IdleTimeout <= 0 {
		l.IdleTimeout = time.Minute
	}
	return l
}

// maxConnsCap bounds DefaultMaxConns, and fdReserve is what it leaves of
// the open-files limit for the engine's files and the process's own.
const (
	maxConnsCap = 10000
	fdReserve   = 128
)

// DefaultMaxConns is the default of [ConnLimits.MaxConns]: the process's
// limit of open files less 128 for the engine's files and the process's
// own, at least 16 and at most 10,000; 10,000 where the limit is unknown.
func DefaultMaxConns() int {
	n := openFilesLimit()
	if n <= 0 {
		return maxConnsCap
	}
	return max(16, min(maxConnsCap, n-fdReserve))
}

// WithConnLimits bounds the connections of [Server.Serve]. Zero fields keep
// their defaults; [New] panics when [ConnLimits.Validate] refuses l. A
// Server used as an [http.Handler] behind an http.Server of the caller's
// ignores it.
func WithConnLimits(l ConnLimits) Option { return func(c *config) { c.conns = l } }

// WithTLS makes [Server.Serve] serve HTTPS with cfg, which must hold a
// certificate. The server speaks HTTP/1.1 over it, whatever cfg's
// NextProtos say, and its handlers see no [http.Request.TLS]: the
// connection policy sits between TLS and HTTP. A nil cfg, the default,
// means plain HTTP.
func WithTLS(cfg *tls.Config) Option { return func(c *config) { c.tls = cfg } }

// newHTTPServer returns the http.Server of Serve, with the connection
// policy of c.
func (s *Server) newHTTPServer(c config) {
	var tlsConfig *tls.Config
	if c.tls != nil {
		tlsConfig = c.tls.Clone()
		tlsConfig.NextProtos = []string{"http/1.1"}
	}
	cl := c.conns.withDefaults()
	s.conns = newConnLimiter(cl.MaxConns, tlsConfig, s.log)
	var http1 http.Protocols
	http1.SetHTTP1(true)
	s.http = &http.Server{
		Handler:           s.conns.handler(s),
		ReadHeaderTimeout: cl.HeaderTimeout,
		// Covers the body, the handling (a long poll's wait at most) and the
		// answer, so that a client that does not read its answer cannot
		// hold a handler either.
		WriteTimeout:   s.limits.BodyTimeout + s.limits.MaxWait + 30*time.Second,
		IdleTimeout:    cl.IdleTimeout,
		MaxHeaderBytes: MaxHeaderBytes,
		ConnState:      s.conns.connState,
		ConnContext:    s.conns.connContext,
		Protocols:      &http1,
		ErrorLog:       slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
}

// Serve accepts connections on ln and serves the API on them, each in a
// goroutine of its own, until [Server.Shutdown]; it then returns
// [http.ErrServerClosed], and any other error of ln's Accept at once.
// Serve may be called for several listeners at once; they share the
// limits.
//
// Serve applies a connection policy that an [http.Server] of the caller's
// would not: the connections of [ConnLimits] (a cap, at which the idlest or
// slowest connection makes room for a new one; header and idle timeouts),
// [Limits.BodyTimeout] on request bodies, a write timeout that a client
// which does not read its answers cannot outlast, and JSON errors even for
// the requests that net/http answers itself before any handler runs
// (malformed requests, headers over [MaxHeaderBytes] or cut short by the
// header timeout). With [WithTLS] it serves HTTPS.
func (s *Server) Serve(ln net.Listener) error {
	return s.http.Serve(limitedListener{Listener: ln, l: s.conns})
}

// closeGrace is how long Shutdown waits for handlers once it has closed
// their connections.
const closeGrace = 2 * time.Second

// Shutdown stops [Server.Serve] gracefully: it drains the Server (see
// [Server.Drain]: long polls end at once), closes the listeners and waits
// for the requests in flight to be answered, until ctx ends. Then it closes
// the connections still open and waits up to 2 s more for their handlers to
// return (a closed connection ends a handler's reads and writes at once; a
// handler still inside an engine call returns when the call does).
//
// Shutdown returns nil when every request was answered in time, and
// otherwise an error wrapping ctx's saying how many connections it closed.
// It does not close the engine, which the caller closes after Shutdown
// returns. Later calls to Serve return [http.ErrServerClosed].
func (s *Server) Shutdown(ctx context.Context) error {
	s.Drain()
	err := s.http.Shutdown(ctx)
	if err == nil || ctx.Err() == nil {
		return err
	}
	open := s.conns.stats().Open
	_ = s.http.Close()
	if !s.conns.waitHandlers(closeGrace) {
		return fmt.Errorf("server: shutdown: closed %d connections still open, and handlers still run %v later: %w",
			open, closeGrace, err)
	}
	return fmt.Errorf("server: shutdown: closed %d connections still open: %w", open, err)
}

// ConnStats counts the connections of [Server.Serve].
type ConnStats struct {
	Open    int   // connections open now
	Shed    int64 // connections closed to make room for new ones, since New
	Refused int64 // connections turned away because every one was busy, since New
}

// ConnStats returns the connections of [Server.Serve] open now, and those
// shed and refused at the connection limit since [New]. /metrics exports
// them too.
func (s *Server) ConnStats() ConnStats { return s.conns.stats() }
