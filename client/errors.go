package client

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/tockwheel/tock/api"
	"github.com/tockwheel/tock/queue"
)

// Sentinel errors, matched with [errors.Is] against the [*Error] a call
// returns, and ErrInvalidOption returned by [New]. An *Error matches the
// sentinels of package queue too (see [Error.Is]).
var (
	// ErrInvalidOption is wrapped by New's error for an invalid option.
	ErrInvalidOption = errors.New("client: invalid option")
	// ErrBadRequest is matched by a 400: the server refused the request as
	// malformed or invalid (bad topic, bad duration, unknown receipt, ...).
	ErrBadRequest = errors.New("client: bad request")
	// ErrUnauthorized is matched by a 401: the token is missing or wrong.
	ErrUnauthorized = errors.New("client: unauthorized")
	// ErrNotFound is matched by any 404: a message not pending (Code
	// [CodeNotFound]) or a path no route has (Code [CodeNoRoute]), such as
	// every path under a wrong base URL.
	ErrNotFound = errors.New("client: not found")
	// ErrTooLarge is matched by a 413: a payload or body over the server's limit.
	ErrTooLarge = errors.New("client: request too large")
	// ErrUnavailable is matched by a 503: the server is shutting down, its
	// engine is unavailable or closed, or it is at its connection limit.
	// Idempotent calls are retried on it.
	ErrUnavailable = errors.New("client: server unavailable")
	// ErrServer is matched by any 5xx.
	ErrServer = errors.New("client: server error")
	// ErrMaybeStored is matched by the error of a Put whose message the
	// server may have stored although the call failed: its request was
	// sent, or may have been, and its answer was lost (the connection
	// failed, the context ended while it was in flight), was a 5xx, or
	// could not be read. Putting the message again with the same ID and
	// DeliverAt stores no second copy, and succeeds if the first was stored.
	// A Put that fails without it stored nothing.
	ErrMaybeStored = errors.New("client: the message may have been stored")
)

// maybeStored returns err, the error of a request of puts, marked with
// ErrMaybeStored unless it is an answer that stores nothing (a 4xx: tockd
// refuses a batch whole) or nil.
func maybeStored(err error) error {
	var e *Error
	if err == nil || errors.As(err, &e) && e.StatusCode < 500 {
		return err
	}
	return fmt.Errorf("%w (%w)", err, ErrMaybeStored)
}

// Codes of the server's errors that a program may need to tell apart from
// others of the same status; [Error.Code] holds them. The codes are those
// of package api, which lists them all.
const (
	// CodeNotFound: the message named is not waiting (a 404 of Cancel).
	CodeNotFound = api.CodeNotFound
	// CodeNoRoute: no route of the API has the request's path (a 404 that
	// means a wrong base URL or an old server).
	CodeNoRoute = api.CodeNoRoute
)

// An Error is a response with a status of 400 or more.
type Error struct {
	StatusCode int
	// Code is the server's error code from the {"error": "...", "code":
	// "..."} body, one of the Code constants of package api, such as
	// [CodeNotFound], "bad_request", "duplicate" or "unauthorized"; empty
	// when the answer did not come from tockd (a proxy's error page,
	// another server).
	Code string
	// Message is the server's explanation from the body, the body itself
	// when it is not a tockd error, or the status text when it is empty.
	Message string
	// Err is the error of package queue that the answer carries, for
	// [errors.As]: a [*queue.DuplicateError] with the waiting message's ID
	// and due time for a 409; nil otherwise.
	Err error

	// failed lists, for the answer of an ack or an extension of several
	// receipts that failed for some, the indexes of those it did not take.
	failed []int
}

// errorOf returns the Error of an answer with status and body data.
func errorOf(status int, data []byte) *Error {
	e := &Error{StatusCode: status}
	var eb api.ErrorBody
	switch {
	case json.Unmarshal(data, &eb) == nil && eb.Message != "":
		e.Message, e.Code = eb.Message, eb.Code
	case strings.TrimSpace(string(data)) != "":
		e.Message = strings.TrimSpace(string(data))
	default:
		e.Message = http.StatusText(status)
	}
	switch e.Code {
	case api.CodeDuplicate:
		var d api.DuplicateBody
		if json.Unmarshal(data, &d) == nil && d.ID != "" {
			e.Err = &queue.DuplicateError{ID: d.ID, DeliverAt: d.DeliverAt, Leased: d.Leased}
		}
	case api.CodeUnknownReceipt:
		// An api.AckErrorBody or an api.ExtendErrorBody.
		var a struct {
			Failed []int `json:"failed"`
		}
		if json.Unmarshal(data, &a) == nil && a.Failed != nil {
			e.failed = a.Failed
		}
	}
	return e
}

func (e *Error) Error() string {
	return fmt.Sprintf("tock server: %d %s: %s", e.StatusCode, http.StatusText(e.StatusCode), e.Message)
}

// Unwrap returns e.Err.
func (e *Error) Unwrap() error { return e.Err }

// Is matches the sentinel for e's status code, and the sentinel of package
// queue that the answer stands for: [queue.ErrInvalid] for code
// "bad_request", [queue.ErrUnknownReceipt] for "unknown_receipt",
// [queue.ErrNotFound] for "not_found" (not for "no_route"),
// [queue.ErrDuplicate] for a 409, [queue.ErrTooLarge] for a 413 and
// [queue.ErrUnavailable] for a 503.
func (e *Error) Is(target error) bool {
	switch target {
	case ErrBadRequest:
		return e.StatusCode == http.StatusBadRequest
	case ErrUnauthorized:
		return e.StatusCode == http.StatusUnauthorized
	case ErrNotFound:
		return e.StatusCode == http.StatusNotFound
	case ErrTooLarge:
		return e.StatusCode == http.StatusRequestEntityTooLarge
	case ErrUnavailable:
		return e.StatusCode == http.StatusServiceUnavailable
	case ErrServer:
		return e.StatusCode >= 500
	case queue.ErrInvalid:
		return e.Code == api.CodeBadRequest
	case queue.ErrUnknownReceipt:
		return e.Code == api.CodeUnknownReceipt
	case queue.ErrNotFound:
		return e.Code == api.CodeNotFound
	case queue.ErrDuplicate:
		return e.StatusCode == http.StatusConflict
	case queue.ErrTooLarge:
		return e.StatusCode == http.StatusRequestEntityTooLarge
	case queue.ErrUnavailable:
		return e.StatusCode == http.StatusServiceUnavailable
	case errors.ErrUnsupported:
		return e.StatusCode == http.StatusNotImplemented
	}
	return false
}

// Temporary reports whether repeating the same request later may succeed:
// 429 (too many requests), 502, 503 and 504 (the server was unavailable or
// a gateway in front of it failed). Idempotent calls are retried on them.
func (e *Error) Temporary() bool {
	switch e.StatusCode {
	case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout, http.StatusTooManyRequests:
		return true
	}
	return false
}
