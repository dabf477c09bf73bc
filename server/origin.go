package server

import (
	"fmt"
	"net"
	"net/http"
	"strings"
)

// originPolicy keeps web pages from using the API through a visitor's
// browser. A browser attaches what a server needs to tell such requests
// apart: Sec-Fetch-Site (every browser since 2023) and Origin. Requests
// without either, from programs such as curl or the Go client, are not
// browser requests and pass.
//
// Unsafe methods (POST, DELETE) from another origin are refused by
// [http.CrossOriginProtection]. Safe ones (GET) from another site are
// refused too unless they are navigations: a page cannot read the answers
// anyway, but it could embed /metrics or time /v1/stats, and nothing
// legitimate needs that. A person following a link to the status page is a
// navigation and is let through; the page itself cannot be framed.
//
// A browser's origin checks trust the host name, so a page whose DNS name
// is rebound to 127.0.0.1 passes them as "same origin". The Host check is
// the defence: a request that reached a loopback address must name
// localhost, a loopback IP or an allowed host.
type originPolicy struct {
	cop     *http.CrossOriginProtection
	trusted map[string]bool // origins of WithAllowedOrigins, "scheme://host[:port]"
	hosts   map[string]bool // names of WithAllowedHosts, lower case
	anyHost bool            // "*" among them
}

func newOriginPolicy(origins, hosts []string) (*originPolicy, error) {
	p := &originPolicy{cop: http.NewCrossOriginProtection(), trusted: map[string]bool{}, hosts: map[string]bool{}}
	for _, o := range origins {
		if err := p.cop.AddTrustedOrigin(o); err != nil {
			return nil, fmt.Errorf("server: WithAllowedOrigins(%q): %v", o, err)
		}
		p.trusted[o] = true
	}
	for _, h := range hosts {
		switch {
		case h == "*":
			p.anyHost = true
		case h == "" || strings.ContainsAny(h, "/ \t\r\n"):
			return nil, fmt.Errorf("server: WithAllowedHosts(%q): not a host name", h)
		default:
			p.hosts[strings.ToLower(strings.Trim(h, "[]"))] = true
		}
	}
	return p, nil
}

// check refuses r with 421 or 403, or lets it through. For an allowed
// origin it sets the CORS headers that let the page read the answer.
func (p *originPolicy) check(w http.ResponseWriter, r *http.Request) error {
	if !p.anyHost && arrivedOnLoopback(r) && !p.loopbackName(r.Host) {
		return &requestError{status: http.StatusMisdirectedRequest, msg: fmt.Sprintf(
			"this server listens on a loopback address and answers to localhost or a loopback IP, not to host %q "+
				"(a guard against DNS rebinding); allow more names with WithAllowedHosts (tockd -allow-host)", truncate(r.Host))}
	}
	origin := r.Header.Get("Origin")
	if origin != "" && p.trusted[origin] {
		allowOrigin(w, origin)
		return nil
	}
	if err := p.cop.Check(r); err != nil {
		return refuseOrigin(r, origin)
	}
	switch r.Header.Get("Sec-Fetch-Site") {
	case "", "same-origin", "none":
		// "none": typed in the address bar or opened from a bookmark. Without
		// the header, an old browser says where it comes from with Origin
		// on the requests that need it, and CrossOriginProtection checked
		// those; a safe request without Origin cannot read the answer.
		return nil
	}
	if r.Header.Get("Sec-Fetch-Mode") == "navigate" && (r.Method == http.MethodGet || r.Method == http.MethodHead) {
		return nil
	}
	return refuseOrigin(r, origin)
}

func refuseOrigin(r *http.Request, origin string) error {
	from := origin
	if from == "" {
		from = "another site (Sec-Fetch-Site: " + r.Header.Get("Sec-Fetch-Site") + ")"
	}
	return &requestError{status: http.StatusForbidden, msg: fmt.Sprintf(
		"cross-origin request from %s refused; allow an origin with WithAllowedOrigins (tockd -allow-origin)", truncate(from))}
}

// preflight answers a CORS preflight (OPTIONS with Origin and
// Access-Control-Request-Method) and reports whether it did: 204 with the
// CORS headers for an allowed origin, 403 otherwise.
func (p *originPolicy) preflight(w http.ResponseWriter, r *http.Request) bool {
	if r.Method != http.MethodOptions || r.Header.Get("Access-Control-Request-Method") == "" {
		return false
	}
	origin := r.Header.Get("Origin")
	if origin == "" {
		return false
	}
	if !p.trusted[origin] {
		writeError(w, refuseOrigin(r, origin).(*requestError))
		return true
	}
	allowOrigin(w, origin)
	h := w.Header()
	h.Set("Access-Control-Allow-Methods", "GET, POST, DELETE")
	h.Set("Access-Control-Allow-Headers", "Authorization, Content-Type")
	h.Set("Access-Control-Max-Age", "600")
	w.WriteHeader(http.StatusNoContent)
	return true
}

func allowOrigin(w http.ResponseWriter, origin string) {
	h := w.Header()
	h.Set("Access-Control-Allow-Origin", origin)
	h.Add("Vary", "Origin")
}

// arrivedOnLoopback reports whether r came in on a loopback address of
// this machine.
func arrivedOnLoopback(r *http.Request) bool {
	a, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	if !ok {
		return false
	}
	ta, ok := a.(*net.TCPAddr)
	return ok && ta.IP.IsLoopback()
}

// loopbackName reports whether host (a Host header, with or without a
// port) names this machine's loopback interface or an allowed host.
func (p *originPolicy) loopbackName(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.ToLower(strings.Trim(host, "[]"))
	if host == "localhost" || strings.HasSuffix(host, ".localhost") || p.hosts[host] {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// checkContentType refuses a request that carries a body which does not
// say it is JSON. Browsers send text/plain, form and multipart bodies to
// any origin without asking it first; a JSON body from another origin
// needs a CORS preflight, which this server grants only to allowed
// origins.
func checkContentType(r *http.Request) error {
	if r.ContentLength == 0 || r.Body == nil || r.Body == http.NoBody {
		return nil
	}
	ct := r.Header.Get("Content-Type")
	if ct == "application/json" || isJSONMediaType(ct) {
		return nil
	}
	if ct == "" {
		ct = "none"
	}
	return &requestError{status: http.StatusUnsupportedMediaType, msg: fmt.Sprintf(
		"Content-Type %q: send request bodies as JSON with \"Content-Type: application/json\"", truncate(ct))}
}

// isJSONMediaType reports whether ct is application/json with at most a
// charset parameter of utf-8 (JSON is UTF-8), in any letter case.
func isJSONMediaType(ct string) bool {
	mt, params, found := strings.Cut(ct, ";")
	if !strings.EqualFold(strings.TrimSpace(mt), "application/json") {
		return false
	}
	if !found {
		return true
	}
	for _, p := range strings.Split(params, ";") {
		k, v, _ := strings.Cut(strings.TrimSpace(p), "=")
		if k == "" {
			continue
		}
		if !strings.EqualFold(k, "charset") || !strings.EqualFold(strings.Trim(v, `"`), "utf-8") {
			return false
		}
	}
	return true
}
