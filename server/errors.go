package server

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"unicode/utf8"
)

// Error codes: the "code" of every error answer, {"error": "...", "code":
// "..."}. The message says what is wrong in words; the code is what a
// program compares. Codes are part of the API and never change meaning.
const (
	codeBadRequest      = "bad_request"            // 400: malformed or invalid request
	codeUnauthorized    = "unauthorized"           // 401: missing or wrong token
	codeCrossOrigin     = "cross_origin"           // 403: a browser request from another origin
	codeNotFound        = "not_found"              // 404: the named message is not pending
	codeNoRoute         = "no_route"               // 404: no route has this path
	codeMethod          = "method_not_allowed"     // 405: the route exists for other methods
	codeBodyTimeout     = "body_timeout"           // 408: the body did not arrive in time
	codeTooLarge        = "too_large"              // 413: payload, batch or body over a limit
	codeMediaType       = "unsupported_media_type" // 415: a body that is not application/json
	codeWrongHost       = "wrong_host"             // 421: a Host this server does not answer to
	codeHeadersTooLarge = "headers_too_large"      // 431: request headers over the limit
	codeInternal        = "internal"               // 500: the store failed
	codeNotImplemented  = "not_implemented"        // 501: an unsupported transfer encoding
	codeUnavailable     = "unavailable"            // 503: store closed, shutting down, or at capacity
	codeHTTPVersion     = "http_version"           // 505: an HTTP version other than 1.x
	codeOther           = "error"                  // any other status
)

// codeFor returns the code of an error answer with status when no more
// precise code is given (404 may also be "no_route").
func codeFor(status int) string {
	switch status {
	case http.StatusBadRequest:
		return codeBadRequest
	case http.StatusUnauthorized:
		return codeUnauthorized
	case http.StatusForbidden:
		return codeCrossOrigin
	case http.StatusNotFound:
		return codeNotFound
	case http.StatusMethodNotAllowed:
		return codeMethod
	case http.StatusRequestTimeout:
		return codeBodyTimeout
	case http.StatusRequestEntityTooLarge:
		return codeTooLarge
	case http.StatusUnsupportedMediaType:
		return codeMediaType
	case http.StatusMisdirectedRequest:
		return codeWrongHost
	case http.StatusRequestHeaderFieldsTooLarge:
		return codeHeadersTooLarge
	case http.StatusInternalServerError:
		return codeInternal
	case http.StatusNotImplemented:
		return codeNotImplemented
	case http.StatusServiceUnavailable:
		return codeUnavailable
	case http.StatusHTTPVersionNotSupported:
		return codeHTTPVersion
	}
	return codeOther
}

// A requestError is a client's mistake or the server's state: it is
// answered with its status, code and message, never with a 500.
type requestError struct {
	status int
	code   string // empty: codeFor(status)
	msg    string
}

func (e *requestError) Error() string { return e.msg }

func badRequest(format string, args ...any) error {
	return &requestError{status: http.StatusBadRequest, msg: fmt.Sprintf(format, args...)}
}

func tooLarge(format string, args ...any) error {
	return &requestError{status: http.StatusRequestEntityTooLarge, msg: fmt.Sprintf(format, args...)}
}

// fail answers err: a client's mistake with its 4xx, the store's state
// with 503, anything else with a logged 500. Messages are bounded: an error
// that lists many items (an ack of many unknown receipts) shows the first
// few and counts the rest, so an answer is never larger than a few KiB.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	var re *requestError
	switch {
	case errors.As(err, &re):
	case errors.Is(err, ErrInvalid):
		re = &requestError{status: http.StatusBadRequest, msg: boundedMessage(err)}
	case errors.Is(err, ErrNotFound):
		re = &requestError{status: http.StatusNotFound, msg: boundedMessage(err)}
	case errors.Is(err, ErrTooLarge):
		re = &requestError{status: http.StatusRequestEntityTooLarge, msg: boundedMessage(err)}
	case errors.Is(err, ErrUnavailable):
		re = &requestError{status: http.StatusServiceUnavailable, msg: boundedMessage(err)}
	case r.Context().Err() != nil:
		// The client went away; nobody reads an answer.
		return
	default:
		s.log.Error("store failed", "method", r.Method, "path", r.URL.Path, "err", err)
		re = &requestError{status: http.StatusInternalServerError, msg: "internal error: " + boundedMessage(err)}
	}
	writeError(w, re)
}

func writeError(w http.ResponseWriter, e *requestError) {
	code := e.code
	if code == "" {
		code = codeFor(e.status)
	}
	writeJSON(w, e.status, errorBody{Error: e.msg, Code: code})
}

// errorBody is every error answer on the wire.
type errorBody struct {
	Error string `json:"error"`
	Code  string `json:"code"`
}

// Bounds of an error message: at most maxErrorItems items of a list, each
// cut to maxErrorItemLen bytes, and maxErrorLen bytes in all.
const (
	maxErrorItems   = 10
	maxErrorItemLen = 256
	maxErrorLen     = 4 << 10
)

// boundedMessage returns err's message bounded in size. An error that joins
// several (errors.Join, or any error with an Unwrap() []error method, found
// anywhere along err's chain) is shown as its first maxErrorItems items and
// a count of the rest; any other message is cut after maxErrorItems lines
// and maxErrorLen bytes, saying how much was left out.
func boundedMessage(err error) string {
	if items := errorItems(err); len(items) > 1 {
		msgs := make([]string, len(items))
		for i, e := range items {
			msgs[i] = e.Error()
		}
		return boundedList(msgs)
	}
	msg := err.Error()
	if strings.Count(msg, "\n") >= maxErrorItems {
		msg = boundedList(strings.Split(msg, "\n"))
	}
	return cutBytes(msg, maxErrorLen)
}

// errorItems returns the errors that the first multiple-error along err's
// chain joins, or nil.
func errorItems(err error) []error {
	for err != nil {
		switch e := err.(type) {
		case *classified:
			err = e.err // its other half is only the kind
			continue
		case interface{ Unwrap() []error }:
			return e.Unwrap()
		}
		err = errors.Unwrap(err)
	}
	return nil
}

// boundedList joins the first maxErrorItems of msgs, each cut to
// maxErrorItemLen bytes, and counts the rest.
func boundedList(msgs []string) string {
	var b strings.Builder
	for i, m := range msgs[:min(len(msgs), maxErrorItems)] {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(cutBytes(strings.TrimSpace(m), maxErrorItemLen))
	}
	if n := len(msgs) - maxErrorItems; n > 0 {
		fmt.Fprintf(&b, "; and %s more", thousands(n))
	}
	return cutBytes(b.String(), maxErrorLen)
}

// cutBytes returns s if it has at most n bytes, else its first bytes up to
// a character boundary and a note of how many were cut.
func cutBytes(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%s... (%s more bytes)", s[:cut], thousands(len(s)-cut))
}

// thousands formats n with commas between groups of three digits.
func thousands(n int) string {
	if n < 0 {
		return "-" + thousands(-n)
	}
	s := fmt.Sprint(n)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}
