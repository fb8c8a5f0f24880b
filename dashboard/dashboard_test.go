package dashboard

import (
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
)

func get(t *testing.T, path string) (*http.Response, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	Handler().ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
	res := rec.Result()
	body, _ := io.ReadAll(res.Body)
	return res, string(body)
}

func TestServes(t *testing.T) {
	for _, c := range []struct{ path, ctype, contains string }{
		{"/", "text/html", `<script src="/ui/app.js"`},
		{"/ui/app.js", "javascript", "askToken"},
		{"/ui/style.css", "text/css", ".state"},
	} {
		res, body := get(t, c.path)
		if res.StatusCode != 200 || !strings.Contains(res.Header.Get("Content-Type"), c.ctype) || !strings.Contains(body, c.contains) {
			t.Errorf("GET %s: %d %s, %d bytes", c.path, res.StatusCode, res.Header.Get("Content-Type"), len(body))
		}
		if csp := res.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'self'") {
			t.Errorf("GET %s: Content-Security-Policy %q", c.path, csp)
		}
	}
	for _, p := range []string{"/ui/missing.js", "/ui/"} {
		if res, _ := get(t, p); res.StatusCode != 404 {
			t.Errorf("GET %s: %d, want 404", p, res.StatusCode)
		}
	}
}

// TestOffline: the assets load nothing from elsewhere (no CDN), and the
// page never puts the token in a URL.
func TestOffline(t *testing.T) {
	external := regexp.MustCompile(`(src|href)\s*=\s*["'](https?:)?//|url\(\s*["']?(https?:)?//|fetch\(\s*["'](https?:)?//|@import`)
	err := fs.WalkDir(assets, "assets", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := assets.ReadFile(path)
		if err != nil {
			return err
		}
		if m := external.Find(data); m != nil {
			t.Errorf("%s loads from elsewhere: %s", path, m)
		}
		if strings.Contains(string(data), "token=") {
			t.Errorf("%s puts a token in a URL", path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
