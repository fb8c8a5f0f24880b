package main

import (
	"bytes"
	"context"
	"errors"
	"github.com/pegasus-engine/pegasus/engine"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/pegasus-engine/pegasus/agent/llm"
)

// TestProbeModel: the start-up check of the model endpoint against a fake
// OpenAI-compatible server: a warning by default, an error under
// --llm-strict, nothing when the model is listed.
func TestProbeModel(t *testing.T) {
	fake := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/v1/models" && r.Header.Get("Authorization") == "Bearer sk-good":
			w.Write([]byte(`{"object":"list","data":[{"id":"llama3.1"},{"id":"qwen"}]}`))
		case r.URL.Path == "/v1/models":
			http.Error(w, `{"error":"bad key"}`, http.StatusUnauthorized)
		default:
			http.NotFound(w, r)
		}
	}))
	defer fake.Close()
	for _, tc := range []struct {
		name, base, model, key string
		want                   string // in the warning; "" for none
	}{
		{"ok", fake.URL + "/v1", "llama3.1", "sk-good", ""},
		{"unknown model", fake.URL + "/v1", "gpt-9", "sk-good", "does not list model"},
		{"bad key", fake.URL + "/v1", "llama3.1", "sk-bad", "check PEGASUS_LLM_API_KEY"},
		{"no /v1", fake.URL, "llama3.1", "sk-good", "usually ending in /v1"},
		{"nobody there", "http://127.0.0.1:1/v1", "llama3.1", "", "is the model server running"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := &config{llmBaseURL: tc.base, llmModel: tc.model, llmKey: llm.Secret(tc.key)}
			var logs bytes.Buffer
			err := engine.ProbeModel(context.Background(), cfg.llmOptions(), cfg.llmStrict, slog.New(slog.NewTextHandler(&logs, nil)))
			if err != nil {
				t.Fatalf("without --llm-strict: %v", err)
			}
			warned := strings.Contains(logs.String(), "level=WARN")
			if warned != (tc.want != "") || !strings.Contains(logs.String(), tc.want) {
				t.Fatalf("logs %q, want a warning with %q", logs.String(), tc.want)
			}
			cfg.llmStrict = true
			err = engine.ProbeModel(context.Background(), cfg.llmOptions(), cfg.llmStrict, slog.New(slog.NewTextHandler(&logs, nil)))
			if (err != nil) != (tc.want != "") || (err != nil && (!errors.Is(err, engine.ErrModelProbe) || !strings.Contains(err.Error(), tc.want))) {
				t.Fatalf("--llm-strict: %v, want an error with %q", err, tc.want)
			}
			if strings.Contains(logs.String(), "sk-") || (err != nil && strings.Contains(err.Error(), "sk-")) {
				t.Fatal("the key leaked")
			}
		})
	}
}
