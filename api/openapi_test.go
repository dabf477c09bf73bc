package api

import (
	"encoding/json"
	"go/ast"
	"go/constant"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// routeConstants returns the value of every Route constant of this package, by name, as the
// compiler evaluates them (several are built from Path constants).
func routeConstants(t *testing.T) map[string]string {
	t.Helper()
	fset := token.NewFileSet()
	names, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	var files []*ast.File
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	pkg, err := (&types.Config{Importer: importer.Default()}).Check("api", fset, files, nil)
	if err != nil {
		t.Fatal(err)
	}
	routes := map[string]string{}
	for _, name := range pkg.Scope().Names() {
		c, ok := pkg.Scope().Lookup(name).(*types.Const)
		if ok && strings.HasPrefix(name, "Route") && c.Val().Kind() == constant.String {
			routes[name] = constant.StringVal(c.Val())
		}
	}
	return routes
}

// openAPIPath returns the path of the document that stands for a ServeMux path: the same but for
// the root, which the mux spells "/{$}" (the root alone, not every path).
func openAPIPath(muxPath string) string {
	if muxPath == "/{$}" {
		return "/"
	}
	return muxPath
}

// TestOpenAPIHasEveryRoute checks that every route constant of this package, method and path, is
// an operation of the document, and that every operation of the document is one of them: the
// document can neither miss a route nor describe one the server does not have. (Package server's
// tests check that the server registers every route constant.)
func TestOpenAPIHasEveryRoute(t *testing.T) {
	var doc struct {
		OpenAPI string                                `json:"openapi"`
		Paths   map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(OpenAPI(), &doc); err != nil {
		t.Fatalf("openapi.json: %v", err)
	}
	if !strings.HasPrefix(doc.OpenAPI, "3.1.") {
		t.Errorf("openapi.json is OpenAPI %q, not 3.1", doc.OpenAPI)
	}
	inDoc := map[string]bool{}
	for path, item := range doc.Paths {
		for method := range item {
			switch method {
			case "get", "put", "post", "delete", "patch", "head", "options", "trace":
				inDoc[strings.ToUpper(method)+" "+path] = true
			}
		}
	}
	routes := routeConstants(t)
	if len(routes) < 30 {
		t.Fatalf("found %d Route constants; the parse missed some: %v", len(routes), routes)
	}
	asRoutes := map[string]string{}
	for name, pattern := range routes {
		method, path, ok := strings.Cut(pattern, " ")
		if !ok {
			t.Errorf("%s = %q has no method", name, pattern)
			continue
		}
		op := method + " " + openAPIPath(path)
		asRoutes[op] = name
		if !inDoc[op] {
			t.Errorf("route %s (%s) is not in openapi.json", name, pattern)
		}
	}
	var extra []string
	for op := range inDoc {
		if asRoutes[op] == "" {
			extra = append(extra, op)
		}
	}
	slices.Sort(extra)
	for _, op := range extra {
		t.Errorf("openapi.json describes %s, which is no Route constant of package api", op)
	}
}

// TestOpenAPIOperationIDs checks that every operation has an operationId, the name other
// languages find it by, and that no two share one.
func TestOpenAPIOperationIDs(t *testing.T) {
	var doc struct {
		Paths map[string]map[string]struct {
			OperationID string `json:"operationId"`
		} `json:"paths"`
	}
	if err := json.Unmarshal(OpenAPI(), &doc); err != nil {
		t.Fatal(err)
	}
	seen := map[string]string{}
	for path, item := range doc.Paths {
		for method, op := range item {
			where := strings.ToUpper(method) + " " + path
			switch {
			case op.OperationID == "":
				t.Errorf("%s has no operationId", where)
			case seen[op.OperationID] != "":
				t.Errorf("%s and %s share operationId %q", where, seen[op.OperationID], op.OperationID)
			}
			seen[op.OperationID] = where
		}
	}
}
