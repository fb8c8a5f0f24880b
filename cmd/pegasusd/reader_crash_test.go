package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pegasus-engine/pegasus/eventlog"
	"github.com/pegasus-engine/pegasus/fsm"
)

var readerCrashCycles = flag.Int("reader-crash-cycles", 20, "kill -9 cycles in TestReaderCrashRecovery")

// readerModel is an OpenAI-compatible model (readerReply) whose
// completions the test can hold: once armed, the next completion asked
// with a tool result in its conversation (the second of a task runs with
// the first answer and the readers' results held, unrecorded) closes the
// arming's channel and, in hold mode, does not answer until the daemon is
// gone; in release mode it answers first, then closes the channel, so
// that the kill lands while the daemon records what it held.
type readerModel struct {
	*httptest.Server

	mu      sync.Mutex
	armed   chan struct{} // nil: not armed
	release bool          // answer, then close armed
}

func startReaderModel(t *testing.T) *readerModel {
	t.Helper()
	m := &readerModel{}
	m.Server = httptest.NewServer(http.HandlerFunc(m.serve))
	t.Cleanup(m.Close)
	return m
}

// arm returns a channel that the next completion asked with a tool
// result closes.
func (m *readerModel) arm(release bool) <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.armed, m.release = make(chan struct{}), release
	return m.armed
}

// disarm stops holding completions (the daemon is gone).
func (m *readerModel) disarm() {
	m.mu.Lock()
	m.armed = nil
	m.mu.Unlock()
}

func (m *readerModel) serve(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/v1/models":
		fmt.Fprint(w, `{"data":[{"id":"reader-1"}]}`)
		return
	case "/v1/chat/completions":
	default:
		http.NotFound(w, r)
		return
	}
	var req chatRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	held := false // a tool result after the input: an answer is held
	for _, msg := range req.Messages {
		held = held || msg.Role == "tool"
	}
	var fire chan struct{}
	m.mu.Lock()
	release := m.release
	if held {
		fire, m.armed = m.armed, nil
	}
	m.mu.Unlock()
	if fire != nil && !release {
		close(fire)
		<-r.Context().Done() // the daemon was killed
		return
	}
	content, calls := readerReply(req.Messages)
	writeCompletion(w, "reader-1", content, calls)
	if fire != nil {
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
		close(fire)
	}
}

// readerReply is the model's next answer to msgs: each line of the task's
// input is one answer's tool calls, `call TOOL {JSON}`, several separated
// by " | "; once every line was asked, the answer is the results, one per
// line.
func readerReply(msgs []chatMessage) (string, []chatToolCall) {
	user := lastUser(msgs)
	if user < 0 {
		return "nothing to do", nil
	}
	turns, asked := 0, 0
	var results []string
	for _, m := range msgs[user+1:] {
		if m.Role == "assistant" && len(m.ToolCalls) > 0 {
			turns++
			asked += len(m.ToolCalls)
		}
		if m.Role == "tool" && m.Content != nil {
			results = append(results, *m.Content)
		}
	}
	lines := strings.Split(*msgs[user].Content, "\n")
	if turns >= len(lines) {
		return strings.Join(results, "\n"), nil
	}
	var calls []chatToolCall
	for c := range strings.SplitSeq(lines[turns], " | ") {
		name, args, _ := strings.Cut(strings.TrimPrefix(strings.TrimSpace(c), "call "), " ")
		tc := chatToolCall{ID: fmt.Sprintf("call_%d", asked+len(calls)+1), Type: "function"}
		tc.Function.Name, tc.Function.Arguments = name, args
		calls = append(calls, tc)
	}
	return "", calls
}

// The reader tasks: read-only built-ins, one or two per model answer, the
// last answer quoting their results line by line.
const readerDoor = "- the door code is 4217"

var readerInputs = []string{
	"call current_time {}",
	"call current_time {}\ncall memory_list {}\ncall memory_read {\"path\":\"facts/door.md\"}",
	"call memory_read {\"path\":\"facts/door.md\"} | call current_time {}\ncall memory_list {} | call memory_read {\"path\":\"facts/door.md\"}",
	// A reader after another kind of tool runs in the turn's batch, its
	// start recorded before it runs: checked as any tool call.
	"call memory_append {\"path\":\"facts/log.md\",\"entry\":\"- seen\\n\"} | call current_time {} | call memory_read {\"path\":\"facts/door.md\"}",
}

