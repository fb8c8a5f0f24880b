package server

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/oklog/ulid/v2"

	"github.com/pegasus-engine/pegasus/cluster"
	"github.com/pegasus-engine/pegasus/eventlog"
)

// TestIdempotencyKeyUnknownOutcome: a keyed request whose append's outcome
// is unknown (its context ended, an acknowledgement lost in a leader
// change) keeps its key: the retry gets the same id, so the log stores
// the event once whether or not the first attempt's made it.
func TestIdempotencyKeyUnknownOutcome(t *testing.T) {
	l, err := eventlog.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	s := &Server{store: l, keys: l}
	req := func() *http.Request {
		r, _ := http.NewRequest("POST", "/v1/tasks", nil)
		r.Header.Set("Idempotency-Key", "in-flight")
		return r
	}
	var first, second ulid.ULID
	err = s.keyed(httptest.NewRecorder(), req(), func(id ulid.ULID) error {
		first = id
		return fmt.Errorf("append: %w", cluster.ErrUnknownOutcome)
	})
	if !errors.Is(err, cluster.ErrUnknownOutcome) {
		t.Fatal(err)
	}
	if err := s.keyed(httptest.NewRecorder(), req(), func(id ulid.ULID) error { second = id; return nil }); err != nil {
		t.Fatal(err)
	}
	if first == (ulid.ULID{}) || second != first {
		t.Fatalf("the retry appends under %s, the first attempt under %s", second, first)
	}
}
