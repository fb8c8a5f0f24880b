package server

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/pegasus-engine/pegasus/fsm"
)

// TestDispatchJSONAsEncodingJSON: writeJSON writes a dispatch task, and a
// batch's list of them, byte for byte as encoding/json (HTML unescaped)
// does, for strings of every kind, times in zones, results, metadata and
// the omitted fields, and fails where it fails.
func TestDispatchJSONAsEncodingJSON(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	strs := []string{"", "plain", "job 1.2.3", `quo"te`, `back\slash`, "<b>&amp;</b>", "tab\tnew\nline\r", "\x00\x01\x1f\x7f",
		"\b\f", "é ü 中文", "\u2028\u2029", "bad \xff utf8", "emoji 🦄"}
	str := func() string { return strs[rng.IntN(len(strs))] }
	when := func() time.Time {
		switch rng.IntN(4) {
		case 0:
			return time.Time{}
		case 1:
			return time.Date(2026, 11, 27, 2, 3, 4, rng.IntN(1e9), time.UTC)
		case 2:
			return time.Date(1999, 1, 2, 3, 4, 5, 0, time.FixedZone("x", -5*3600-30*60))
		}
		return time.Unix(rng.Int64N(4e9), 0).In(time.FixedZone("y", 3600))
	}
	list := func() []string {
		switch rng.IntN(3) {
		case 0:
			return nil
		case 1:
			return []string{}
		}
		return []string{str(), str()}
	}
	task := func() DispatchJSON {
		j := DispatchJSON{TaskID: str(), Title: str(), Description: str(), Owner: str(), RequiredCapabilities: list(),
			Status: fsm.State(str()), AssignedAgent: str(), CreatedAt: when(), AssignedAt: when(), StartedAt: when(),
			CompletedAt: when(), UpdatedAt: when(), Error: str(), RetryCount: rng.IntN(5) - 1, MaxRetries: rng.IntN(1e6),
			RetryEligible: rng.IntN(2) == 0, TimeoutSeconds: rng.IntN(1000), Priority: rng.IntN(11) - 5, Source: str(),
			ParentTaskID: str(), DeadLettered: rng.IntN(2) == 0, DeadLetterReason: str(), TimeoutReason: str(), RunAt: when(),
			HeartbeatSeconds: rng.IntN(100), RetryBackoffSeconds: rng.IntN(100), ConcurrencyKey: str(), Deadline: when(),
			Progress: str(), Version: rng.Uint64(), Children: list()}
		switch rng.IntN(4) {
		case 0:
			j.Result = json.RawMessage("null")
		case 1:
			j.Result = json.RawMessage(` { "a" : [1, 2], "h": "<x>" } `)
		case 2:
			j.Result = json.RawMessage(`"done"`)
		}
		switch rng.IntN(3) {
		case 0:
			j.Metadata = anyMetadata{}
		case 1:
			j.Metadata = anyMetadata{"b": json.RawMessage(`"<v>"`), "a": json.RawMessage(`{"n": 1}`)}
		}
		return j
	}
	std := func(v any) (string, error) {
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		err := enc.Encode(v)
		return buf.String(), err
	}
	check := func(name string, v any, plain any) {
		t.Helper()
		want, err := std(plain)
		rec := httptest.NewRecorder()
		writeJSON(rec, 201, v)
		if err != nil {
			if rec.Code != 500 {
				t.Errorf("%s: encoding/json fails (%v) but writeJSON answered %d %s", name, err, rec.Code, rec.Body)
			}
			return
		}
		if got := rec.Body.String(); rec.Code != 201 || got != want {
			t.Fatalf("%s: writeJSON wrote %d\n%s\nencoding/json writes\n%s", name, rec.Code, got, want)
		}
	}
	type plainList struct {
		Tasks []DispatchJSON `json:"tasks"`
	}
	for range 2000 {
		j := task()
		type plain DispatchJSON // the same fields, without appendJSON
		check("task", j, plain(j))
	}
	made := []fsm.Task{
		{ID: "a", State: fsm.StatePending, Dispatch: &fsm.Dispatch{Title: "<b>\"x\"</b>", RequiredCapabilities: []string{"gpu"}}},
		{ID: "b", State: fsm.StateCompleted, Dispatch: &fsm.Dispatch{Result: `{"n": 1}`, CompletedAt: time.Unix(5, 0)}},
		{ID: "c", Metadata: map[string]string{"k": "v"}, Dispatch: &fsm.Dispatch{}},
	}
	var answer dispatchListOut
	var plains []DispatchJSON
	for i := range made {
		answer.add(&made[i])
		plains = append(plains, toDispatchJSON(&made[i]))
	}
	check("list", &answer, plainList{plains})
	check("empty list", &dispatchListOut{}, plainList{Tasks: []DispatchJSON{}})
	bad := task()
	bad.CreatedAt = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)
	check("a year beyond 9999", bad, struct{ T time.Time }{bad.CreatedAt})
	bad = task()
	bad.Result = json.RawMessage(`{not json`)
	check("a result that is not JSON", bad, bad.Result)
}
