package server

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"strings"
)

// authorized reports whether r carries the token: as "Authorization: Bearer
// <token>" (programs), or as the password of HTTP Basic auth with any user
// name (browsers, which prompt for it on the status page and then send it
// with every fetch of the page).
func (s *Server) authorized(r *http.Request) bool {
	if s.tokenSum == nil {
		return true
	}
	var got string
	if auth := r.Header.Get("Authorization"); len(auth) > 7 && strings.EqualFold(auth[:7], "bearer ") {
		got = strings.TrimSpace(auth[7:])
	} else if _, pass, ok := r.BasicAuth(); ok {
		got = pass
	} else {
		return false
	}
	// Compare digests so the comparison takes the same time whatever the
	// length of the guess.
	sum := sha256.Sum256([]byte(got))
	return subtle.ConstantTimeCompare(sum[:], s.tokenSum) == 1
}

// challenge sets the WWW-Authenticate header of a 401 answer to r. A
// browser asking for the status page is challenged for Basic auth so that
// a person can type the token as the password.
func challenge(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/" {
		w.Header().Set("WWW-Authenticate", `Basic realm="tock", charset="UTF-8"`)
	} else {
		w.Header().Set("WWW-Authenticate", `Bearer realm="tock"`)
	}
}
