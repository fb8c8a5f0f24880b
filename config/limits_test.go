package config

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

const limitsYAML = `
schedules:
  - {name: nightly, cron: "@daily", input: report, concurrencyKey: acme}
limits:
  concurrency:
    default: 2
    keys:
      acme: 4
      beta: 1
  models:
    default: {requestsPerMinute: 60, tokensPerMinute: 90000, maxTokens: 2048}
`

func TestLoadLimits(t *testing.T) {
	f, err := Load(write(t, "pegasus.yaml", limitsYAML, nil), testEnv)
	if err != nil {
		t.Fatal(err)
	}
	want := Concurrency{Default: 2, Keys: map[string]int{"acme": 4, "beta": 1}}
	if !reflect.DeepEqual(f.Limits.Concurrency, want) {
		t.Errorf("concurrency: %+v", f.Limits.Concurrency)
	}
	if r := f.Limits.Models["default"]; r != (RateLimit{RequestsPerMinute: 60, TokensPerMinute: 90000, MaxTokens: 2048}) {
		t.Errorf("rate limit: %+v", r)
	}
	if f.Schedules[0].ConcurrencyKey != "acme" {
		t.Errorf("schedule: %+v", f.Schedules[0])
	}
}

func TestBadLimits(t *testing.T) {
	for _, c := range []struct {
		name, text string
		line       int
		key, msg   string
	}{
		{"negative default", "limits:\n  concurrency:\n    default: -1\n", 3, "limits.concurrency.default", "-1: a limit is 0 (none)"},
		{"key limit", "limits:\n  concurrency:\n    keys:\n      acme: 200000\n", 4, "limits.concurrency.keys.acme", "200000"},
		{"not a number", "limits:\n  concurrency:\n    keys:\n      acme: four\n", 4, "limits.concurrency.keys.acme", "a whole number"},
		{"unknown model", "limits:\n  models:\n    gpt: {tokensPerMinute: 5}\n", 3, "limits.models.gpt", "unknown model \"gpt\""},
		{"negative rate", "limits:\n  models:\n    default:\n      tokensPerMinute: -5\n", 4, "limits.models.default.tokensPerMinute", "-5"},
		{"unknown key", "limits:\n  concurency: {}\n", 2, "limits.concurency", ""},
		{"schedule key", "schedules:\n  - {name: s, cron: \"@hourly\", input: x, concurrencyKey: \"a\\tb\"}\n", 2, "schedules[0].concurrencyKey", "control characters"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Load(write(t, "pegasus.yaml", c.text, nil), testEnv)
			var e *Error
			if !errors.As(err, &e) || !errors.Is(err, ErrInvalid) {
				t.Fatalf("got %v, want an *Error", err)
			}
			if e.Line != c.line || e.Key != c.key || !strings.Contains(e.Msg, c.msg) {
				t.Errorf("got line %d key %q msg %q (%v)", e.Line, e.Key, e.Msg, err)
			}
		})
	}
}
