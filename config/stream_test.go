package config

import "testing"

// TestModelStreamKey: a model streams unless it says stream: false.
func TestModelStreamKey(t *testing.T) {
	p := write(t, "pegasus.yaml", `
models:
  - name: a
    baseUrl: http://127.0.0.1:11434/v1
    model: m
    default: true
  - name: b
    baseUrl: http://127.0.0.1:11434/v1
    model: m
    stream: false
  - name: c
    baseUrl: http://127.0.0.1:11434/v1
    model: m
    stream: true
`, nil)
	f, err := Load(p, testEnv)
	if err != nil {
		t.Fatal(err)
	}
	if f.Models[0].NoStream || !f.Models[1].NoStream || f.Models[2].NoStream {
		t.Fatalf("models: %+v", f.Models)
	}
}
