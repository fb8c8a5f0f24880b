// Package batcherr is the error of a batch of creates refused before
// anything was written: which items were wrong, each by its index in the
// request, and why. The agent (SubmitInputs) and the broker (CreateMany)
// return it; the HTTP API answers with one entry per item. Commit is
// their shared commit of a batch, which answers a retry's stored items.
package batcherr

import (
	"fmt"
	"strings"
)

// Item is one refused item of a batch.
type Item struct {
	Index int   // in the request, from 0
	Err   error // why
}

func (it Item) Error() string { return fmt.Sprintf("tasks[%d]: %v", it.Index, it.Err) }
func (it Item) Unwrap() error { return it.Err }

// Error is a batch refused as a whole because of its Items, in index
// order. errors.Is and errors.As look into every item.
type Error struct {
	Items []Item
}

func (e *Error) Error() string {
	parts := make([]string, 0, min(len(e.Items), 5))
	for i, it := range e.Items {
		if i == 5 {
			parts = append(parts, fmt.Sprintf("and %d more", len(e.Items)-5))
			break
		}
		parts = append(parts, it.Error())
	}
	return "batch refused, nothing written: " + strings.Join(parts, "; ")
}

// Unwrap returns the items' errors.
func (e *Error) Unwrap() []error {
	out := make([]error, len(e.Items))
	for i, it := range e.Items {
		out[i] = it.Err
	}
	return out
}

// Add records that item i is refused for err.
func (e *Error) Add(i int, err error) { e.Items = append(e.Items, Item{Index: i, Err: err}) }

// Err returns e if it holds an item, else nil.
func (e *Error) Err() error {
	if len(e.Items) == 0 {
		return nil
	}
	return e
}
