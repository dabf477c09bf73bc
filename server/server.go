package server

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/tockwheel/tock"
	"github.com/tockwheel/tock/api"
	"github.com/tockwheel/tock/queue"
)

// A Server serves a [queue.Engine] over HTTP. It is an [http.Handler], safe
// for concurrent use; its zero value is not usable, call [New].
type Server struct {
	engine   queue.Engine
	admin    queue.Admin   // the engine, if it is one; nil: the admin routes answer 501
	limiter  queue.Limiter // the engine, if it is one; nil: the limit routes answer 501
	limits   Limits
	tokenSum []byte // sha256 of the token; nil: no auth
	log      *slog.Logger
	wheel    *tock.Wheel // times long polls
	origins  *originPolicy
	started  time.Time
	now      func() time.Time // time.Now; tests move it to look at the stats later

	mux      *http.ServeMux
	tracer   trace.Tracer // nil: no spans (see WithTracerProvider)
	metrics  *metrics
	activity activity
	rates    rates
	answers  sync.Pool // *[]byte: buffers answers are appended into (see writeAppended)

	drainOnce sync.Once
	drained   chan struct{} // closed by Drain

	// The connection policy of Serve.
	conns *connLimiter
	http  *http.Server
}

// An Option configures a Server. A nil Option is ignored.
type Option func(*config)

// config is what the options set; New checks it and builds the Server.
type config struct {
	token   string
	limits  Limits
	log     *slog.Logger
	wheel   *tock.Wheel
	origins []string
	hosts   []string
	now     func() time.Time
	conns   ConnLimits
	tls     *tls.Config
	tracer  trace.TracerProvider

	metricsTopics *int // nil: DefaultMetricsTopics
}

// WithToken requires "Authorization: Bearer token" (or token as the Basic
// auth password) on every route but /healthz and /openapi.json. An empty
// token, the default, requires none.
func WithToken(token string) Option { return func(c *config) { c.token = token } }

// WithLimits bounds requests. Zero fields keep their defaults; [New] panics
// when [Limits.Validate] refuses l.
func WithLimits(l Limits) Option { return func(c *config) { c.limits = l } }

// WithLogger logs engine failures (answered with 500) and failed metrics
// scrapes to l. A nil l means [slog.Default], the default.
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.log = l } }

// WithWheel times long polls on w, so that a program can run all of tock on
// one wheel. The Server never stops w. A nil w, the default, means a wheel
// of the Server's own, which holds no goroutine while no receive waits.
func WithWheel(w *tock.Wheel) Option { return func(c *config) { c.wheel = w } }

// WithAllowedOrigins lets browser pages served from origins call the API:
// their cross-origin requests are not refused, and are answered with the
// CORS headers that let the page read the answers (preflights included).
// An origin is "scheme://host" or "scheme://host:port", such as
// "https://app.example.com". By default every cross-origin browser request
// is refused with 403, except a navigation (a person following a link).
// [New] panics on a malformed origin. Calls add up.
func WithAllowedOrigins(origins ...string) Option {
	return func(c *config) { c.origins = append(c.origins, origins...) }
}

// WithAllowedHosts adds host names, without a port, that a request reaching
// the server on a loopback address may name in its Host header. By default
// such a request must name localhost or a loopback IP: a web page that
// rebinds its own DNS name to 127.0.0.1 (DNS rebinding) to pass the
// browser's same-origin checks is refused with 421. Add the names a
// reverse proxy on the same machine forwards; "*" allows any. [New] panics
// on an empty name or one with a slash or a space. Calls add up.
func WithAllowedHosts(hosts ...string) Option {
	return func(c *config) { c.hosts = append(c.hosts, hosts...) }
}

// withClock makes the server read the time from now, for tests.
func withClock(now func() time.Time) Option { return func(c *config) { c.now = now } }

