// Package llm talks to a chat model for the agent.
//
// Two models implement [Model]:
//
//   - [Client] speaks the OpenAI-compatible Chat Completions protocol with
//     tools and tool_calls over net/http and encoding/json. It works with
//     OpenAI, Ollama, vLLM, the llama.cpp server and LM Studio: point
//     BaseURL at the server's "/v1" root. Attempts that fail with 429, a 5xx
//     status or a transport error are retried with exponential backoff (and
//     the server's Retry-After, when it sends one).
//   - [Offline] is a small deterministic model used when no model is
//     configured, so that the quick start works on a fresh machine without
//     network access or a key. It is a demo and test model, not an
//     assistant: it reads the clock when asked the time, asks for
//     clarification on an empty or "?" input, and otherwise answers with a
//     fixed sentence.
//
// Every attempt, successful or not, is reported through the callback passed
// to Complete, so the agent can record it in the log (as MODEL_CALLED) and
// replay never has to call the model again.
//
// The API key is held as a [Secret]: it prints, marshals and logs as
// "[REDACTED]", and error texts that would contain it are scrubbed, so it
// never reaches a log line or the event log.
package llm
