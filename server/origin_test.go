package server

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/tockwheel/tock/delayq"
	"github.com/tockwheel/tock/internal/contract"
)

// browserCases are requests as a browser sends them for a page of another
// origin, and as programs send them, with the status each must get. A page
// can make a browser send a text/plain, form or multipart POST to any
// origin without asking it first; without these checks such a POST put a
// message into a tockd on localhost.
var browserCases = []struct {
	name, method, path, body string
	hdr                      []string // name, value, ...
	status                   int
	code                     string
}{
	{"program, JSON", "POST", "/v1/topics/o/messages", `{}`, []string{"Content-Type", "application/json"}, 201, ""},
	{"JSON with charset", "POST", "/v1/topics/o/messages", `{}`, []string{"Content-Type", "application/json; charset=UTF-8"}, 201, ""},
	{"JSON in capitals", "POST", "/v1/topics/o/messages", `{}`, []string{"Content-Type", "Application/JSON"}, 201, ""},
	{"no content type", "POST", "/v1/topics/o/messages", `{}`, nil, 415, "unsupported_media_type"},
	{"text/plain", "POST", "/v1/topics/o/messages", `{}`, []string{"Content-Type", "text/plain;charset=UTF-8"}, 415, "unsupported_media_type"},
	{"form", "POST", "/v1/topics/o/messages", `{}`, []string{"Content-Type", "application/x-www-form-urlencoded"}, 415, "unsupported_media_type"},
	{"multipart", "POST", "/v1/topics/o/messages", `{}`, []string{"Content-Type", "multipart/form-data; boundary=x"}, 415, "unsupported_media_type"},
	{"JSON in latin1", "POST", "/v1/topics/o/messages", `{}`, []string{"Content-Type", "application/json; charset=latin1"}, 415, "unsupported_media_type"},
	{"JSON-like type", "POST", "/v1/topics/o/messages", `{}`, []string{"Content-Type", "application/json-patch+json"}, 415, "unsupported_media_type"},
	{"ack as text/plain", "POST", "/v1/ack", `{"receipts":["x"]}`, []string{"Content-Type", "text/plain"}, 415, "unsupported_media_type"},
	{"receive without a body", "POST", "/v1/topics/o/receive", ``, nil, 200, ""},

	{"cross-site text/plain POST", "POST", "/v1/topics/o/messages", `{}`,
		[]string{"Content-Type", "text/plain", "Origin", "http://evil.example", "Sec-Fetch-Site", "cross-site", "Sec-Fetch-Mode", "no-cors"}, 403, "cross_origin"},
	{"cross-site JSON POST", "POST", "/v1/topics/o/messages", `{}`,
		[]string{"Content-Type", "application/json", "Origin", "http://evil.example", "Sec-Fetch-Site", "cross-site", "Sec-Fetch-Mode", "cors"}, 403, "cross_origin"},
	{"same-site POST", "POST", "/v1/topics/o/messages", `{}`,
		[]string{"Content-Type", "application/json", "Origin", "http://other.localhost", "Sec-Fetch-Site", "same-site"}, 403, "cross_origin"},
	{"old browser, foreign Origin", "POST", "/v1/topics/o/messages", `{}`,
		[]string{"Content-Type", "application/json", "Origin", "http://evil.example"}, 403, "cross_origin"},
	{"Origin null", "POST", "/v1/topics/o/messages", `{}`,
		[]string{"Content-Type", "application/json", "Origin", "null"}, 403, "cross_origin"},
	{"cross-site DELETE", "DELETE", "/v1/messages/x", ``,
		[]string{"Origin", "http://evil.example", "Sec-Fetch-Site", "cross-site"}, 403, "cross_origin"},
	{"cross-site form navigation", "POST", "/v1/topics/o/messages", `{}`,
		[]string{"Content-Type", "application/x-www-form-urlencoded", "Origin", "http://evil.example", "Sec-Fetch-Site", "cross-site", "Sec-Fetch-Mode", "navigate"}, 403, "cross_origin"},
	{"same-origin POST (the status page)", "POST", "/v1/topics/o/messages", `{}`,
		[]string{"Content-Type", "application/json", "Sec-Fetch-Site", "same-origin", "Sec-Fetch-Mode", "cors"}, 201, ""},
	{"cross-site embed of /metrics", "GET", "/metrics", ``,
		[]string{"Sec-Fetch-Site", "cross-site", "Sec-Fetch-Mode", "no-cors", "Sec-Fetch-Dest", "image"}, 403, "cross_origin"},
	{"cross-site fetch of stats", "GET", "/v1/stats", ``,
		[]string{"Origin", "http://evil.example", "Sec-Fetch-Site", "cross-site", "Sec-Fetch-Mode", "cors"}, 403, "cross_origin"},
	{"link to the status page", "GET", "/", ``,
		[]string{"Sec-Fetch-Site", "cross-site", "Sec-Fetch-Mode", "navigate", "Sec-Fetch-Dest", "document"}, 200, ""},
	{"address bar", "GET", "/", ``, []string{"Sec-Fetch-Site", "none", "Sec-Fetch-Mode", "navigate"}, 200, ""},
	{"preflight from another origin", "OPTIONS", "/v1/topics/o/messages", ``,
		[]string{"Origin", "http://evil.example", "Access-Control-Request-Method", "POST", "Sec-Fetch-Site", "cross-site"}, 403, "cross_origin"},

	{"rebound DNS name", "POST", "/v1/topics/o/messages", `{}`,
		[]string{"Content-Type", "application/json", "Host", "evil.example:7070", "Origin", "http://evil.example:7070", "Sec-Fetch-Site", "same-origin"}, 421, "wrong_host"},
	{"rebound DNS name, GET", "GET", "/v1/stats", ``, []string{"Host", "evil.example"}, 421, "wrong_host"},
	{"localhost", "GET", "/v1/stats", ``, []string{"Host", "localhost:7070"}, 200, ""},
	{"IPv6 loopback", "GET", "/v1/stats", ``, []string{"Host", "[::1]:7070"}, 200, ""},
	{"allowed origin", "POST", "/v1/topics/o/messages", `{}`,
		[]string{"Content-Type", "application/json", "Origin", "https://app.example", "Sec-Fetch-Site", "cross-site", "Sec-Fetch-Mode", "cors"}, 201, ""},
	{"allowed origin's preflight", "OPTIONS", "/v1/topics/o/messages", ``,
		[]string{"Origin", "https://app.example", "Access-Control-Request-Method", "POST", "Access-Control-Request-Headers", "content-type"}, 204, ""},
	{"allowed host", "GET", "/v1/stats", ``, []string{"Host", "Proxy.Example:443"}, 200, ""},
}