// TestReaderCrashRecovery kills pegasusd with SIGKILL under a load of
// tasks that call read-only built-ins (current_time, memory_list,
// memory_read), which are recorded with the model's answer that asked for
// them, the first answer held while the next model call runs (and, mixed
// in, tasks whose turn runs memory_append and readers in one batch). Each
// cycle kills at one of three points, at random: after a number of
// acknowledgements, while a model call that reads a reader's result runs,
// or just after the model answered such a call, while the daemon appends
// what it held. After a last clean run: every acknowledged task completed
// once, with every result the model asked for and one model answer per
// answer with tool calls plus the last; in the tasks that call only
// readers, no reader's call was recorded twice or apart from its result;
// and verify (in process and pegasus-replay's) is clean.
// -reader-crash-cycles=N runs longer.
func TestReaderCrashRecovery(t *testing.T) {
	seed, rng := crashRun(t)
	model := startReaderModel(t)
	bin := rigDaemon(t)
	data := filepath.Join(t.TempDir(), "data")
	cfg := filepath.Join(t.TempDir(), "pegasus.yaml")
	config := fmt.Sprintf("models:\n  - {name: scripted, baseUrl: %q, model: reader-1, maxAttempts: 1, default: true}\n", model.URL+"/v1")
	if err := os.WriteFile(cfg, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{"--config", cfg, "--no-reflection"}

	// The memory the readers read, written by a task before any crash.
	ackedAll := map[string]bool{}
	p := startProc(t, bin, data, args...)
	seedID := submitAndWait(t, p, fmt.Sprintf("call memory_write {\"path\":\"facts/door.md\",\"content\":%q}", readerDoor))
	ackedAll[seedID] = true

	kills := map[string]int{}
	for cycle := range *readerCrashCycles {
		if cycle > 0 {
			p = startProc(t, bin, data, args...)
		}
		killAfter := rng.IntN(9)
		switch mode := rng.IntN(3); mode {
		case 0:
			kills["after acknowledgements"]++
			killUnderLoad(t, p, readerInputs, seed, cycle, 4, killAfter, ackedAll)
		default:
			release := mode == 2
			if release {
				kills["as the held answer is recorded"]++
			} else {
				kills["while an answer is held"]++
			}
			killAtModel(t, p, model, release, seed, cycle, killAfter, ackedAll)
		}
	}

	p = startProc(t, bin, data, args...)
	finishAll(t, p, ackedAll)
	p.stop(t)
	t.Logf("%d acknowledged tasks, kills: %v", len(ackedAll), kills)
	checkLog(t, data, ackedAll)
	checkReaders(t, data, ackedAll)
	(&toolRig{t: t, replay: buildReplay(t)}).replayCmd("--data-dir", data, "verify") // exit 1 on a problem
}

// submitAndWait submits input to p and waits until its task finished.
func submitAndWait(t *testing.T, p *proc, input string) string {
	t.Helper()
	body, _ := json.Marshal(map[string]string{"input": input})
	resp, err := http.Post(p.url+"/v1/tasks", "application/json", strings.NewReader(string(body)))
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		TaskID string `json:"task_id"`
	}
	err = json.NewDecoder(resp.Body).Decode(&c)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 201 {
		t.Fatalf("submit: %d %v", resp.StatusCode, err)
	}
	finishAll(t, p, map[string]bool{c.TaskID: true})
	return c.TaskID
}

// killAtModel runs four submitters of readerInputs against p, arms the
// model once killAfter submissions were acknowledged, and kills p when
// the model signals; every acknowledged task id goes to ackedAll.
func killAtModel(t *testing.T, p *proc, m *readerModel, release bool, seed uint64, cycle, killAfter int, ackedAll map[string]bool) {
	t.Helper()
	acked := make(chan string)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		sub := rand.New(rand.NewPCG(seed, uint64(cycle*10+i)))
		go func() { defer wg.Done(); submitter(p.url, readerInputs, sub, acked, stop) }()
	}
	submitted := make(chan struct{})
	go func() { wg.Wait(); close(submitted) }()
	var hit <-chan struct{} // nil until armed
	if killAfter == 0 {
		hit = m.arm(release)
	}
	timeout := time.After(testTimeout) // a bound for the failure only
	for n := 0; ; {
		select {
		case id := <-acked:
			ackedAll[id] = true
			if n++; n == killAfter {
				hit = m.arm(release)
			}
			continue
		case <-hit:
		case <-submitted:
			close(stop)
			t.Fatalf("every submitter stopped after %d acknowledgements: the daemon died or refused them\n%s", n, p.output())
		case <-timeout:
			p.kill(t)
			close(stop)
			t.Fatalf("the model was not asked with an answer held within %v (%d acknowledgements)\n%s", testTimeout, n, p.output())
		}
		break
	}
	p.kill(t)
	m.disarm()
	close(stop)
	collectAcked(acked, submitted, ackedAll)
}

