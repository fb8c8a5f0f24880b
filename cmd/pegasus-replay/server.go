package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/pegasus-engine/pegasus/eventlog"
	"github.com/pegasus-engine/pegasus/internal/cliconv"
	"github.com/pegasus-engine/pegasus/replay"
)

// client talks to a running pegasusd over its HTTP API (docs/api.md). Events
// come back in the one JSON form of an event (docs/events.md), are parsed by
// replay.ParseEvent into the stored events, bytes and all, and are folded
// here, by replay, like any other source.
type client struct {
	base  *url.URL
	token string
	http  *http.Client
}

// pageSize is how many events one GET /v1/events asks for.
const pageSize = 1000

func newClient(server, token string) (*client, error) {
	u, err := cliconv.ServerURL(server)
	if err != nil {
		return nil, err
	}
	// No overall timeout: a stream stays open as long as the user wants.
	// Dial and header timeouts catch a server that is not there.
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.ResponseHeaderTimeout = 30 * time.Second
	return &client{base: u, token: token, http: &http.Client{Transport: tr}}, nil
}

// apiError is the daemon's error body: {"error": {"code": ..., "message": ...}}.
type apiError struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// get performs a GET and returns the response when its status is 200.
func (c *client) get(ctx context.Context, path string, q url.Values, hdr http.Header) (*http.Response, error) {
	u := *c.base
	u.Path += path
	u.RawQuery = q.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, sourceErr(fmt.Errorf("cannot reach pegasusd at %s: %w", c.base, err))
	}
	if resp.StatusCode == http.StatusOK {
		return resp, nil
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	msg := strings.TrimSpace(string(body))
	var ae apiError
	if json.Unmarshal(body, &ae) == nil && ae.Error.Message != "" {
		msg = ae.Error.Code + ": " + ae.Error.Message
	}
	err = fmt.Errorf("pegasusd %s%s: %s: %s", c.base, path, resp.Status, msg)
	switch resp.StatusCode {
	case http.StatusUnauthorized, http.StatusForbidden:
		return nil, sourceErr(fmt.Errorf("%w (check --token / PEGASUS_TOKEN)", err))
	case http.StatusNotFound:
		return nil, sourceErr(fmt.Errorf("%w (is this a pegasusd?)", err))
	}
	return nil, sourceErr(err)
}

// eventsPage is the body of GET /v1/events: events in their JSON form,
// oldest first.
type eventsPage struct {
	Events []json.RawMessage `json:"events"`
	Head   uint64            `json:"head"`
}

// events fetches one page of events with Seq > after.
func (c *client) events(ctx context.Context, after uint64, limit int) ([]eventlog.Event, uint64, error) {
	q := url.Values{"after_seq": {strconv.FormatUint(after, 10)}, "limit": {strconv.Itoa(limit)}}
	resp, err := c.get(ctx, "/v1/events", q, nil)
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	var page eventsPage
	if err := json.NewDecoder(resp.Body).Decode(&page); err != nil {
		return nil, 0, sourceErr(fmt.Errorf("pegasusd %s/v1/events: bad response: %w", c.base, err))
	}
	evs := make([]eventlog.Event, 0, len(page.Events))
	for _, raw := range page.Events {
		ev, err := replay.ParseEvent(raw)
		if err != nil {
			return nil, 0, sourceErr(fmt.Errorf("pegasusd %s/v1/events: %w", c.base, err))
		}
		evs = append(evs, ev)
	}
	return evs, page.Head, nil
}

// openServer fetches every event of a running daemon into memory. The fold
// happens here, through replay, exactly as for a data directory.
func openServer(ctx context.Context, std *stdio, g globals) (*source, error) {
	c, err := newClient(g.server, g.token)
	if err != nil {
		return nil, err
	}
	var all []eventlog.Event
	var bar *progress
	after := uint64(0)
	for {
		evs, head, err := c.events(ctx, after, pageSize)
		if err != nil {
			return nil, err
		}
		if bar == nil && head > 0 {
			bar = newProgress(std, head, "fetching")
		}
		all = append(all, evs...)
		if len(evs) == 0 {
			break
		}
		after = evs[len(evs)-1].Seq
		bar.set(after)
		if head != 0 && after >= head {
			break
		}
	}
	bar.done()
	return memSource(fmt.Sprintf("pegasusd at %s", c.base), all)
}
