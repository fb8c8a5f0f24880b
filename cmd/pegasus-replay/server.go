package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/pegasus-engine/pegasus/client"
	"github.com/pegasus-engine/pegasus/eventlog"
	"github.com/pegasus-engine/pegasus/internal/cliconv"
	"github.com/pegasus-engine/pegasus/replay"
)

// newClient returns the client of a running pegasusd (docs/api.md). Events
// come back in the one JSON form of an event (docs/events.md), are parsed
// by replay into the stored events, bytes and all, and are folded here, by
// replay, like any other source. It does not retry: a failed request is
// reported at once (tail reconnects by itself).
func newClient(server, token string) (*client.Client, error) {
	u, err := cliconv.ServerURL(server)
	if err != nil {
		return nil, err
	}
	// No overall timeout: a stream stays open as long as the user wants.
	// Dial and header timeouts catch a server that is not there.
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.ResponseHeaderTimeout = 30 * time.Second
	return client.New(u.String(), &client.Options{Token: token, HTTPClient: &http.Client{Transport: tr}, MaxAttempts: 1})
}

// pageSize is how many events one GET /v1/events asks for.
const pageSize = 1000

// serverErr words an error of a request to path as pegasus-replay says
// it: the daemon's address and answer, and what to check.
func serverErr(c *client.Client, path string, err error) error {
	var e *client.Error
	var ue *url.Error
	switch {
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
		return err
	case errors.As(err, &e):
		msg := e.Message
		if e.Code != "" {
			msg = e.Code + ": " + e.Message
		}
		err := fmt.Errorf("pegasusd %s%s: %d %s: %s", c.BaseURL(), path, e.Status, http.StatusText(e.Status), msg)
		switch e.Status {
		case http.StatusUnauthorized, http.StatusForbidden:
			return sourceErr(fmt.Errorf("%w (check --token / PEGASUS_TOKEN)", err))
		case http.StatusNotFound:
			return sourceErr(fmt.Errorf("%w (is this a pegasusd?)", err))
		}
		return sourceErr(err)
	case errors.Is(err, client.ErrUnreachable) && errors.As(err, &ue):
		return sourceErr(fmt.Errorf("cannot reach pegasusd at %s: %w", c.BaseURL(), ue))
	}
	return sourceErr(fmt.Errorf("pegasusd %s%s: %w", c.BaseURL(), path, err))
}

// fetchEvents fetches one page of events with Seq > after.
func fetchEvents(ctx context.Context, c *client.Client, after uint64, limit int) ([]eventlog.Event, uint64, error) {
	page, err := c.Events(ctx, after, limit)
	if err != nil {
		return nil, 0, serverErr(c, "/v1/events", err)
	}
	evs := make([]eventlog.Event, 0, len(page.Events))
	for _, e := range page.Events {
		ev, err := replay.ParseEventJSON(replay.EventJSON(e))
		if err != nil {
			return nil, 0, sourceErr(fmt.Errorf("pegasusd %s/v1/events: %w", c.BaseURL(), err))
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
		evs, head, err := fetchEvents(ctx, c, after, pageSize)
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
	return memSource(fmt.Sprintf("pegasusd at %s", c.BaseURL()), all)
}
