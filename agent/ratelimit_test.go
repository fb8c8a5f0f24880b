package agent

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/pegasus-engine/pegasus/agent/llm"
	"github.com/pegasus-engine/pegasus/fsm"
)

// scriptedModel answers every call after latency with usage, recording
// when each call reached it (by the bubble's fake clock). A call whose
// first attempt is to be throttled gets a 429 with Retry-After first.
type scriptedModel struct {
	latency  time.Duration
	usage    func(req llm.Request) llm.Usage
	throttle func(req llm.Request) time.Duration

	mu    sync.Mutex
	calls []modelCall
}

type modelCall struct {
	at        time.Time
	tokens    int
	text      string
	maxTokens int
}

func (m *scriptedModel) Name() string { return "scripted" }

func (m *scriptedModel) Complete(ctx context.Context, req llm.Request, report func(llm.Attempt)) (llm.Response, error) {
	if m.throttle != nil {
		if d := m.throttle(req); d > 0 {
			report(llm.Attempt{Number: 1, Status: 429, RetryAfter: d, WillRetry: true, Err: fmt.Errorf("429")})
			time.Sleep(d)
		}
	}
	u := m.usage(req)
	m.mu.Lock()
	m.calls = append(m.calls, modelCall{at: time.Now(), tokens: u.PromptTokens + u.CompletionTokens, text: req.Messages[0].Content,
		maxTokens: req.MaxTokens})
	m.mu.Unlock()
	time.Sleep(m.latency)
	r := llm.Response{Content: "ok", Usage: u}
	report(llm.Attempt{Number: 1, Response: &r})
	return r, nil
}

func request(text string) llm.Request {
	return llm.Request{Messages: []fsm.Message{{Role: "user", Content: text}}}
}

// TestRateLimitTPM: 50 tasks calling one model 4 times each under a
// tokens-per-minute limit: every call runs (none dropped), and the
// tokens of the calls started within any one minute never exceed the
// limit by more than one call's reservation. The clock is the bubble's.
func TestRateLimitTPM(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const tpm, maxTokens = 5000, 400
		model := &scriptedModel{latency: 3 * time.Second, usage: func(req llm.Request) llm.Usage {
			// The usage varies below the reservation.
			return llm.Usage{PromptTokens: estimateTokens(req), CompletionTokens: 100 + len(req.Messages[0].Content)*7%300}
		}}
		opts := Options{Model: model, RateLimits: map[string]RateLimit{"default": {TokensPerMinute: tpm, MaxTokens: maxTokens}}}
		rates := limitModels(&opts)
		var wg sync.WaitGroup
		for task := range 50 {
			wg.Go(func() {
				for i := range 4 {
					if _, err := opts.Model.Complete(t.Context(), request(fmt.Sprintf("task %d call %d", task, i)), nil); err != nil {
						t.Error(err)
					}
				}
			})
		}
		synctest.Wait()
		if st := rates.stats()[0]; st.Waiting == 0 || st.Tokens > tpm+maxTokens+estimateTokens(request("task 00 call 0")) {
			t.Errorf("while waiting: %+v", st)
		}
		wg.Wait()
		reservation := maxTokens + estimateTokens(request("task 00 call 0"))
		if len(model.calls) != 200 {
			t.Fatalf("%d calls ran, want 200", len(model.calls))
		}
		for i, c := range model.calls {
			sum := 0
			for _, d := range model.calls[i:] {
				if d.at.Sub(c.at) < time.Minute {
					sum += d.tokens
				}
			}
			if sum > tpm+reservation {
				t.Fatalf("the minute from %s holds %d tokens, more than %d + one reservation %d", c.at, sum, tpm, reservation)
			}
		}
		if st := rates.stats()[0]; st.Waiting != 0 {
			t.Fatalf("after: %+v", st)
		}
	})
}

