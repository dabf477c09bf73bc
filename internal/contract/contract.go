// Package contract checks HTTP exchanges against the API's OpenAPI document ([api.OpenAPI]), for
// tests: wrapped around a server with [Handler], every request and answer a test exchanges is
// validated, and a mismatch fails the test naming the route and the field. It validates with
// kin-openapi's openapi3filter, which validates the schemas of an OpenAPI 3.1 document as JSON
// Schema 2020-12.
//
// What it checks of each exchange:
//   - The answer of a route of the document has a status the operation lists, and a body of the
//     schema the document gives that status (every status, errors included: a 404 of a route
//     must be an error with code not_found, as the document says).
//   - A request the server answered with 2xx is valid by the document: its path and query
//     parameters and its body. A request the document calls invalid must not be taken (2xx);
//     a request the document calls valid may still be refused, for rules a schema does not say
//     (a due time too far ahead, a receipt the server never issued).
//   - A request whose client went away before the server answered has no answer to check.
//   - A request that matches no operation (a path no route has, a method the route has not, a
//     CORS preflight) is answered with the document's Error, or a preflight's empty 204.
//
// Across the exchanges of a test binary, [Router.Unexercised] lists the successful answers of
// the document that none showed, so that a package's tests can require that each was validated
// at least once.
package contract

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"

	"github.com/tockwheel/tock/api"
)

// Document returns the API's OpenAPI document, loaded and validated by kin-openapi, and a
// router that finds the operation of a request by the rules of [http.ServeMux], which the server
// routes by. It loads the document once per process: neither it nor the router is changed after.
var Document = sync.OnceValues(load)

// A Router finds the operation of the document that a request asks for, and keeps which
// answers of which operations the exchanges it checked have shown. It is safe for concurrent use.
type Router struct {
	doc *openapi3.T
	mux *http.ServeMux
	ops map[string]*routers.Route // by ServeMux pattern

	mu   sync.Mutex
	seen map[string]bool // "METHOD path status" of the answers checked
}

func load() (*Router, error) {
	// The status page: kin-openapi decodes text/plain, not text/html (its registry of decoders is
	// the package's; registering the same decoder again is harmless).
	openapi3filter.RegisterBodyDecoder("text/html", openapi3filter.RegisteredBodyDecoder("text/plain"))
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(api.OpenAPI())
	if err != nil {
		return nil, fmt.Errorf("contract: loading openapi.json: %w", err)
	}
	if !doc.IsOpenAPI31OrLater() {
		return nil, fmt.Errorf("contract: openapi.json is OpenAPI %s, not 3.1", doc.OpenAPI)
	}
	if err := doc.Validate(loader.Context); err != nil {
		return nil, fmt.Errorf("contract: openapi.json is not a valid OpenAPI document: %w", err)
	}
	rt := &Router{doc: doc, mux: http.NewServeMux(), ops: map[string]*routers.Route{}, seen: map[string]bool{}}
	for _, path := range doc.Paths.InMatchingOrder() {
		item := doc.Paths.Value(path)
		for method, op := range item.Operations() {
			pattern := method + " " + MuxPath(path)
			rt.ops[pattern] = &routers.Route{Spec: doc, Path: path, PathItem: item, Method: method, Operation: op}
			rt.mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
				m := w.(*match)
				m.pattern = pattern
				for _, p := range op.Parameters {
					if p.Value.In == openapi3.ParameterInPath {
						m.params[p.Value.Name] = r.PathValue(p.Value.Name)
					}
				}
			})
		}
	}
	return rt, nil
}

// MuxPath returns the [http.ServeMux] path of a path of the document: the same, but for the
// root alone, which the mux spells "/{$}".
func MuxPath(path string) string {
	if path == "/" {
		return "/{$}"
	}
	return path
}

// Patterns returns the ServeMux pattern of every operation of the document, sorted.
func (rt *Router) Patterns() []string {
	out := make([]string, 0, len(rt.ops))
	for p := range rt.ops {
		out = append(out, p)
	}
	slices.Sort(out)
	return out
}

// Unexercised returns the successful answers (2xx) the document gives an operation that no
// exchange checked so far has shown, as "METHOD path status", sorted. After every test of a
// package that serves the API has run, none should be left: an answer no test sees is an answer
// the document may describe wrongly without any test failing.
func (rt *Router) Unexercised() []string {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	var out []string
	for _, route := range rt.ops {
		for status := range route.Operation.Responses.Map() {
			key := strings.ToUpper(route.Method) + " " + route.Path + " " + status
			if strings.HasPrefix(status, "2") && !rt.seen[key] {
				out = append(out, key)
			}
		}
	}
	slices.Sort(out)
	return out
}

// match is the ResponseWriter the router's handlers fill in: the pattern matched and the
// values of its path parameters.
type match struct {
	pattern string
	params  map[string]string
}

func (*match) Header() http.Header         { return http.Header{} }
func (*match) Write(p []byte) (int, error) { return len(p), nil }
func (*match) WriteHeader(int)             {}

// Find returns the operation r asks for and its path parameters, or nil when r asks for none.
func (rt *Router) Find(r *http.Request) (*routers.Route, map[string]string) {
	m := &match{params: map[string]string{}}
	rt.mux.ServeHTTP(m, r)
	route := rt.ops[m.pattern]
	if route == nil {
		return nil, nil
	}
	return route, m.params
}

