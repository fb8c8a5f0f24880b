// Package dashboard is the web dashboard of pegasusd: plain HTML, CSS and
// JavaScript embedded in the binary, with no build step and no request
// beyond the daemon itself, so it works offline.
//
// The page is public (it holds no data); everything it shows comes from the
// daemon's HTTP API, which enforces the token. With a token set, the page
// asks for it once and keeps it in the tab's sessionStorage, never in a URL.
// Event streams are read with fetch, not EventSource, because EventSource
// cannot send an Authorization header.
//
// Routes: GET / is the page; GET /ui/<file> its assets. Views are chosen by
// the URL's fragment (#/tasks, #/tasks/<id>), so the server needs no route
// per view. See docs/dashboard.md.
package dashboard

import (
	"embed"
	"io/fs"
	"net/http"
	"strings"
)

//go:embed assets
var assets embed.FS

// Handler serves the dashboard: the page at "/" and its assets under
// "/ui/". Mount it for exactly those paths ("GET /{$}" and "GET /ui/").
func Handler() http.Handler {
	sub, err := fs.Sub(assets, "assets")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	files := http.StripPrefix("/ui/", http.FileServerFS(sub))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		// Same-origin only: the page talks to the daemon that served it.
		h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-cache")
		switch {
		case r.URL.Path == "/":
			http.ServeFileFS(w, r, sub, "index.html")
			return
		case strings.HasSuffix(r.URL.Path, "/"):
			http.NotFound(w, r) // no directory listings
			return
		}
		files.ServeHTTP(w, r)
	})
}