// TestBrowserRequests sends browserCases to a server on a loopback address
// that allows one origin and one extra host name.
func TestBrowserRequests(t *testing.T) {
	ts, _ := newTestServer(t, WithAllowedOrigins("https://app.example"), WithAllowedHosts("proxy.example"))
	for _, tc := range browserCases {
		t.Run(tc.name, func(t *testing.T) {
			r := rawCall(t, ts, tc.method, tc.path, tc.body, tc.hdr...)
			if r.status != tc.status {
				t.Fatalf("%s %s: %d %s, want %d", tc.method, tc.path, r.status, r.body, tc.status)
			}
			if tc.code != "" {
				if code := r.errorCode(t); code != tc.code {
					t.Errorf("code %q, want %q", code, tc.code)
				}
			}
			origin := header(tc.hdr, "Origin")
			allowed := r.header.Get("Access-Control-Allow-Origin")
			switch {
			case origin == "https://app.example" && allowed != origin:
				t.Errorf("allowed origin answered with Access-Control-Allow-Origin %q", allowed)
			case origin != "https://app.example" && allowed != "":
				t.Errorf("Access-Control-Allow-Origin %q for origin %q", allowed, origin)
			}
		})
	}
}

func header(hdr []string, name string) string {
	for i := 0; i+1 < len(hdr); i += 2 {
		if strings.EqualFold(hdr[i], name) {
			return hdr[i+1]
		}
	}
	return ""
}

// rawCall is call without the JSON content type: hdr sets every header,
// Host included.
func rawCall(t *testing.T, ts *httptest.Server, method, path, body string, hdr ...string) result {
	t.Helper()
	req, err := http.NewRequest(method, ts.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body == "" {
		req.Body, req.ContentLength = http.NoBody, 0
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		if strings.EqualFold(hdr[i], "Host") {
			req.Host = hdr[i+1]
			continue
		}
		req.Header.Set(hdr[i], hdr[i+1])
	}
	return do(t, ts, req)
}

// FuzzBrowserRequests sends requests with arbitrary methods, content types
// and browser headers, and checks the rules whatever the combination: a
// browser request from another origin never changes anything, nor does a
// body that is not JSON, and every refusal is a JSON error.
func FuzzBrowserRequests(f *testing.F) {
	for _, tc := range browserCases {
		f.Add(tc.method, tc.path, header(tc.hdr, "Content-Type"), header(tc.hdr, "Origin"),
			header(tc.hdr, "Sec-Fetch-Site"), header(tc.hdr, "Sec-Fetch-Mode"), tc.body)
	}
	q, err := delayq.Open(f.TempDir(), delayq.WithNoSync())
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { q.Close() })
	s := New(q)
	f.Fuzz(func(t *testing.T, method, path, ct, origin, site, mode, body string) {
		if !strings.HasPrefix(path, "/") {
			path = "/" + path
		}
		req := httptest.NewRequest("GET", "/", strings.NewReader(body))
		req.Method, req.URL.Path, req.URL.RawPath, req.ContentLength = method, path, "", int64(len(body))
		req.Header = http.Header{}
		for k, v := range map[string]string{"Content-Type": ct, "Origin": origin, "Sec-Fetch-Site": site, "Sec-Fetch-Mode": mode} {
			if v != "" {
				req.Header[k] = []string{v}
			}
		}
		before := q.Snapshot()
		rec := httptest.NewRecorder()
		contract.Handler(t, s).ServeHTTP(rec, req)
		after := q.Snapshot()
		changed := after.Puts != before.Puts || after.Cancelled != before.Cancelled || after.Delivered != before.Delivered ||
			after.Acked != before.Acked || after.Nacked != before.Nacked
		u, err := url.Parse(origin)
		crossSite := site == "cross-site" || site == "same-site" ||
			(site == "" && origin != "" && (err != nil || u.Host != req.Host))
		notJSON := body != "" && !isJSONMediaType(ct)
		switch {
		case changed && crossSite:
			t.Fatalf("%s %s from %q (Sec-Fetch-Site %q) changed the queue: %d %s", method, path, origin, site, rec.Code, rec.Body)
		case changed && notJSON:
			t.Fatalf("%s %s with a %q body changed the queue: %d %s", method, path, ct, rec.Code, rec.Body)
		case rec.Code >= 400 && rec.Header().Get("Content-Type") != "application/json":
			t.Fatalf("%s %s: %d answered as %q: %s", method, path, rec.Code, rec.Header().Get("Content-Type"), rec.Body)
		}
	})
}
