package server

import (
	"io"
	"net/http"
	"time"
)

// An answerWriter is the http.ResponseWriter of one request as the
// handlers see it. It remembers the status written, for the metrics, and it
// keeps an answer from waiting for the request's body.
//
// net/http reads what is left of a request body before it writes the
// answer's headers, so that the connection can serve the next request;
// outside a handler's own reads, no deadline bounds that read. An answer
// to a request whose body trickles in (a refused request, whose body the
// server never reads, or one whose reading stopped at an error) would wait
// for good. So when the headers go out before the body was read to its
// end, the answer closes the connection (net/http then writes it at once),
// and the rest of the body may take until the body's deadline before the
// connection closes under it: the time that remains of [Limits.BodyTimeout].
type answerWriter struct {
	http.ResponseWriter
	status      int
	wroteHeader bool
	body        watchedRequestBody
}

// watchedRequestBody is a request body that knows whether it was read to
// its end.
type watchedRequestBody struct {
	io.ReadCloser
	watching bool      // the request has a body, and this is it
	ended    bool      // Read returned io.EOF
	deadline time.Time // the body must have arrived by then
}

func (b *watchedRequestBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		b.ended = true
	}
	return n, err
}

// watchBody makes w watch r's body, which must arrive by deadline. A
// request without a body, or over HTTP/2, whose streams end on their own,
// is left as it is.
func (w *answerWriter) watchBody(r *http.Request, deadline time.Time) {
	if r.ContentLength == 0 || r.Body == nil || r.Body == http.NoBody || r.ProtoMajor != 1 {
		return
	}
	w.body = watchedRequestBody{ReadCloser: r.Body, watching: true, deadline: deadline}
	r.Body = &w.body
}

func (w *answerWriter) WriteHeader(code int) {
	if w.wroteHeader {
		w.ResponseWriter.WriteHeader(code) // net/http logs the superfluous call
		return
	}
	w.wroteHeader = true
	w.status = code
	if w.body.watching && !w.body.ended {
		w.Header().Set("Connection", "close")
		// An error means a writer without deadlines, such as a test recorder.
		_ = http.NewResponseController(w.ResponseWriter).SetReadDeadline(w.body.deadline)
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *answerWriter) Write(p []byte) (int, error) {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(p)
}

// finish writes the headers of an answer that wrote nothing, so that it too
// does not wait for the body.
func (w *answerWriter) finish() {
	if !w.wroteHeader {
		w.WriteHeader(w.status)
	}
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (w *answerWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
