package client

import (
	"context"
	crand "crypto/rand"
	"iter"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/pegasus-engine/pegasus/api"
)

// Submit creates a task of the agent (POST /v1/tasks). With
// WithIdempotencyKey, sending it again (after a lost answer, or a crash of
// the caller) answers with the same task instead of creating another one;
// without it, the client sends a random key of its own, which makes its
// own retries safe but not the caller's.
func (c *Client) Submit(ctx context.Context, t api.CreateTask, opts ...CallOption) (api.Created, error) {
	var out api.Created
	err := c.keyed(ctx, request{method: http.MethodPost, path: "/v1/tasks", body: t}, opts, &out)
	return out, err
}

// SubmitMany creates up to api.MaxBatch tasks of the agent in one request
// (POST /v1/tasks:batch): all in one synced commit, all or none. It
// returns each task's answer in the order of tasks. An invalid item
// refuses the whole batch: the *Error (ErrBadRequest) lists each refused
// item by its index in Items, and nothing is created. An item with an
// IdempotencyKey is created once: a batch sent again answers it as the
// first time. When the client retries (Options.MaxAttempts > 1), it gives
// each item without a key a random key of its own, which makes its own
// retries of the batch safe.
func (c *Client) SubmitMany(ctx context.Context, tasks []api.CreateTaskItem) ([]api.Created, error) {
	var out api.CreatedTasks
	err := c.batch(ctx, "/v1/tasks:batch", api.CreateTasks{Tasks: withKeys(c, tasks, func(t *api.CreateTaskItem) *string { return &t.IdempotencyKey })}, &out)
	return out.Tasks, err
}

// withKeys returns items with a random key in each item without one
// (key returns the item's key), when the client retries and so needs
// them; else items as they are.
func withKeys[T any](c *Client, items []T, key func(*T) *string) []T {
	if c.opts.MaxAttempts <= 1 {
		return items
	}
	out := slices.Clone(items)
	for i := range out {
		if k := key(&out[i]); *k == "" {
			*k = crand.Text()
		}
	}
	return out
}

// batch posts a batch whose items all carry a key (or that the client
// does not retry), with the tokens of the single create it batches.
func (c *Client) batch(ctx context.Context, path string, body, out any) error {
	_, err := c.do(ctx, request{method: http.MethodPost, path: path, body: body, idempotent: c.opts.MaxAttempts > 1}, out)
	return err
}

// Get returns a task (GET /v1/tasks/{id}), with its whole context.
func (c *Client) Get(ctx context.Context, id string) (api.Task, error) {
	var out api.Task
	_, err := c.do(ctx, c.get(pathf("/v1/tasks/%s", id), nil), &out)
	return out, err
}

// maxPoll is the longest wait of one long poll the server grants.
const maxPoll = 30 * time.Second

// Wait returns the task once it is settled: finished (completed or
// failed) or suspended (waiting for an answer, Task.Question), whichever
// comes first, or ctx's error. It long-polls the server, 30 s at a time.
func (c *Client) Wait(ctx context.Context, id string) (api.Task, error) {
	for {
		var t api.Task
		q := url.Values{"wait": {maxPoll.String()}}
		if _, err := c.do(ctx, c.get(pathf("/v1/tasks/%s", id), q), &t); err != nil {
			return t, err
		}
		if t.Finished() || t.State == api.StateSuspended {
			return t, nil
		}
	}
}

// ListOptions filter and page GET /v1/tasks. Each list holds values of
// which a task must match one.
type ListOptions struct {
	States   []string // api.State...
	Machines []string // NAME or NAME@VERSION
	Types    []string
	Sources  []string
	Query    string // the task's id or input contains it, ignoring case
	Limit    int    // 1 to 1000; 0: the server's default (50)
	Cursor   string // TaskPage.NextCursor of the page before
	Order    string // "desc" (newest first, the default), "asc" or "queue"
}

func (o ListOptions) values() url.Values {
	q := url.Values{}
	set := func(k, v string) {
		if v != "" {
			q.Set(k, v)
		}
	}
	set("state", strings.Join(o.States, ","))
	set("machine", strings.Join(o.Machines, ","))
	set("type", strings.Join(o.Types, ","))
	set("source", strings.Join(o.Sources, ","))
	set("q", o.Query)
	if o.Limit > 0 {
		q.Set("limit", strconv.Itoa(o.Limit))
	}
	set("cursor", o.Cursor)
	set("order", o.Order)
	return q
}

