package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/pegasus-engine/pegasus/eventlog"
)

// The fakes embed the interface they stand for, so a handler calling a
// method the test did not expect panics (the wrap answers 500) instead of
// passing by accident.

type fakeEngine struct {
	Agent
	accepting bool
}

func (f *fakeEngine) Accepting() bool { return f.accepting }

type fakeStore struct {
	EventStore
	health      error
	head        uint64
	checkpoints []string
}

func (f *fakeStore) Health() error { return f.health }
func (f *fakeStore) Head() uint64  { return f.head }
func (f *fakeStore) Checkpoint(dir string) error {
	f.checkpoints = append(f.checkpoints, dir)
	return nil
}

type fakeView struct {
	ReadModel
	checkpoint error
}

func (f *fakeView) Checkpoint(context.Context) error { return f.checkpoint }

// fakeServer serves the API over fakes, with no agent, log or data
// directory behind it.
func fakeServer(t *testing.T, a Agent, st EventStore, v ReadModel) *httptest.Server {
	t.Helper()
	s := &Server{a: a, store: st, view: v, model: "fake", log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		maxBody: 1 << 20, checkpointDir: filepath.Join(t.TempDir(), "checkpoints")}
	var cancelBase context.CancelFunc
	s.base, cancelBase = context.WithCancel(context.Background())
	hs := httptest.NewServer(s.routes())
	t.Cleanup(func() {
		hs.Close()
		cancelBase()
	})
	return hs
}

func fakeDo(t *testing.T, hs *httptest.Server, method, path string) (int, apiError, string) {
	t.Helper()
	req, err := http.NewRequest(method, hs.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := hs.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var env struct{ Error apiError }
	if resp.StatusCode != http.StatusOK {
		if err := json.Unmarshal(body, &env); err != nil {
			t.Fatalf("%s %s: the error is not in the JSON envelope: %v: %s", method, path, err, body)
		}
	}
	return resp.StatusCode, env.Error, string(body)
}

// A checkpoint whose projections fail to persist makes no copy of the log
// (a copy without them would not open as of its sequence), and the
// answer does not carry the storage error's host path.
func TestFakeCheckpointViewFails(t *testing.T) {
	st := &fakeStore{head: 42}
	hs := fakeServer(t, &fakeEngine{accepting: true}, st,
		&fakeView{checkpoint: errors.New("open /srv/secret/data/projections: permission denied")})
	status, e, body := fakeDo(t, hs, "POST", "/v1/admin/checkpoint")
	if status != http.StatusInternalServerError || e.Code != codeInternal {
		t.Fatalf("POST /v1/admin/checkpoint = %d %s, want 500 %s", status, body, codeInternal)
	}
	if strings.Contains(body, "/srv/secret") {
		t.Errorf("the answer carries the host path: %s", body)
	}
	if len(st.checkpoints) != 0 {
		t.Errorf("the log was copied to %v after the view failed", st.checkpoints)
	}
}

// readyz answers 503 with the storage reason as soon as the log refuses
// writes, before it asks the agent; and 503 shutting down when the agent
// no longer accepts work.
func TestFakeReadyz(t *testing.T) {
	full := fmt.Errorf("%w: write /srv/secret/data/000007.log: %w", eventlog.ErrFailed, syscall.ENOSPC)
	for _, c := range []struct {
		name      string
		health    error
		accepting bool
		status    int
		code      string
		message   string
	}{
		{"ready", nil, true, http.StatusOK, "", ""},
		{"disk full", full, true, http.StatusServiceUnavailable, codeStorage, "no space left on device"},
		{"stopping", nil, false, http.StatusServiceUnavailable, codeUnavailable, "shutting down"},
	} {
		t.Run(c.name, func(t *testing.T) {
			hs := fakeServer(t, &fakeEngine{accepting: c.accepting}, &fakeStore{health: c.health}, &fakeView{})
			status, e, body := fakeDo(t, hs, "GET", "/readyz")
			if status != c.status || e.Code != c.code || !strings.Contains(e.Message, c.message) {
				t.Fatalf("GET /readyz = %d %s, want %d %s %q", status, body, c.status, c.code, c.message)
			}
			if strings.Contains(body, "/srv/secret") {
				t.Errorf("the answer carries the host path: %s", body)
			}
		})
	}
}
