package server

import (
	"bytes"
	"crypto/sha256"
	_ "embed"
	"encoding/base64"
	"net/http"
)

// statusPage is the status page: one self-contained HTML file whose script
// polls GET /v1/stats every second and draws on canvases, with nothing
// fetched from elsewhere.
//
//go:embed status.html
var statusPage []byte

// statusPolicy is the page's Content-Security-Policy. It allows the page's
// own inline script and style by their hashes, not any inline code, so
// that nothing injected into the page could run; the page may fetch only
// from this origin, submit nothing, and be framed by no one.
var statusPolicy = "default-src 'none'; script-src " + inlineHash(statusPage, "<script>", "</script>") +
	"; style-src " + inlineHash(statusPage, "<style>", "</style>") +
	"; connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// inlineHash returns the CSP source of the text between the first open and
// close tags of page: 'sha256-...'.
func inlineHash(page []byte, open, close string) string {
	_, rest, ok := bytes.Cut(page, []byte(open))
	body, _, ok2 := bytes.Cut(rest, []byte(close))
	if !ok || !ok2 {
		panic("server: status.html lacks " + open)
	}
	sum := sha256.Sum256(body)
	return "'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'"
}

func (s *Server) handleStatusPage(w http.ResponseWriter, r *http.Request) error {
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	h.Set("Content-Security-Policy", statusPolicy)
	// For browsers that predate frame-ancestors.
	h.Set("X-Frame-Options", "DENY")
	// The page links nowhere, but a URL with a token in it must not leak.
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	h.Set("Cross-Origin-Resource-Policy", "same-origin")
	_, _ = w.Write(statusPage)
	return nil
}