// List returns one page of tasks (GET /v1/tasks).
func (c *Client) List(ctx context.Context, o ListOptions) (api.TaskPage, error) {
	var out api.TaskPage
	_, err := c.do(ctx, c.get("/v1/tasks", o.values()), &out)
	return out, err
}

// All returns every task the options select, page after page, from
// o.Cursor on; it stops at the first error, which it yields.
func (c *Client) All(ctx context.Context, o ListOptions) iter.Seq2[api.TaskSummary, error] {
	return func(yield func(api.TaskSummary, error) bool) {
		for {
			page, err := c.List(ctx, o)
			if err != nil {
				yield(api.TaskSummary{}, err)
				return
			}
			for _, t := range page.Tasks {
				if !yield(t, nil) {
					return
				}
			}
			if page.NextCursor == "" {
				return
			}
			o.Cursor = page.NextCursor
		}
	}
}

// TaskEvents returns a task's events after its version afterVersion, at
// most limit (0: the server's default, 1000) (GET /v1/tasks/{id}/events).
func (c *Client) TaskEvents(ctx context.Context, id string, afterVersion uint64, limit int) (api.TaskEvents, error) {
	q := url.Values{}
	if afterVersion > 0 {
		q.Set("after_version", strconv.FormatUint(afterVersion, 10))
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	var out api.TaskEvents
	_, err := c.do(ctx, c.get(pathf("/v1/tasks/%s/events", id), q), &out)
	return out, err
}

// Events returns the log's events after the sequence afterSeq, at most
// limit (0: the server's default, 100) (GET /v1/events).
func (c *Client) Events(ctx context.Context, afterSeq uint64, limit int) (api.EventPage, error) {
	q := url.Values{"after_seq": {strconv.FormatUint(afterSeq, 10)}}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	var out api.EventPage
	_, err := c.do(ctx, c.get("/v1/events", q), &out)
	return out, err
}

// TaskProgress returns a task's progress view (GET /v1/tasks/{id}/progress).
func (c *Client) TaskProgress(ctx context.Context, id string) (api.Progress, error) {
	var out api.Progress
	_, err := c.do(ctx, c.get(pathf("/v1/tasks/%s/progress", id), nil), &out)
	return out, err
}

// Reply answers a suspended task (POST /v1/tasks/{id}/messages). Like
// Submit, it is keyed: WithIdempotencyKey, or a random key of its own.
func (c *Client) Reply(ctx context.Context, id string, m api.Message, opts ...CallOption) (api.Task, error) {
	var out api.Task
	err := c.keyed(ctx, request{method: http.MethodPost, path: pathf("/v1/tasks/%s/messages", id), body: m}, opts, &out)
	return out, err
}

// Suspend pauses a reasoning or acting task (POST /v1/tasks/{id}/suspend).
// It is not retried: a second suspend would be refused (ErrConflict).
func (c *Client) Suspend(ctx context.Context, id, reason string) (api.Task, error) {
	return c.command(ctx, id, "suspend", reason)
}

// Resume resumes a suspended task (POST /v1/tasks/{id}/resume). It is not
// retried.
func (c *Client) Resume(ctx context.Context, id, reason string) (api.Task, error) {
	return c.command(ctx, id, "resume", reason)
}

// Cancel fails a task that has not finished, with reason "cancelled"
// (POST /v1/tasks/{id}/cancel). It is not retried.
func (c *Client) Cancel(ctx context.Context, id, reason string) (api.Task, error) {
	return c.command(ctx, id, "cancel", reason)
}

func (c *Client) command(ctx context.Context, id, name, reason string) (api.Task, error) {
	r := request{method: http.MethodPost, path: pathf("/v1/tasks/%s/", id) + name}
	if reason != "" {
		r.body = api.Reason{Reason: reason}
	}
	var out api.Task
	_, err := c.do(ctx, r, &out)
	return out, err
}

// get is a GET of /v1, retried.
func (c *Client) get(path string, q url.Values) request {
	return request{method: http.MethodGet, path: path, query: q, idempotent: true}
}