// New returns a Server of engine. The Server does not own engine: closing
// it, after the HTTP server in front has shut down, is the caller's. New
// panics if engine is nil or an option is invalid, naming the option.
func New(engine queue.Engine, opts ...Option) *Server {
	if engine == nil {
		panic("server: New: nil queue.Engine")
	}
	c := config{log: slog.Default(), now: time.Now}
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	if err := c.limits.Validate(); err != nil {
		panic("server: WithLimits: " + strings.TrimPrefix(err.Error(), "server: "))
	}
	if err := c.conns.Validate(); err != nil {
		panic("server: WithConnLimits: " + strings.TrimPrefix(err.Error(), "server: "))
	}
	origins, err := newOriginPolicy(c.origins, c.hosts)
	if err != nil {
		panic(err.Error())
	}
	if c.log == nil {
		c.log = slog.Default()
	}
	maxTopics := DefaultMetricsTopics
	if c.metricsTopics != nil {
		if maxTopics = *c.metricsTopics; maxTopics < 0 {
			panic(fmt.Sprintf("server: WithMetricsTopics: %d topics; want 0 or more", maxTopics))
		}
	}
	if c.wheel == nil {
		c.wheel = tock.New()
	}
	s := &Server{
		engine:  engine,
		limits:  c.limits.withDefaults(),
		log:     c.log,
		wheel:   c.wheel,
		origins: origins,
		started: time.Now(),
		now:     c.now,
		mux:     http.NewServeMux(),
		drained: make(chan struct{}),
	}
	if c.tracer != nil {
		s.tracer = c.tracer.Tracer(tracerName)
	}
	s.admin, _ = engine.(queue.Admin)
	s.limiter, _ = engine.(queue.Limiter)
	if c.token != "" {
		sum := sha256.Sum256([]byte(c.token))
		s.tokenSum = sum[:]
	}
	s.newHTTPServer(c)
	s.metrics = newMetrics(engine, s.conns, c.log, maxTopics, c.now)
	s.route(api.RoutePut, s.handlePut)
	s.route(api.RouteBatch, s.handleBatch)
	s.route(api.RouteCancel, s.handleCancel)
	s.route(api.RouteReceive, s.handleReceive)
	s.route(api.RouteAck, s.handleAck)
	s.route(api.RouteNack, s.handleNack)
	s.route(api.RouteExtend, s.handleExtend)
	s.route(api.RouteStats, s.handleStats)
	s.route(api.RouteTopics, s.handleTopics)
	s.route(api.RouteMessages, s.handleMessages)
	s.route(api.RouteMessage, s.handleMessage)
	s.route(api.RouteDeliver, s.handleDeliver)
	s.route(api.RouteRequeue, s.handleRequeue)
	s.route(api.RoutePurge, s.handlePurge)
	s.route(api.RoutePause, s.handlePause)
	s.route(api.RouteResume, s.handleResume)
	s.route(api.RouteLimits, s.handleLimits)
	s.route(api.RouteSetLimit, s.handleSetLimit)
	s.route(api.RouteRemoveLimit, s.handleRemoveLimit)
	s.routeSchedules()
	s.route(api.RouteHealth, s.handleHealth)
	s.route(api.RouteReady, s.handleReady)
	s.route(api.RouteStatusPage, s.handleStatusPage)
	s.route(api.RouteOpenAPI, s.handleOpenAPI)
	s.mux.Handle(api.RouteMetrics, s.metrics.handler())
	s.metrics.addRoute(api.RouteMetrics)
	return s
}

// A handlerFunc handles a request and returns a client's or the engine's
// error for the server to answer.
type handlerFunc func(w http.ResponseWriter, r *http.Request) error

func (s *Server) route(pattern string, h handlerFunc) {
	s.metrics.addRoute(pattern)
	s.mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		if err := h(w, r); err != nil {
			s.fail(w, r, err)
		}
	})
}

// ServeHTTP answers r. Every request, refused or not, is counted and timed
// by route (route "unmatched" for paths no route has). Before routing, it
// refuses with a JSON error, in this order: a path that is not canonical
// (400), a Host this server does not answer to (421, see
// [WithAllowedHosts]), a cross-origin browser request (403, see
// [WithAllowedOrigins]), a missing token (401), and a body that is not
// application/json (415).
//
// An answer never waits for a request body that the server has not read to
// its end (a refused request's, or one cut short by an error): it goes out
// at once with "Connection: close", and the connection closes when the
// rest of the body has arrived or [Limits.BodyTimeout] after the request
// began, whichever is first.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, pattern := s.mux.Handler(r)
	rm := s.metrics.routeOf(pattern)
	rm.inFlight.Inc()
	defer rm.inFlight.Dec()
	start := time.Now()
	aw := &answerWriter{ResponseWriter: w, status: http.StatusOK}
	aw.watchBody(r, start.Add(s.limits.BodyTimeout))
	if s.tracer != nil {
		route := ""
		if rm.matched {
			route = pattern
		}
		var span trace.Span
		r, span = traceStart(s.tracer, r, route)
		defer func() { traceEnd(span, aw.status) }()
	}
	s.serve(aw, r, rm.matched)
	aw.finish()
	rm.duration.Observe(time.Since(start).Seconds())
	rm.count(aw.status)
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request, matched bool) {
	h := w.Header()
	h["X-Content-Type-Options"] = nosniff
	if s.origins.preflight(w, r) {
		return
	}
	if err := s.admit(w, r); err != nil {
		s.fail(w, r, err)
		return
	}
	if !matched {
		// The mux answers in plain text or with a redirect; keep its status
		// and headers, replace its body with a JSON error.
		s.mux.ServeHTTP(&jsonErrorWriter{ResponseWriter: w}, r)
		return
	}
	s.mux.ServeHTTP(w, r)
}

var nosniff = []string{"nosniff"}

// admit checks what every route requires before it runs.
func (s *Server) admit(w http.ResponseWriter, r *http.Request) error {
	if p := r.URL.Path; p != cleanPath(p) {
		return badRequest("path %q is not canonical: remove empty, \".\" and \"..\" segments", truncate(p))
	}
	if err := s.origins.check(w, r); err != nil {
		return err
	}
	if !public(r.URL.Path) && !s.authorized(r) {
		challenge(w, r)
		return &requestError{status: http.StatusUnauthorized, msg: "missing or wrong token: send \"Authorization: Bearer <token>\""}
	}
	return checkContentType(r)
}

