package server

import (
	"net/http"

	"github.com/pegasus-engine/pegasus/dashboard"
)

// web is the daemon's whole handler: the API, the dashboard and, unless
// noMetrics, /metrics behind the token; m (if any) counts every request.
func (s *Server) web(m Metrics, noMetrics bool) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/", s.routes())
	ui := dashboard.Handler()
	mux.Handle("GET /{$}", ui)
	mux.Handle("GET /ui/", ui)
	if m == nil {
		return mux
	}
	if !noMetrics {
		mux.Handle("GET /metrics", s.middleware(m.Handler()))
	}
	return m.InstrumentHTTP(mux)
}
