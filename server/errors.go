package server

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/tockwheel/tock/api"
	"github.com/tockwheel/tock/queue"
)

// codeFor returns the code of an error answer with status when no more
// precise code is given (404 may also be "no_route", 400 "unknown_receipt").
func codeFor(status int) string {
	switch status {
	case http.StatusBadRequest:
		return api.CodeBadRequest
	case http.StatusUnauthorized:
		return api.CodeUnauthorized
	case http.StatusForbidden:
		return api.CodeCrossOrigin
	case http.StatusNotFound:
		return api.CodeNotFound
	case http.StatusMethodNotAllowed:
		return api.CodeMethod
	case http.StatusRequestTimeout:
		return api.CodeBodyTimeout
	case http.StatusConflict:
		return api.CodeDuplicate
	case http.StatusRequestEntityTooLarge:
		return api.CodeTooLarge
	case http.StatusUnsupportedMediaType:
		return api.CodeMediaType
	case http.StatusMisdirectedRequest:
		return api.CodeWrongHost
	case http.StatusRequestHeaderFieldsTooLarge:
		return api.CodeHeadersTooLarge
	case http.StatusInternalServerError:
		return api.CodeInternal
	case http.StatusNotImplemented:
		return api.CodeNotImplemented
	case http.StatusServiceUnavailable:
		return api.CodeUnavailable
	case http.StatusHTTPVersionNotSupported:
		return api.CodeHTTPVersion
	}
	return api.CodeOther
}

// A requestError is a client's mistake or the engine's state: it is
// answered with its status, code and message, never with a 500.
type requestError struct {
	status int
	code   string // empty: codeFor(status)
	msg    string
	// answer, when set, is the whole answer, for the errors that carry more
	// than a message: it gets the status, code and message in ErrorBody.
	answer func(api.ErrorBody) any
}

func (e *requestError) Error() string { return e.msg }

func badRequest(format string, args ...any) error {
	return &requestError{status: http.StatusBadRequest, msg: fmt.Sprintf(format, args...)}
}

func tooLarge(format string, args ...any) error {
	return &requestError{status: http.StatusRequestEntityTooLarge, msg: fmt.Sprintf(format, args...)}
}

// fail answers err: a client's mistake with its 4xx, the engine's state
// with 503, anything else with a logged 500. The engine's errors are
// answered by the sentinel of package queue they match: ErrDuplicate 409
// (with the waiting message's ID and due time when it is a
// *queue.DuplicateError), ErrUnknownReceipt 400 (code unknown_receipt),
// ErrTooLarge 413, ErrInvalid 400, ErrNotFound 404, ErrUnavailable and
// ErrClosed 503. Messages are bounded: an error that lists many items shows
// the first few and counts the rest, so an answer is never larger than a
// few KiB.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	var re *requestError
	var dup *queue.DuplicateError
	switch {
	case errors.As(err, &re):
	case errors.As(err, &dup):
		re = duplicate(dup, boundedMessage(err))
	case errors.Is(err, queue.ErrDuplicate):
		re = &requestError{status: http.StatusConflict, msg: boundedMessage(err)}
	case errors.Is(err, queue.ErrUnknownReceipt):
		re = &requestError{status: http.StatusBadRequest, code: api.CodeUnknownReceipt, msg: boundedMessage(err)}
	case errors.Is(err, queue.ErrTooLarge):
		re = &requestError{status: http.StatusRequestEntityTooLarge, msg: boundedMessage(err)}
	case errors.Is(err, queue.ErrInvalid):
		re = &requestError{status: http.StatusBadRequest, msg: boundedMessage(err)}
	case errors.Is(err, queue.ErrNotFound):
		re = &requestError{status: http.StatusNotFound, msg: boundedMessage(err)}
	case errors.Is(err, queue.ErrUnavailable), errors.Is(err, queue.ErrClosed):
		re = &requestError{status: http.StatusServiceUnavailable, msg: boundedMessage(err)}
	case errors.Is(err, errors.ErrUnsupported):
		re = &requestError{status: http.StatusNotImplemented, msg: boundedMessage(err)}
	case r.Context().Err() != nil:
		// The client went away; nobody reads an answer.
		return
	default:
		s.log.Error("engine failed", "method", r.Method, "path", r.URL.Path, "err", err)
		re = &requestError{status: http.StatusInternalServerError, msg: "internal error: " + boundedMessage(err)}
	}
	writeError(w, re)
}

// duplicate is the 409 answer to a put whose chosen ID names another
// waiting message.
func duplicate(e *queue.DuplicateError, msg string) *requestError {
	return &requestError{status: http.StatusConflict, msg: msg, answer: func(b api.ErrorBody) any {
		return api.DuplicateBody{ErrorBody: b, ID: e.ID, DeliverAt: e.DeliverAt.UTC(), Leased: e.Leased}
	}}
}

func writeError(w http.ResponseWriter, e *requestError) {
	code := e.code
	if code == "" {
		code = codeFor(e.status)
	}
	body := api.ErrorBody{Message: e.msg, Code: code}
	if e.answer != nil {
		writeJSON(w, e.status, e.answer(body))
		return
	}
	writeJSON(w, e.status, body)
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
		if e, ok := err.(interface{ Unwrap() []error }); ok {
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