// public reports whether the route of path p needs no token: the liveness check, and the API's
// description, which holds nothing that is not in the README.
func public(p string) bool { return p == api.PathHealth || p == api.PathOpenAPI }

// cleanPath is p as net/http's mux would redirect it: path.Clean, keeping a
// trailing slash.
func cleanPath(p string) string {
	if p == "" {
		return "/"
	}
	if p[0] != '/' {
		p = "/" + p
	}
	np := path.Clean(p)
	if p[len(p)-1] == '/' && np != "/" {
		if len(p) == len(np)+1 && strings.HasPrefix(p, np) {
			return p
		}
		np += "/"
	}
	return np
}

// Drain makes /readyz answer 503 and ends every long poll at once with what
// it has, so that an [http.Server.Shutdown] that follows does not wait out
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

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	// The answers are JSON for programs and people, not HTML: "<token>" stays "<token>", not
	// "\u003ctoken\u003e" (the answers carry Content-Type and nosniff, so no browser runs them).
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	// An error here is the client hanging up mid-answer; nothing to do.
	_ = enc.Encode(v)
}

// writeAppended answers as writeJSON does with the JSON that appendJSON, an
// AppendJSON method of package api, appends to the buffer it is given:
// that spares the answers that carry messages encoding/json's reflection
// and second pass over payloads. The buffer is one of s.answers, given back
// once the answer is written (Write copies what it is given): a receive of
// 100 messages answers some 30 KB, which would otherwise be garbage after
// every request. Buffers over maxPooledAnswer bytes are left to the
// collector, so that one large answer does not keep its memory.
func (s *Server) writeAppended(w http.ResponseWriter, status int, appendJSON func([]byte) []byte) {
	bp, _ := s.answers.Get().(*[]byte)
	if bp == nil {
		bp = new([]byte)
	}
	body := append(appendJSON((*bp)[:0]), '\n') // as json.Encoder ends a value
	h := w.Header()
	h["Content-Type"] = contentTypeJSON
	h["Cache-Control"] = noStore
	h["Content-Length"] = []string{strconv.Itoa(len(body))}
	w.WriteHeader(status)
	_, _ = w.Write(body)
	if cap(body) <= maxPooledAnswer {
		*bp = body
		s.answers.Put(bp)
	}
}

// maxPooledAnswer is the largest answer buffer writeAppended keeps for the
// next answer, in bytes.
const maxPooledAnswer = 256 << 10

var (
	contentTypeJSON = []string{"application/json"}
	noStore         = []string{"no-store"}
)

// jsonErrorWriter turns the mux's plain-text 404 and 405 answers into JSON
// errors, keeping their headers (Allow on a 405). A redirect, which the mux
// gives for a path that is not clean and which admit refuses first, would
// become a 404: the API never redirects.
type jsonErrorWriter struct {
	http.ResponseWriter
	status int
}

func (w *jsonErrorWriter) WriteHeader(code int) {
	if code < 300 {
		w.status = code
		w.ResponseWriter.WriteHeader(code)
		return
	}
	e := &requestError{status: code, msg: http.StatusText(code)}
	switch {
	case code < 400, code == http.StatusNotFound:
		w.Header().Del("Location")
		e.status, e.code, e.msg = http.StatusNotFound, api.CodeNoRoute, "no such route; see the API reference"
	case code == http.StatusMethodNotAllowed:
		e.msg = fmt.Sprintf("method not allowed; allowed: %s", w.Header().Get("Allow"))
	}
	w.status = e.status
	writeError(w.ResponseWriter, e)
}

func (w *jsonErrorWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	if w.status >= 300 {
		return len(p), nil // the JSON body is already written
	}
	return w.ResponseWriter.Write(p)
}

// openapiDoc is what RouteOpenAPI answers.
var openapiDoc = api.OpenAPI()

func (s *Server) handleOpenAPI(w http.ResponseWriter, r *http.Request) error {
	h := w.Header()
	h["Content-Type"] = contentTypeJSON
	h.Set("Cache-Control", "no-cache")
	_, _ = w.Write(openapiDoc)
	return nil
}

func (s *Server) handleHealth(w http.ResponseWriter, r *http.Request) error {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	return nil
}

// handleReady answers 200 while the server is not draining and the engine
// is ready, and 503 saying why otherwise.
func (s *Server) handleReady(w http.ResponseWriter, r *http.Request) error {
	if s.draining() {
		return &requestError{status: http.StatusServiceUnavailable, msg: "shutting down"}
	}
	if err := s.engine.Ready(r.Context()); err != nil {
		if r.Context().Err() != nil {
			return err
		}
		return &requestError{status: http.StatusServiceUnavailable, msg: "engine not ready: " + boundedMessage(err)}
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
	return nil
}

// receiveContext bounds a long poll: it ends after wait, when the client
// goes away, or when the server drains.
func (s *Server) receiveContext(parent context.Context, wait time.Duration) (context.Context, context.CancelFunc) {
	ctx, cancel := s.wheel.WithTimeout(parent, wait)
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
