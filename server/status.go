package server

import (
	_ "embed"
	"net/http"
)

// statusPage is the status page: one self-contained HTML file whose script
// polls GET /v1/stats every second and draws on canvases, with nothing
// fetched from elsewhere.
//
//go:embed status.html
var statusPage []byte

func (s *Server) handleStatusPage(w http.ResponseWriter, r *http.Request) error {
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	// The page needs nothing but itself and this origin.
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; img-src 'self'")
	_, _ = w.Write(statusPage)
	return nil
}