// TestRateLimitOrderAndRPM: calls start in the order they waited (a small
// call does not overtake a large one waiting for room), within the
// requests per minute.
func TestRateLimitOrderAndRPM(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		model := &scriptedModel{latency: time.Second, usage: func(req llm.Request) llm.Usage {
			return llm.Usage{PromptTokens: 10, CompletionTokens: 10}
		}}
		opts := Options{Model: model, RateLimits: map[string]RateLimit{"default": {RequestsPerMinute: 2, TokensPerMinute: 1000, MaxTokens: 100}}}
		limitModels(&opts)
		var wg sync.WaitGroup
		for i := range 5 {
			wg.Go(func() {
				if _, err := opts.Model.Complete(t.Context(), request(fmt.Sprint(i)), nil); err != nil {
					t.Error(err)
				}
			})
			synctest.Wait() // each waits before the next arrives
		}
		wg.Wait()
		start := model.calls[0].at
		for i, c := range model.calls {
			if c.text != fmt.Sprint(i) {
				t.Fatalf("call %d was %q: out of order", i, c.text)
			}
			if want := start.Add(time.Duration(i/2) * time.Minute); !c.at.Equal(want) {
				t.Fatalf("call %d started at +%s, want +%s", i, c.at.Sub(start), want.Sub(start))
			}
		}
	})
}

// TestRateLimit429: a 429 with Retry-After pauses the model's window:
// a call waiting meanwhile starts no earlier than the pause ends; a
// cancelled wait leaves the line.
func TestRateLimit429(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		model := &scriptedModel{latency: time.Second,
			usage: func(req llm.Request) llm.Usage { return llm.Usage{PromptTokens: 1} },
			throttle: func(req llm.Request) time.Duration {
				if req.Messages[0].Content == "first" {
					return 30 * time.Second
				}
				return 0
			}}
		opts := Options{Model: model, RateLimits: map[string]RateLimit{"default": {RequestsPerMinute: 100}}}
		rates := limitModels(&opts)
		t0 := time.Now()
		first := make(chan struct{})
		go func() {
			defer close(first)
			opts.Model.Complete(t.Context(), request("first"), nil)
		}()
		synctest.Wait()
		ctx, cancel := context.WithCancel(t.Context())
		gone := make(chan error)
		go func() { _, err := opts.Model.Complete(ctx, request("cancelled"), nil); gone <- err }()
		synctest.Wait()
		if st := rates.stats()[0]; st.Waiting != 1 {
			t.Fatalf("%+v", st)
		}
		cancel()
		if err := <-gone; err == nil {
			t.Fatal("a cancelled wait ran")
		}
		if _, err := opts.Model.Complete(t.Context(), request("second"), nil); err != nil {
			t.Fatal(err)
		}
		<-first
		for _, c := range model.calls {
			if c.text == "second" && c.at.Sub(t0) < 30*time.Second {
				t.Fatalf("second started %s after the 429, within its Retry-After", c.at.Sub(t0))
			}
			if c.text == "cancelled" {
				t.Fatal("the cancelled call ran")
			}
		}
	})
}

// TestRateLimitBoundsTheReply: a call under a rate limit asks the server
// for no more completion tokens than it reserved (max_tokens), so that
// no reply outgrows its reservation; a request's own smaller bound stays.
func TestRateLimitBoundsTheReply(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		model := &scriptedModel{usage: func(llm.Request) llm.Usage { return llm.Usage{PromptTokens: 1} }}
		opts := Options{Model: model, RateLimits: map[string]RateLimit{"default": {TokensPerMinute: 100000, MaxTokens: 300}}}
		limitModels(&opts)
		small := request("small")
		small.MaxTokens = 50
		for _, req := range []llm.Request{request("default"), small} {
			if _, err := opts.Model.Complete(t.Context(), req, nil); err != nil {
				t.Fatal(err)
			}
		}
		if len(model.calls) != 2 || model.calls[0].maxTokens != 300 || model.calls[1].maxTokens != 50 {
			t.Fatalf("max_tokens sent: %+v, want 300 then 50", model.calls)
		}
	})
}

// TestRateLimitAgent: the agent's model calls go through the limiter of
// their named model; the usage reported replaces the reservation.
func TestRateLimitAgent(t *testing.T) {
	fm := newFakeModel(t, func(r *chatReq) reply { return text("done") })
	m := fm.client(t, nil)
	h := newHarness(t, Options{Model: m, Models: map[string]llm.Model{"fast": m}, DisableReflection: true,
		RateLimits: map[string]RateLimit{"fast": {RequestsPerMinute: 100, TokensPerMinute: 100000}}})
	if task := h.wait(h.submit("hi")); task.State != fsm.StateCompleted {
		t.Fatalf("state %s", task.State)
	}
	st := h.a.RateLimits()
	if len(st) != 1 || st[0].Model != "fast" || st[0].Requests != 1 || st[0].Tokens != 12 || st[0].Waiting != 0 {
		t.Fatalf("%+v", st)
	}
}
