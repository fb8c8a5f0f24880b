package llm

import (
	"context"
	"errors"
)

// WithFallback returns a model that asks primary and, when primary fails
// with a retryable error (Retryable: 429, 408, a 5xx, a transport error or
// an attempt's timeout) after its own attempts, asks each of fallbacks in
// order until one answers. Its Name is primary's.
//
// Every attempt of every model is reported, numbered across the models
// (1, 2, ... for the whole call), each with the model it asked: the last
// attempt of a model that is followed by the next one is reported with
// WillRetry set, so that the log says which model failed first and which
// answered. A failure that is not retryable (a 400, an answer that is not
// a completion) or the end of ctx ends the call at once.
func WithFallback(primary Model, fallbacks ...Model) Model {
	if len(fallbacks) == 0 {
		return primary
	}
	return &fallbackModel{models: append([]Model{primary}, fallbacks...)}
}

type fallbackModel struct{ models []Model }

func (f *fallbackModel) Name() string { return f.models[0].Name() }

// Models returns the models asked in order, primary first.
func (f *fallbackModel) Models() []Model { return append([]Model(nil), f.models...) }

func (f *fallbackModel) Complete(ctx context.Context, req Request, report func(Attempt)) (Response, error) {
	number := 0
	var (
		resp Response
		err  error
	)
	for i, m := range f.models {
		last := i == len(f.models)-1
		var held *Attempt // the model's final attempt, reported once its fate is known
		resp, err = m.Complete(ctx, req, func(att Attempt) {
			number++
			att.Number = number
			if att.Model == "" {
				att.Model = m.Name()
			}
			if att.WillRetry || att.Err == nil || report == nil {
				if report != nil {
					report(att)
				}
				return
			}
			held = &att
		})
		next := err != nil && !last && ctx.Err() == nil && Retryable(err)
		if held != nil {
			held.WillRetry = next
			report(*held)
		}
		if !next {
			return resp, err
		}
	}
	return resp, err
}

// Retryable reports whether a failed model call may succeed if asked again
// (or asked of another model): a 429, a 408, a 5xx, a transport error or an
// attempt that timed out. A 4xx otherwise, an answer that is not a chat
// completion, or a cancelled call is not.
func Retryable(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) {
		return false
	}
	return retryable(err)
}
