package server

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"slices"
	"testing"

	"github.com/tockwheel/tock/api"
	"github.com/tockwheel/tock/internal/contract"
)

// TestOpenAPIHasEveryRoute checks that the routes the server registers are the operations of the
// OpenAPI document, method and path, no more and no fewer. (Package api's test checks the same of
// its Route constants.)
func TestOpenAPIHasEveryRoute(t *testing.T) {
	_, s := newTestServer(t)
	rt, err := contract.Document()
	if err != nil {
		t.Fatal(err)
	}
	var served []string
	for pattern := range s.metrics.routes {
		if pattern != "" {
			served = append(served, pattern)
		}
	}
	slices.Sort(served)
	inDoc := rt.Patterns()
	for _, p := range served {
		if _, found := slices.BinarySearch(inDoc, p); !found {
			t.Errorf("the server serves %s, which openapi.json does not describe", p)
		}
	}
	for _, p := range inDoc {
		if _, found := slices.BinarySearch(served, p); !found {
			t.Errorf("openapi.json describes %s, which the server does not serve", p)
		}
	}
}

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

// checkExercised reports, after a run of every test of the package, whether the tests' exchanges
// showed every successful answer the OpenAPI document gives: an answer that no exchange shows is
// one the document could describe wrongly with every test passing. It says which are missing. A
// run of some tests only (-run, -skip, -short) is not checked.
func checkExercised() bool {
	for _, name := range []string{"test.run", "test.skip"} {
		if f := flag.Lookup(name); f != nil && f.Value.String() != "" {
			return true
		}
	}
	if testing.Short() {
		return true
	}
	rt, err := contract.Document()
	if err != nil {
		return true // every test that served the API has failed with this error
	}
	missing := rt.Unexercised()
	for _, m := range missing {
		fmt.Fprintf(os.Stderr, "openapi.json: no test of package server exchanged %s: test it, so that its shape is validated\n", m)
	}
	return len(missing) == 0
}
