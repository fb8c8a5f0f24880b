package replay

import (
	"context"
	"errors"
	"fmt"

	"github.com/oklog/ulid/v2"

	"github.com/pegasus-engine/pegasus/eventlog"
	"github.com/pegasus-engine/pegasus/fsm"
	"github.com/pegasus-engine/pegasus/projection"
)

// Ancestors returns the causal chain of an event: the event itself, its
// causation, that event's causation, and so on up to the root (an event
// without causation, normally an external input). A causation missing
// from the source ends the chain and is reported in missing (zero when the
// chain reached a root).
func Ancestors(ctx context.Context, r Reader, id ulid.ULID) (chain []eventlog.Event, missing ulid.ULID, err error) {
	seen := map[ulid.ULID]bool{}
	for cur := id; cur != (ulid.ULID{}); {
		if seen[cur] {
			return chain, missing, fmt.Errorf("replay: causation cycle at %s", cur)
		}
		seen[cur] = true
		ev, err := r.Get(ctx, cur)
		if errors.Is(err, eventlog.ErrNotFound) {
			if len(chain) == 0 {
				return nil, missing, fmt.Errorf("replay: event %s: %w", id, eventlog.ErrNotFound)
			}
			return chain, cur, nil
		}
		if err != nil {
			return chain, missing, err
		}
		chain = append(chain, ev)
		cur = ev.Causation
	}
	return chain, missing, nil
}

// Node is an event and the events it caused.
type Node struct {
	Event    eventlog.Event
	Children []*Node
}

// Size returns the number of events in the tree.
func (n *Node) Size() int {
	s := 1
	for _, c := range n.Children {
		s += c.Size()
	}
	return s
}

// DefaultMaxNodes bounds Descendants when the caller gives no bound.
const DefaultMaxNodes = 100000

// Descendants returns the tree of every consequence of an event: the events
// it caused, the events they caused, and so on, children in sequence
// order. At most maxNodes events are collected (0: DefaultMaxNodes);
// truncated reports that the tree was cut.
func Descendants(ctx context.Context, r Reader, id ulid.ULID, maxNodes int) (root *Node, truncated bool, err error) {
	if maxNodes <= 0 {
		maxNodes = DefaultMaxNodes
	}
	ev, err := r.Get(ctx, id)
	if err != nil {
		return nil, false, fmt.Errorf("replay: event %s: %w", id, err)
	}
	root = &Node{Event: ev}
	count := 1
	seen := map[ulid.ULID]bool{id: true}
	queue := []*Node{root} // breadth first: near consequences survive truncation
	for len(queue) > 0 {
		if err := ctx.Err(); err != nil {
			return root, truncated, err
		}
		n := queue[0]
		queue = queue[1:]
		it := r.Children(ctx, n.Event.ID)
		for it.Next() {
			c := it.Event()
			if seen[c.ID] {
				continue
			}
			if count >= maxNodes {
				truncated = true
				break
			}
			seen[c.ID] = true
			child := &Node{Event: c}
			n.Children = append(n.Children, child)
			queue = append(queue, child)
			count++
		}
		err := it.Err()
		it.Close()
		if err != nil {
			return root, truncated, err
		}
	}
	return root, truncated, nil
}

// Why explains a task: the chain from its TASK_CREATED up to the input
// that started it (Chain[0] is TASK_CREATED, the last entry the root), and
// the tree of every consequence of that root (the task's events, any
// memory writes, ...).
type Why struct {
	TaskID    string
	Chain     []eventlog.Event
	Missing   ulid.ULID // a causation not in the source, zero if none
	Tree      *Node
	Truncated bool
	// Decisions words the broker's decisions and the workers' reports, for
	// a dispatch task (nil for other tasks): see DispatchDecisions.
	Decisions []Decision
}

// Explain returns the Why of a task (`pegasus-replay why`). A task id is
// the id of its TASK_CREATED event; an unknown task wraps
// projection.ErrTaskNotFound.
func Explain(ctx context.Context, r Reader, taskID string, maxNodes int) (*Why, error) {
	id, err := ulid.ParseStrict(taskID)
	if err != nil {
		return nil, fmt.Errorf("%w: %q is not a task id", projection.ErrTaskNotFound, taskID)
	}
	chain, missing, err := Ancestors(ctx, r, id)
	if errors.Is(err, eventlog.ErrNotFound) {
		return nil, fmt.Errorf("%w: %s", projection.ErrTaskNotFound, taskID)
	}
	if err != nil {
		return nil, err
	}
	w := &Why{TaskID: taskID, Chain: chain, Missing: missing}
	root := chain[len(chain)-1]
	w.Tree, w.Truncated, err = Descendants(ctx, r, root.ID, maxNodes)
	if err == nil && chain[0].Type == string(fsm.DispatchCreated) {
		w.Decisions, err = DispatchDecisions(ctx, r, taskID)
	}
	return w, err
}
