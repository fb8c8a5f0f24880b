package agent

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/pegasus-engine/pegasus/agent/tools"
	"github.com/pegasus-engine/pegasus/eventlog"
	"github.com/pegasus-engine/pegasus/fsm"
	"github.com/pegasus-engine/pegasus/projection"
)

// logMemory is long-term memory kept as events on the "$memory" stream and
// served by the memory projection of the fold: memory replays like
// everything else, and every change names the tool call that made it.
//
// Writes are serialized and each waits until the fold has applied it, so a
// read after a write sees it, and a patch is computed against the latest
// content (the recorded MEMORY_PATCHED carries the result, so the fold
// never has to guess).
type logMemory struct {
	a  *Agent
	mu sync.Mutex
}

var _ tools.Memory = (*logMemory)(nil)

func (m *logMemory) List(ctx context.Context) ([]tools.MemoryEntry, error) {
	facts := m.a.view.Facts("")
	out := make([]tools.MemoryEntry, 0, len(facts))
	for _, f := range facts {
		out = append(out, tools.MemoryEntry{Path: f.Path, Summary: tools.Summary(f.Content), Size: len(f.Content)})
	}
	return out, nil
}

func (m *logMemory) Read(ctx context.Context, path string) (string, error) {
	f, ok := m.a.view.Fact(path)
	if !ok {
		return "", fmt.Errorf("%w: %s", tools.ErrNoMemory, path)
	}
	return f.Content, nil
}

func (m *logMemory) Write(ctx context.Context, c tools.Cause, path, content string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.append(ctx, c, &projection.MemoryWrittenBody{Path: path, Content: content})
}

func (m *logMemory) Patch(ctx context.Context, c tools.Cause, path, old, new string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	f, ok := m.a.view.Fact(path)
	if !ok {
		return fmt.Errorf("%w: %s", tools.ErrNoMemory, path)
	}
	switch n := strings.Count(f.Content, old); n {
	case 1:
	case 0:
		return fmt.Errorf("old_str does not occur in %s", path)
	default:
		return fmt.Errorf("old_str occurs %d times in %s; give more context so that it occurs once", n, path)
	}
	content := strings.Replace(f.Content, old, new, 1)
	if len(content) > tools.MaxMemoryFile {
		return fmt.Errorf("%s would be %d bytes, more than the %d allowed", path, len(content), tools.MaxMemoryFile)
	}
	return m.append(ctx, c, &projection.MemoryPatchedBody{Path: path, Old: old, New: new, Content: content})
}

func (m *logMemory) Append(ctx context.Context, c tools.Cause, path, entry string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if f, ok := m.a.view.Fact(path); ok && len(f.Content)+len(entry) > tools.MaxMemoryFile {
		return fmt.Errorf("%s would be %d bytes, more than the %d allowed", path, len(f.Content)+len(entry), tools.MaxMemoryFile)
	}
	return m.append(ctx, c, &projection.MemoryAppendedBody{Path: path, Content: entry})
}

func (m *logMemory) append(ctx context.Context, c tools.Cause, body fsm.Body) error {
	data, err := projection.EncodeMemory(body)
	if err != nil {
		return err
	}
	ev := eventlog.Event{Type: string(body.EventType()), Causation: c.Causation, Correlation: c.Correlation,
		Schema: projection.MemorySchemaVersion, Body: data}
	if c.TaskID != "" {
		ev.Metadata = map[string]string{"task": c.TaskID}
	}
	res, err := m.a.app.Append(ctx, projection.MemoryStream, eventlog.Any, ev)
	if err != nil {
		return fmt.Errorf("recording the memory change: %w", err)
	}
	return m.a.view.WaitFor(ctx, res.LastSeq)
}
