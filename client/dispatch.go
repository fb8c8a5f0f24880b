package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/pegasus-engine/pegasus/api"
)

// CreateDispatch creates a broker task (POST /api/v1/tasks), owned by the
// client's AgentID unless t.Owner says otherwise. Like Submit, it is
// keyed: WithIdempotencyKey, or a random key of its own.
func (c *Client) CreateDispatch(ctx context.Context, t api.CreateDispatch, opts ...CallOption) (api.DispatchTask, error) {
	var out api.DispatchTask
	err := c.keyed(ctx, request{method: http.MethodPost, path: "/api/v1/tasks", body: t}, opts, &out)
	return out, err
}

// CreateMany creates up to api.MaxBatch broker tasks in one request
// (POST /api/v1/tasks:batch): all in one synced commit, all or none, each
// owned by the client's AgentID unless its Owner says otherwise. It
// returns the tasks as created, in the order of tasks. Invalid items and
// keys behave as in SubmitMany.
func (c *Client) CreateMany(ctx context.Context, tasks []api.CreateDispatchItem) ([]api.DispatchTask, error) {
	var out api.DispatchTasks
	err := c.batch(ctx, "/api/v1/tasks:batch", api.CreateDispatches{Tasks: withKeys(c, tasks, func(t *api.CreateDispatchItem) *string { return &t.IdempotencyKey })}, &out)
	return out.Tasks, err
}

// DispatchListOptions filter and page GET /api/v1/tasks.
type DispatchListOptions struct {
	Status string // api.Status...
	Owner  string
	Source string
	Agent  string // the assigned worker
	Cursor string // DispatchPage.NextCursor of the page before
	Limit  int    // 1 to 1000; 0: the server's default (100)
	// Wait, when not zero, makes an empty page wait up to that long (at
	// most 60 s) for a task that matches: a long poll.
	Wait time.Duration
}

// ListDispatch returns one page of broker tasks (GET /api/v1/tasks).
func (c *Client) ListDispatch(ctx context.Context, o DispatchListOptions) (api.DispatchPage, error) {
	q := url.Values{}
	for k, v := range map[string]string{"status": o.Status, "owner": o.Owner, "source": o.Source, "agent": o.Agent, "cursor": o.Cursor} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if o.Limit > 0 {
		q.Set("limit", strconv.Itoa(o.Limit))
	}
	if o.Wait > 0 {
		q.Set("wait", o.Wait.String())
	}
	r := request{method: http.MethodGet, path: "/api/v1/tasks", query: q, idempotent: true}
	if o.Agent != "" || o.Wait > 0 {
		r.auth = authAgent // a worker's poll
	}
	var out api.DispatchPage
	_, err := c.do(ctx, r, &out)
	return out, err
}

// Poll is a worker's long poll: the tasks assigned to the client's
// AgentID and not started yet, waiting up to wait for one.
func (c *Client) Poll(ctx context.Context, wait time.Duration) ([]api.DispatchTask, error) {
	page, err := c.ListDispatch(ctx, DispatchListOptions{Agent: c.opts.AgentID, Status: api.StatusAssigned, Wait: wait})
	return page.Tasks, err
}

// GetDispatch returns a broker task, with its children
// (GET /api/v1/tasks/{id}).
func (c *Client) GetDispatch(ctx context.Context, id string) (api.DispatchTask, error) {
	var out api.DispatchTask
	_, err := c.do(ctx, request{method: http.MethodGet, path: pathf("/api/v1/tasks/%s", id), idempotent: true}, &out)
	return out, err
}

// UpdateDispatch merges metadata into a broker task
// (PATCH /api/v1/tasks/{id}): any JSON value per key, null or "" deletes
// one; merging the same values again changes nothing, so it is retried.
func (c *Client) UpdateDispatch(ctx context.Context, id string, metadata map[string]json.RawMessage) (api.DispatchTask, error) {
	var out api.DispatchTask
	_, err := c.do(ctx, request{method: http.MethodPatch, path: pathf("/api/v1/tasks/%s", id),
		body: api.UpdateDispatch{Metadata: metadata}, idempotent: true}, &out)
	return out, err
}

// DispatchEvents returns a broker task's events, each with the agent
// that caused it (GET /api/v1/tasks/{id}/events).
func (c *Client) DispatchEvents(ctx context.Context, id string) (api.DispatchEvents, error) {
	var out api.DispatchEvents
	_, err := c.do(ctx, request{method: http.MethodGet, path: pathf("/api/v1/tasks/%s/events", id), idempotent: true}, &out)
	return out, err
}

// ReportProgress reports progress on a task assigned to the client's
// AgentID (POST /api/v1/tasks/{id}/progress): the first report starts
// it, each one is a heartbeat. A report sent twice records a second
// progress fact and changes nothing else, so it is retried.
func (c *Client) ReportProgress(ctx context.Context, id, message string) (api.DispatchTask, error) {
	return c.report(ctx, id, "progress", api.Report{Message: message})
}

