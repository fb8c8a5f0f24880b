package config

import (
	"reflect"
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
  prices:
    default: {input: 2.5, output: 10}
  budgets:
    taskTypes:
      general: {maxTokens: 100000, maxCost: 1.5, policy: fail}
    keys:
      acme: {maxCost: 20}
    defaultKey: {maxTokens: 5000}
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
	if f.Limits.Prices["default"] != (Price{Input: 2.5, Output: 10}) {
		t.Errorf("prices: %+v", f.Limits.Prices)
	}
	b := f.Limits.Budgets
	if b.TaskTypes["general"] != (TaskBudget{MaxTokens: 100000, MaxCost: 1.5, Policy: "fail"}) ||
		b.Keys["acme"] != (KeyBudget{MaxCost: 20, Window: "day"}) || b.DefaultKey == nil || *b.DefaultKey != (KeyBudget{MaxTokens: 5000, Window: "day"}) {
		t.Errorf("budgets: %+v", b)
	}
	if f.Schedules[0].ConcurrencyKey != "acme" {
		t.Errorf("schedule: %+v", f.Schedules[0])
	}
}

func TestBadLimits(t *testing.T) {
	testBad(t, []badFile{
		{"negative default", "limits:\n  concurrency:\n    default: -1\n", 3, "limits.concurrency.default", "-1: a limit is 0 (none)"},
		{"key limit", "limits:\n  concurrency:\n    keys:\n      acme: 200000\n", 4, "limits.concurrency.keys.acme", "200000"},
		{"not a number", "limits:\n  concurrency:\n    keys:\n      acme: four\n", 4, "limits.concurrency.keys.acme", "a whole number"},
		{"unknown model", "limits:\n  models:\n    gpt: {tokensPerMinute: 5}\n", 3, "limits.models.gpt", "unknown model \"gpt\""},
		{"negative rate", "limits:\n  models:\n    default:\n      tokensPerMinute: -5\n", 4, "limits.models.default.tokensPerMinute", "-5"},
		{"price model", "limits:\n  prices:\n    gpt: {input: 1, output: 2}\n", 3, "limits.prices.gpt", "unknown model"},
		{"negative price", "limits:\n  prices:\n    default:\n      input: 1\n      output: -2\n", 5, "limits.prices.default.output", "-2"},
		{"budget type", "limits:\n  budgets:\n    taskTypes:\n      nope: {maxCost: 1}\n", 4, "limits.budgets.taskTypes.nope", "unknown task type"},
		{"budget policy", "limits:\n  budgets:\n    taskTypes:\n      general:\n        policy: pause\n", 5, "limits.budgets.taskTypes.general.policy", "suspend or fail"},
		{"budget window", "limits:\n  budgets:\n    keys:\n      acme:\n        window: week\n", 5, "limits.budgets.keys.acme.window", "day"},
		{"unknown key", "limits:\n  concurency: {}\n", 2, "limits.concurency", ""},
		{"schedule key", "schedules:\n  - {name: s, cron: \"@hourly\", input: x, concurrencyKey: \"a\\tb\"}\n", 2, "schedules[0].concurrencyKey", "control characters"},
	})
}
