package server

import (
	"bytes"
	"testing"

	"github.com/tockwheel/tock/api"
)

// TestOpenAPIServed checks that /openapi.json serves the document, with no token where every
// other route but /healthz needs one.
func TestOpenAPIServed(t *testing.T) {
	ts, _ := newTestServer(t, WithToken("secret"))
	r := call(t, ts, "GET", api.PathOpenAPI, "")
	if r.status != 200 || r.header.Get("Content-Type") != "application/json" {
		t.Fatalf("GET %s: %d %s", api.PathOpenAPI, r.status, r.header.Get("Content-Type"))
	}
	if !bytes.Equal(r.body, api.OpenAPI()) {
		t.Errorf("GET %s does not answer api.OpenAPI()", api.PathOpenAPI)
	}
	if r := call(t, ts, "GET", api.PathStats, ""); r.status != 401 {
		t.Errorf("GET %s without the token: %d, want 401", api.PathStats, r.status)
	}
}
