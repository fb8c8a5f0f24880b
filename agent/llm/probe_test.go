package llm

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestProbe: the probe's result for each answer, with the hints in its
// messages, and never a key or a URL's password.
func TestProbe(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/v1/models" && r.Header.Get("Authorization") == "Bearer sk-canary":
			w.Write([]byte(`{"data":[{"id":"a"},{"id":"b"}]}`))
		case r.URL.Path == "/v1/models":
			w.WriteHeader(http.StatusUnauthorized)
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	h := ProbeHints{BaseURL: "BASE", APIKey: "KEY", Model: "MODEL"}
	for _, c := range []struct {
		name   string
		o      Options
		status int
		want   string
	}{
		{"ok", Options{BaseURL: srv.URL + "/v1", Model: "a", APIKey: "sk-canary"}, 200, ""},
		{"unlisted", Options{BaseURL: srv.URL + "/v1", Model: "c", APIKey: "sk-canary"}, 200, `does not list model "c" (MODEL); it lists a, b`},
		{"bad key", Options{BaseURL: srv.URL + "/v1", Model: "a", APIKey: "sk-wrong-canary"}, 401, "check KEY"},
		{"no /v1", Options{BaseURL: srv.URL, Model: "a", APIKey: "sk-canary"}, 404, "BASE should be the API root"},
		{"down", Options{BaseURL: "http://u:pw-canary@127.0.0.1:1/v1", Model: "a"}, 0, "is BASE right?"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := Probe(context.Background(), c.o, h)
			if r.OK != (c.want == "") || r.Status != c.status || !strings.Contains(r.Error, c.want) || r.At.IsZero() {
				t.Errorf("%+v, want status %d and %q", r, c.status, c.want)
			}
			if strings.Contains(r.Error, "canary") {
				t.Errorf("the message holds a secret: %s", r.Error)
			}
		})
	}
	for in, want := range map[string]string{
		"https://u:pw@h/v1":                               "https://u:<redacted>@h/v1",
		"https://u@h/v1":                                  "https://u@h/v1",
		"https://h/mcp?api_key=canary&model=m":            "https://h/mcp?api_key=<redacted>&model=m",
		"https://h/mcp?model=m&access_token=canary#frag":  "https://h/mcp?model=m&access_token=<redacted>#frag",
		"https://h/mcp?Sig=canary&X-Amz-Signature=canary": "https://h/mcp?Sig=<redacted>&X-Amz-Signature=<redacted>",
		"https://h/mcp?token=${TOKEN}":                    "https://h/mcp?token=${TOKEN}",
		"https://u:pw@h/mcp?key=canary":                   "https://u:<redacted>@h/mcp?key=<redacted>",
		"https://h/mcp?page=2&empty_token=":               "https://h/mcp?page=2&empty_token=",
		"not a url at all":                                "not a url at all",
	} {
		if got := RedactURL(in); got != want {
			t.Errorf("RedactURL(%q) = %q, want %q", in, got, want)
		}
	}
}
