package api

import (
	"bytes"
	_ "embed" // the document
)

// openapi is the OpenAPI 3.1 document of the API, openapi.json beside this file.
//
//go:embed openapi.json
var openapi []byte

// OpenAPI returns the OpenAPI 3.1 document of the API, as JSON: every route with its request and
// answer bodies, its error codes and the token it needs. The server serves it at [RouteOpenAPI];
// other languages generate or write their clients from it, finding operations by operationId.
// The tests of package server validate every request and answer they exchange against it, so it
// says what the server does. Each call returns a new copy.
func OpenAPI() []byte { return bytes.Clone(openapi) }
