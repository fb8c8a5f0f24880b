package llm

import (
	"context"
	"encoding/json"
	"time"

	"github.com/pegasus-engine/pegasus/fsm"
)

// Model is a chat model that can choose tools.
type Model interface {
	// Name is the model's name as recorded in MODEL_CALLED.
	Name() string
	// Complete runs one chat completion, retrying as the model sees fit.
	// report, when not nil, is called once per attempt, in order, before
	// Complete returns; it runs on the caller's goroutine.
	Complete(ctx context.Context, req Request, report func(Attempt)) (Response, error)
}

// Request is one chat completion request.
type Request struct {
	// Messages is the conversation, system prompt first.
	Messages []fsm.Message
	// Tools are the tools the model may call.
	Tools []ToolSpec
	// MaxTokens bounds the reply's tokens (the request's max_tokens); 0
	// leaves it to the server. A model's rate limit sets it to what a
	// call reserves, so that no reply outgrows its reservation.
	MaxTokens int
	// Purpose says what the call is for ("reason" or "reflect"). It is not
	// sent to the server; the offline model uses it to pick its behaviour.
	Purpose string
	// Deltas, when not nil, receives the reply's text as it arrives, piece
	// by piece, on the goroutine that called Complete: a streaming client
	// calls it for every piece of content a chunk carries, a model that
	// does not stream once with the whole text. The pieces of one attempt
	// are in order; an attempt that fails after some of them is reported
	// (with WillRetry when another follows) before the next attempt's
	// first piece, so the caller knows where an attempt ends. Tool calls
	// are not delivered here; they are in the Response.
	Deltas func(text string)
}

// ToolSpec describes one tool to the model (an OpenAI "function" tool).
type ToolSpec struct {
	Name        string
	Description string
	// Parameters is the JSON Schema of the arguments object. Nil means an
	// object without properties.
	Parameters json.RawMessage
}

// Response is the model's reply.
type Response struct {
	Model        string // the model that answered, as the server reports it
	Content      string
	ToolCalls    []fsm.ToolCall
	FinishReason string
	Usage        Usage
}

// Usage is the token accounting of one call, as the server reports it.
type Usage struct {
	PromptTokens     int
	CompletionTokens int
}

// Attempt describes one attempt of a Complete call.
type Attempt struct {
	Number  int           // 1 for the first attempt
	Model   string        // the requested model
	Latency time.Duration // from sending the request to reading the whole response
	Status  int           // HTTP status, 0 when no response arrived
	// Err is nil for a successful attempt. Its text never contains the
	// API key.
	Err error
	// Response is set when Err is nil.
	Response *Response
	// WillRetry reports whether another attempt follows this failed one.
	WillRetry bool
	// RetryAfter is the wait the server asked for (a 429's or a 503's
	// Retry-After), 0 when it asked for none.
	RetryAfter time.Duration
}
