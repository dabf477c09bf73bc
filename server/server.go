package server

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"
)

// A Server serves a Store over HTTP. It is an http.Handler, safe for
// concurrent use; its zero value is not usable, call New.
type Server struct {
	store    Store
	limits   Limits
	tokenSum []byte // sha256 of the token; nil: no auth
	log      *slog.Logger
	started  time.Time
	now      func() time.Time // time.Now; tests move it to look at the stats later

	mux      *http.ServeMux
	metrics  *metrics
	activity activity

	drainOnce sync.Once
	drained   chan struct{} // closed by Drain
}

// An Option configures a Server.
type Option func(*Server)

// WithToken requires "Authorization: Bearer token" (or token as the Basic
// auth password) on every route but /healthz. An empty token requires none.
func WithToken(token string) Option {
	return func(s *Server) {
		if token == "" {
			s.tokenSum = nil
			return
		}
		sum := sha256.Sum256([]byte(token))
		s.tokenSum = sum[:]
	}
}

// WithLimits bounds requests; zero fields keep their defaults.
func WithLimits(l Limits) Option { return func(s *Server) { s.limits = l.withDefaults() } }

// WithLogger logs store failures (answered with 500) to l instead of
// slog.Default().
func WithLogger(l *slog.Logger) Option { return func(s *Server) { s.log = l } }

// withClock makes the server read the time from now, for tests.
func withClock(now func() time.Time) Option { return func(s *Server) { s.now = now } }

// New returns a Server of store. The Server does not own store: closing
// the store, after the HTTP server in front has shut down, is the caller's.
func New(store Store, opts ...Option) *Server {
	s := &Server{
		store:   store,
		limits:  Limits{}.withDefaults(),
		log:     slog.Default(),
		started: time.Now(),
		now:     time.Now,
		mux:     http.NewServeMux(),
		drained: make(chan struct{}),
	}
	for _, o := range opts {
		o(s)
	}
	s.metrics = newMetrics(store)
	s.route("POST /v1/topics/{topic}/messages", s.handlePut)
	s.route("POST /v1/topics/{topic}/batch", s.handleBatch)
	s.route("DELETE /v1/messages/{id}", s.handleCancel)
	s.route("POST /v1/topics/{topic}/receive", s.handleReceive)
	s.route("POST /v1/ack", s.handleAck)
	s.route("POST /v1/nack", s.handleNack)
	s.route("GET /v1/stats", s.handleStats)
	s.route("GET /healthz", s.handleHealth)
	s.route("GET /readyz", s.handleReady)
	s.route("GET /{$}", s.handleStatusPage)
	s.mux.Handle("GET /metrics", s.metrics.instrument("GET /metrics", s.metrics.handler()))
	return s
}

// A handlerFunc handles a request and returns a client's or the store's
// error for the server to answer.
type handlerFunc func(w http.ResponseWriter, r *http.Request) error

func (s *Server) route(pattern string, h handlerFunc) {
	s.mux.Handle(pattern, s.metrics.instrument(pattern, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := h(w, r); err != nil {
			s.fail(w, r, err)
		}
	})))
}

// ServeHTTP checks the token, then routes r. Requests that match no route
// are answered with a JSON 404 or 405, like every other error.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/healthz" && !s.authorized(r) {
		unauthorized(w, r)
		return
	}
	if _, pattern := s.mux.Handler(r); pattern == "" {
		// The mux answers in plain text (or redirects to a clean path);
		// keep its status and headers, replace an error's body.
		s.mux.ServeHTTP(&jsonErrorWriter{ResponseWriter: w}, r)
		return
	}
	s.mux.ServeHTTP(w, r)
}

// Drain makes /readyz answer 503 and ends every long poll at once with what
// it has, so that an http.Server.Shutdown that follows does not wait out
// their waits. Later receives do not wait. Drain is idempotent.
func (s *Server) Drain() {
	s.drainOnce.Do(func() { close(s.drained) })
}

func (s *Server) draining() bool {
	select {
	case <-s.drained:
		return true
	default:
		return false
	}
}

// fail answers err: a client's mistake with its 4xx, the store's state
// with 503, anything else with a logged 500.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	var re *requestError
	switch {
	case errors.As(err, &re):
	case errors.Is(err, ErrInvalid):
		re = &requestError{http.StatusBadRequest, err.Error()}
	case errors.Is(err, ErrNotFound):
		re = &requestError{http.StatusNotFound, err.Error()}
	case errors.Is(err, ErrTooLarge):
		re = &requestError{http.StatusRequestEntityTooLarge, err.Error()}
	case errors.Is(err, ErrUnavailable):
		re = &requestError{http.StatusServiceUnavailable, err.Error()}
	case r.Context().Err() != nil:
		// The client went away; nobody reads an answer.
		return
	default:
		s.log.Error("store failed", "method", r.Method, "path", r.URL.Path, "err", err)
		re = &requestError{http.StatusInternalServerError, "internal error: " + err.Error()}
	}
	writeError(w, re)
}

func writeError(w http.ResponseWriter, e *requestError) {
	writeJSON(w, e.status, struct {
		Error string `json:"error"`
	}{e.msg})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	// An error here is the client hanging up mid-answer; nothing to do.
	_ = json.NewEncoder(w).Encode(v)
}

// jsonErrorWriter turns the mux's plain-text 404 and 405 answers into JSON
// errors, keeping their headers (Allow on a 405).
type jsonErrorWriter struct {
	http.ResponseWriter
	status int
}

func (w *jsonErrorWriter) WriteHeader(code int) {
	w.status = code
	if code < 400 {
		w.ResponseWriter.WriteHeader(code)
		return
	}
	msg := http.StatusText(code)
	switch code {
	case http.StatusNotFound:
		msg = "no such route; see the API reference"
	case http.StatusMethodNotAllowed:
		msg = fmt.Sprintf("method not allowed; allowed: %s", w.Header().Get("Allow"))
	}
	w.Header().Del("X-Content-Type-Options")
	writeError(w.ResponseWriter, &requestError{code, msg})
}

func (w *jsonErrorWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	if w.status >= 400 {
		return len(p), nil // the JSON body is already written
	}
	return w.ResponseWriter.Write(p)
}

func (s *Server) handleHealth(w http.ResponseWriter, r *http.Request) error {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	return nil
}

func (s *Server) handleReady(w http.ResponseWriter, r *http.Request) error {
	if s.draining() {
		return &requestError{http.StatusServiceUnavailable, "shutting down"}
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
	return nil
}

// receiveContext bounds a long poll: it ends after wait, when the client
// goes away, or when the server drains.
func (s *Server) receiveContext(parent context.Context, wait time.Duration) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(parent, wait)
	stop := context.AfterFunc(drainContext{s.drained}, cancel)
	return ctx, func() { stop(); cancel() }
}

// drainContext is a context that ends when the server drains, so that
// context.AfterFunc can watch the drain without a goroutine per request.
type drainContext struct{ done chan struct{} }

func (drainContext) Deadline() (time.Time, bool) { return time.Time{}, false }
func (c drainContext) Done() <-chan struct{}     { return c.done }
func (c drainContext) Value(any) any             { return nil }
func (c drainContext) Err() error {
	select {
	case <-c.done:
		return context.Canceled
	default:
		return nil
	}
}
