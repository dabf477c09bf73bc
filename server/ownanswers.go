package server

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/tockwheel/tock/api"
)

// net/http answers some requests itself, before any handler runs: a
// malformed request line or header, headers over MaxHeaderBytes, an
// unsupported transfer encoding or HTTP version, an Expect header other
// than 100-continue. It writes those answers in plain text on the
// connection, and it closes a connection whose headers did not arrive
// within ReadHeaderTimeout without a word. The standard library has no
// hook for either, so a trackedConn recognizes them on the wire: an answer
// written while no handler runs on the connection can only be net/http's
// own, and it is parsed as the HTTP response it is, by the standard
// library's parser, rather than matched against net/http's text.

// Read reads from the connection. When the read deadline of request
// headers passes with part of them read, net/http closes the connection
// without a word; Read answers 408 with a JSON error first.
func (c *trackedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if c.inHandler.Load() {
		return n, err
	}
	if c.partial.Add(int64(n)) > 0 && err != nil && errors.Is(err, os.ErrDeadlineExceeded) {
		c.partial.Store(0)
		_ = c.Conn.SetWriteDeadline(time.Now().Add(time.Second))
		_, _ = c.Conn.Write(jsonAnswer(http.StatusRequestTimeout, ""))
	}
	return n, err
}

// Write writes p, except that an error answer written while no handler runs
// on the connection, which is net/http's own, is rewritten as a JSON error
// with the same status, so that every answer of the API is JSON. net/http
// writes such an answer whole, in one call.
func (c *trackedConn) Write(p []byte) (int, error) {
	if c.inHandler.Load() || !bytes.HasPrefix(p, []byte("HTTP/1.")) {
		return c.Conn.Write(p)
	}
	answer, ok := asJSONAnswer(p)
	if !ok {
		return c.Conn.Write(p)
	}
	if _, err := c.Conn.Write(answer); err != nil {
		return 0, err
	}
	return len(p), nil
}

// asJSONAnswer parses p as a whole HTTP response and returns it as a JSON
// error answer, or false if it is not a plain error answer.
func asJSONAnswer(p []byte) ([]byte, bool) {
	resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(p)), nil)
	if err != nil || resp.StatusCode < 400 || resp.Header.Get("Content-Type") == "application/json" {
		return nil, false
	}
	text, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, false
	}
	return jsonAnswer(resp.StatusCode, string(text)), true
}

// jsonAnswer is the JSON error answer, which closes the connection, for
// one net/http wrote with status and text, with the code of package api
// for its status. The text's leading status line ("400 Bad Request: ") is
// left out, and an answer that says no more than its status gets a message
// saying what it means here.
func jsonAnswer(status int, text string) []byte {
	text = strings.TrimSpace(text)
	text = strings.TrimPrefix(text, strconv.Itoa(status)+" "+http.StatusText(status))
	msg := strings.TrimSpace(strings.TrimPrefix(text, ":"))
	code := api.CodeBadRequest
	switch status {
	case http.StatusBadRequest:
		if msg == "" {
			msg = "malformed HTTP request"
		}
	case http.StatusRequestHeaderFieldsTooLarge:
		code = api.CodeHeadersTooLarge
		if msg == "" {
			msg = fmt.Sprintf("request headers too large: the limit is %d KiB", MaxHeaderBytes>>10)
		}
	case http.StatusNotImplemented:
		code = api.CodeNotImplemented
	case http.StatusHTTPVersionNotSupported:
		code = api.CodeHTTPVersion
	case http.StatusRequestTimeout:
		msg, code = "the request headers did not arrive in time", api.CodeHeaderTimeout
	case http.StatusExpectationFailed:
		msg, code = "unsupported Expect header: only 100-continue is", api.CodeExpectation
	default:
		code = api.CodeOther
	}
	if msg == "" {
		msg = strings.ToLower(http.StatusText(status))
	}
	body, _ := json.Marshal(api.ErrorBody{Message: msg, Code: code})
	body = append(body, '\n')
	return fmt.Appendf(nil, "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s",
		status, http.StatusText(status), len(body), body)
}
