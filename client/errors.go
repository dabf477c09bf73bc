package client

import (
	"errors"
	"fmt"
	"net/http"
)

// Sentinel errors, matched with [errors.Is] against the [*Error] a call
// returns, and ErrInvalidOption returned by [New].
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
	// store is closed, or it is at its connection limit. Idempotent calls
	// are retried on it.
	ErrUnavailable = errors.New("client: server unavailable")
	// ErrServer is matched by any 5xx.
	ErrServer = errors.New("client: server error")
)

// Codes of the server's errors that a program may need to tell apart from
// others of the same status; [Error.Code] holds them.
const (
	// CodeNotFound: the message named is not pending (a 404 of Cancel).
	CodeNotFound = "not_found"
	// CodeNoRoute: no route of the API has the request's path (a 404 that
	// means a wrong base URL or an old server).
	CodeNoRoute = "no_route"
)

// An Error is a response with a status of 400 or more.
type Error struct {
	StatusCode int
	// Code is the server's error code from the {"error": "...", "code":
	// "..."} body, such as [CodeNotFound], "bad_request", "too_large" or
	// "unauthorized"; empty when the answer did not come from tockd (a
	// proxy's error page, another server).
	Code string
	// Message is the server's explanation from the body, the body itself
	// when it is not a tockd error, or the status text when it is empty.
	Message string
}

func (e *Error) Error() string {
	return fmt.Sprintf("tock server: %d %s: %s", e.StatusCode, http.StatusText(e.StatusCode), e.Message)
}

// Is matches the sentinel for e's status code.
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
