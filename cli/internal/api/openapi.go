package api

import (
	_ "embed"
	"net/http"
)

// openAPI is the OpenAPI 3.1 document of every endpoint serve answers
// (docs/http.md). It is written by hand and checked against the running
// server's answers (cli/internal/openapitest, which reads the file), so it cannot drift from the
// handlers unnoticed.
//
//go:embed openapi.json
var openAPI []byte

func serveOpenAPI(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(openAPI)
}
