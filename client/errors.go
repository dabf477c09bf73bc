package client

import (
	"errors"
	"fmt"
	"net/http"
)

// Sentinel errors, matched with errors.Is against the *Error a call returns.
var (
	// ErrBadRequest is matched by a 400: the server refused the request as
	// malformed or invalid (bad topic, bad duration, unknown receipt, ...).
	ErrBadRequest = errors.New("client: bad request")
	// ErrUnauthorized is matched by a 401: the token is missing or wrong.
	ErrUnauthorized = errors.New("client: unauthorized")
	// ErrNotFound is matched by a 404.
	ErrNotFound = errors.New("client: not found")
	// ErrTooLarge is matched by a 413: a payload or body over the server's limit.
	ErrTooLarge = errors.New("client: request too large")
	// ErrUnavailable is matched by a 503: the server is shutting down or its
	// store is closed. Idempotent calls are retried on it.
	ErrUnavailable = errors.New("client: server unavailable")
	// ErrServer is matched by any 5xx.
	ErrServer = errors.New("client: server error")
)

// An Error is a response with a status of 400 or more. Message is the
// server's explanation from the {"error": "..."} body, or the status text
// when the body had none.
type Error struct {
	StatusCode int
	Message    string
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
// the server was unavailable or a gateway in front of it failed.
func (e *Error) Temporary() bool {
	switch e.StatusCode {
	case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout, http.StatusTooManyRequests:
		return true
	}
	return false
}