// Complete completes a task assigned to the client's AgentID with result,
// any value encoding/json takes (a json.RawMessage passes as is; nil is
// no result) (POST /api/v1/tasks/{id}/complete). The broker answers a
// repeated completion as the first, so it is retried.
func (c *Client) Complete(ctx context.Context, id string, result any) (api.DispatchTask, error) {
	var rep api.Report
	if result != nil {
		b, err := json.Marshal(result)
		if err != nil {
			return api.DispatchTask{}, fmt.Errorf("client: encoding the result of %s: %w", id, err)
		}
		rep.Result = b
	}
	return c.report(ctx, id, "complete", rep)
}

// Fail fails a task assigned to the client's AgentID with cause's text
// (POST /api/v1/tasks/{id}/fail). When cause is marked by Permanent, the
// failure is final (retry_eligible false: the broker dead-letters the
// task); otherwise the broker retries it if it has retries left. The
// broker answers a repeated failure as the first, so it is retried.
func (c *Client) Fail(ctx context.Context, id string, cause error) (api.DispatchTask, error) {
	rep := api.Report{Error: cause.Error()}
	if IsPermanent(cause) {
		no := false
		rep.RetryEligible = &no
	}
	return c.report(ctx, id, "fail", rep)
}

func (c *Client) report(ctx context.Context, id, kind string, rep api.Report) (api.DispatchTask, error) {
	var out api.DispatchTask
	_, err := c.do(ctx, request{method: http.MethodPost, path: pathf("/api/v1/tasks/%s/", id) + kind, body: rep,
		auth: authAgent, idempotent: true}, &out)
	return out, err
}

// Register registers the client's AgentID as a worker with its
// capabilities and the number of tasks it runs at once
// (PUT /api/v1/agents/{id}); registering again updates it and ends a
// drain.
func (c *Client) Register(ctx context.Context, capabilities []string, maxTasks int) (api.Worker, error) {
	var out api.Worker
	_, err := c.do(ctx, request{method: http.MethodPut, path: pathf("/api/v1/agents/%s", c.opts.AgentID),
		body: api.Register{Capabilities: capabilities, MaxTasks: maxTasks}, auth: authAgent, idempotent: true}, &out)
	return out, err
}

// ---- admin routes: the AdminToken

// Workers lists the workers the broker knows (GET /api/v1/agents).
func (c *Client) Workers(ctx context.Context) ([]api.Worker, error) {
	var out api.Workers
	_, err := c.do(ctx, c.admin(http.MethodGet, "/api/v1/agents", nil), &out)
	return out.Agents, err
}

// Drain stops the broker from giving worker id new tasks
// (POST /api/v1/agents/{id}/drain) until it registers again. Draining a
// drained worker changes nothing, so it is retried.
func (c *Client) Drain(ctx context.Context, id string) (api.Worker, error) {
	var out api.Worker
	_, err := c.do(ctx, c.admin(http.MethodPost, pathf("/api/v1/agents/%s/drain", id), nil), &out)
	return out, err
}

// BrokerStats returns the broker's counters (GET /api/v1/stats).
func (c *Client) BrokerStats(ctx context.Context) (api.BrokerStats, error) {
	var out api.BrokerStats
	_, err := c.do(ctx, c.admin(http.MethodGet, "/api/v1/stats", nil), &out)
	return out, err
}

// DLQ lists the dead letters (GET /api/v1/dlq).
func (c *Client) DLQ(ctx context.Context) ([]api.DispatchTask, error) {
	var out api.DLQ
	_, err := c.do(ctx, c.admin(http.MethodGet, "/api/v1/dlq", nil), &out)
	return out.Tasks, err
}

// Requeue puts one dead letter back in the queue
// (POST /api/v1/dlq/{id}/requeue). It is not retried: a second requeue
// of a task no longer dead is refused (ErrConflict).
func (c *Client) Requeue(ctx context.Context, id, reason string) (api.DispatchTask, error) {
	r := c.admin(http.MethodPost, pathf("/api/v1/dlq/%s/requeue", id), api.Reason{Reason: reason})
	r.idempotent = false
	var out api.DispatchTask
	_, err := c.do(ctx, r, &out)
	return out, err
}

// RequeueMatching requeues every dead letter f selects, at once
// (POST /api/v1/dlq/requeue), and returns how many. It is not retried.
func (c *Client) RequeueMatching(ctx context.Context, f api.DLQFilter, reason string) (int, error) {
	r := c.admin(http.MethodPost, "/api/v1/dlq/requeue", api.RequeueMatching{DLQFilter: f, Reason: reason})
	r.idempotent = false
	var out api.Requeued
	_, err := c.do(ctx, r, &out)
	return out.Requeued, err
}

// admin is a request of an admin route, retried unless the caller says.
func (c *Client) admin(method, path string, body any) request {
	return request{method: method, path: path, body: body, auth: authAdmin, idempotent: true}
}