// Handler returns h with every exchange validated against the document; a mismatch fails t
// (with Errorf, so that the test goes on and the server's answer still reaches the client).
func Handler(t testing.TB, h http.Handler) http.Handler {
	rt, err := Document()
	if err != nil {
		t.Fatal(err)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body bytes.Buffer
		if r.Body != nil && r.Body != http.NoBody {
			r.Body = readCloser{io.TeeReader(r.Body, &body), r.Body}
		}
		rec := &recorder{ResponseWriter: w, status: http.StatusOK}
		h.ServeHTTP(rec, r)
		if r.Context().Err() != nil {
			return // the client went away: no answer reached it
		}
		if err := rt.check(r, &body, rec); err != nil {
			t.Errorf("%v", err)
		}
	})
}

// check validates one exchange: the request r, whose body as the server read it is in body,
// answered with rec.
func (rt *Router) check(r *http.Request, body *bytes.Buffer, rec *recorder) error {
	route, params := rt.Find(r)
	if route == nil {
		return rt.checkUnrouted(r, rec)
	}
	name := strings.ToUpper(route.Method) + " " + route.Path
	rt.mu.Lock()
	rt.seen[name+" "+strconv.Itoa(rec.status)] = true
	rt.mu.Unlock()
	ctx := context.Background()
	opts := &openapi3filter.Options{
		AuthenticationFunc:                openapi3filter.NoopAuthenticationFunc,
		IncludeResponseStatus:             true,
		RejectWhenRequestBodyNotSpecified: true,
		MultiError:                        true,
	}
	req := r.Clone(ctx)
	if rec.status/100 == 2 {
		// The server took the request: it must be one the document allows. Read what the
		// handler left of the body, so that the whole body is validated.
		if r.Body != nil && r.Body != http.NoBody {
			_, _ = io.Copy(io.Discard, r.Body)
		}
		req.Body = io.NopCloser(bytes.NewReader(body.Bytes()))
		in := &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route, Options: opts}
		if err := openapi3filter.ValidateRequest(ctx, in); err != nil {
			return fmt.Errorf("contract: %s: the server answered %d to a request the document does not allow (%s %s %.200s): %s",
				name, rec.status, r.Method, r.URL.RequestURI(), body.Bytes(), describe(err))
		}
	}
	in := &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route, Options: opts}
	out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: rec.status, Header: rec.Header(),
		Body: io.NopCloser(bytes.NewReader(rec.body.Bytes())), Options: opts}
	if err := openapi3filter.ValidateResponse(ctx, out); err != nil {
		return fmt.Errorf("contract: %s: answer %d %.300s is not as the document says: %s", name, rec.status, bytes.TrimSpace(rec.body.Bytes()), describe(err))
	}
	return nil
}

// checkUnrouted validates the answer to a request that no operation matches: an Error (404
// no_route, 405 method_not_allowed, or a refusal before routing), or a CORS preflight's 204.
func (rt *Router) checkUnrouted(r *http.Request, rec *recorder) error {
	if r.Method == http.MethodOptions && rec.status == http.StatusNoContent && rec.body.Len() == 0 {
		return nil
	}
	var v any
	if err := json.Unmarshal(rec.body.Bytes(), &v); err != nil {
		return fmt.Errorf("contract: %s %s (no operation): answer %d %.300q is not JSON: %v", r.Method, r.URL.Path, rec.status, rec.body.Bytes(), err)
	}
	schema := rt.doc.Components.Schemas["Error"].Value
	if err := schema.VisitJSON(v, openapi3.EnableJSONSchema2020()); err != nil {
		return fmt.Errorf("contract: %s %s (no operation): answer %d %.300s is not an Error: %s", r.Method, r.URL.Path, rec.status, rec.body.Bytes(), describe(err))
	}
	return nil
}

// describe says where err found the mismatch: the field, as a JSON pointer, and why.
func describe(err error) string {
	var me openapi3.MultiError
	if errors.As(err, &me) && len(me) > 0 {
		msgs := make([]string, len(me))
		for i, e := range me {
			msgs[i] = describe(e)
		}
		return strings.Join(msgs, "; ")
	}
	var se *openapi3.SchemaError
	if errors.As(err, &se) {
		why := se.Reason
		if why == "" {
			why = se.Error()
		}
		return "field /" + strings.Join(se.JSONPointer(), "/") + ": " + strings.ReplaceAll(why, "\n", " ")
	}
	return strings.ReplaceAll(err.Error(), "\n", " ")
}

// readCloser reads from one reader and closes another: the request body teed into a buffer.
type readCloser struct {
	io.Reader
	io.Closer
}

// recorder passes an answer on and keeps a copy of its status and body.
type recorder struct {
	http.ResponseWriter
	status      int
	wroteHeader bool
	body        bytes.Buffer
}

func (w *recorder) WriteHeader(status int) {
	if !w.wroteHeader && status >= 200 {
		w.status, w.wroteHeader = status, true
	}
	w.ResponseWriter.WriteHeader(status)
}

func (w *recorder) Write(p []byte) (int, error) {
	w.wroteHeader = true
	w.body.Write(p)
	return w.ResponseWriter.Write(p)
}

// Unwrap lets [http.ResponseController] reach the connection's deadlines and flushes.
func (w *recorder) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Flush flushes the answer, for handlers that test for an [http.Flusher].
func (w *recorder) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}