// checkReaders audits the tasks of a stopped daemon's data directory: in
// a task that calls only readers, a reader's TOOL_CALL_STARTED is followed
// in its stream by its outcome, no key is started twice, and there is one
// start per call the model asked for; every task completed, recorded one
// model answer per line of its input plus the last, and its result
// answers each call (the door code for each memory_read, the file for
// each memory_list).
func checkReaders(t *testing.T, data string, acked map[string]bool) {
	t.Helper()
	l, v := openVerified(t, data)
	streams := map[string][]eventlog.Event{}
	it := l.Scan(1, eventlog.Forward)
	defer it.Close()
	for it.Next() {
		ev := it.Event()
		if !strings.HasPrefix(ev.Stream, "$") {
			ev.Body = append([]byte(nil), ev.Body...)
			streams[ev.Stream] = append(streams[ev.Stream], ev)
		}
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	readers, batched := 0, 0
	for id, evs := range streams {
		b, err := fsm.Decode(fsm.EventType(evs[0].Type), evs[0].Schema, evs[0].Body)
		if err != nil {
			t.Fatal(err)
		}
		input := b.(*fsm.Input).Text
		// Only readers: none of them is started before it runs.
		alone := !strings.Contains(input, "memory_write") && !strings.Contains(input, "memory_append")
		keys := map[string]int{}
		models, calls := 0, 0
		for i, ev := range evs {
			switch fsm.EventType(ev.Type) {
			case fsm.ModelCalled:
				models++
			case fsm.ToolCallStarted:
				calls++
				b, err := fsm.Decode(fsm.EventType(ev.Type), ev.Schema, ev.Body)
				if err != nil {
					t.Fatal(err)
				}
				started := b.(*fsm.ToolCallStartedBody)
				if !alone {
					if started.Tool == "current_time" && i+1 < len(evs) && evs[i+1].Type == string(fsm.ToolCallStarted) {
						batched++ // started with the turn's other calls
					}
					continue
				}
				if keys[started.IdempotencyKey]++; keys[started.IdempotencyKey] > 1 {
					t.Errorf("task %s: %s started twice with key %s", id, started.Tool, started.IdempotencyKey)
				}
				readers++
				if i+1 == len(evs) || (evs[i+1].Type != string(fsm.ToolCallCompleted) && evs[i+1].Type != string(fsm.ToolCallFailed)) || evs[i+1].Causation != ev.ID {
					t.Errorf("task %s: %s's start %s is not followed by its outcome", id, started.Tool, ev.ID)
				}
			}
		}
		task, err := v.Task(id)
		if err != nil {
			t.Fatal(err)
		}
		if task.State != fsm.StateCompleted {
			t.Errorf("task %s is %s, not completed", id, task.State)
			continue
		}
		if turns := strings.Count(input, "\n") + 1; models != turns+1 || (alone && calls != strings.Count(input, "call ")) {
			t.Errorf("task %s recorded %d model answers and %d tool calls for %q", id, models, calls, input)
		}
		res := task.Context.FinalResult
		if strings.Count(res, readerDoor) != strings.Count(input, "call memory_read") || strings.Count(res, "- facts/door.md (") != strings.Count(input, "call memory_list") {
			t.Errorf("task %s: the result does not answer %q: %q", id, input, res)
		}
		if strings.Contains(task.Context.FinalResult, "error") {
			t.Errorf("task %s: a call failed: %q", id, task.Context.FinalResult)
		}
	}
	if readers == 0 {
		t.Error("no reader was called")
	}
	if batched == 0 {
		t.Error("no reader ran in a batch of a turn's calls")
	}
	t.Logf("%d tasks, %d reader calls recorded with their results, %d in a batch", len(streams), readers, batched)
}
