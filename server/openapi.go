package server

import (
	_ "embed"
	"net/http"
)

// openAPIDoc is the OpenAPI 3.1 document of every /v1 route and of the
// broker's /api/v1, kept in the repository (openapi.json) and served at
// /v1/openapi.json. A test drives the real handlers and validates every
// request and response against it, so it cannot drift from the code.
//
//go:embed openapi.json
var openAPIDoc []byte

func (s *Server) openAPI(w http.ResponseWriter, r *http.Request) *apiError {
	if _, e := query(r); e != nil {
		return e
	}
	w.Header().Set("Content-Type", "application/json")
	w.Write(openAPIDoc)
	return nil
}
