package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"net/http"
	"reflect"
	"sync"

	"github.com/oklog/ulid/v2"

	"github.com/pegasus-engine/pegasus/agent"
	"github.com/pegasus-engine/pegasus/api"
	"github.com/pegasus-engine/pegasus/broker"
	"github.com/pegasus-engine/pegasus/eventlog"
	"github.com/pegasus-engine/pegasus/fsm"
	"github.com/pegasus-engine/pegasus/internal/batcherr"
)

// POST /v1/tasks:batch and POST /api/v1/tasks:batch create many tasks in
// one request: the body is {"tasks": [...]}, each item the body of the
// single create plus its own optional "idempotency_key", and the answer
// {"tasks": [...]} holds the single create's answers in the same order.
// The tasks are committed together, in one synced commit, and
// acknowledged together: all or nothing. Invalid items refuse the whole
// batch before anything is written, with one entry per item in the
// error's "items". An item whose key was used before is answered as the
// first request was, and not created again.

// maxBatch is how many tasks one batch request may carry (docs/api.md).
const maxBatch = api.MaxBatch

// batchItemError is one refused item of a batch, in the error body's
// "items".
type batchItemError struct {
	Index   int    `json:"index"`
	Code    string `json:"code"`
	Message string `json:"message"`
}

// batchSubmitter is an Agent that takes batches (*agent.Agent does).
type batchSubmitter interface {
	SubmitInputs(ctx context.Context, ins []agent.Input) ([]agent.Submitted, error)
}

var _ batchSubmitter = (*agent.Agent)(nil)

// batchKey is what every batch item adds to the single create's body.
type batchKey struct {
	IdempotencyKey string `json:"idempotency_key"`
}

// decodeBatch reads a batch's body, decodes its items into values of T
// and gives each to check with its index and the number of items. Items
// that do not decode, or that check refuses, are listed by index in the
// error. A body whose items all decode is decoded in one pass (one
// json.Decoder for the whole body, no copy of each item); any other is
// decoded item by item, which names each bad one: the answer is the same.
func decodeBatch[T any](s *Server, r *http.Request, check func(i, total int, item *T) *apiError) (int, *apiError) {
	if e := s.mutating(); e != nil {
		return 0, e
	}
	if len(r.Header.Values("Idempotency-Key")) > 0 {
		return 0, errBadRequest(`a batch takes no Idempotency-Key header: give each task its own "idempotency_key"`)
	}
	data, err := readBody(r)
	if err != nil {
		return 0, bodyReadError(err)
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return 0, errBadRequest("a JSON body is required")
	}
	items, ok := decodeItemsAtOnce[T](data)
	var undecoded []*apiError // by index: why an item does not decode
	if !ok {
		var e *apiError
		if items, undecoded, e = decodeItemsOneByOne[T](data); e != nil {
			return 0, e
		}
	}
	var bad []batchItemError
	for i := range items {
		var e *apiError
		if undecoded != nil && undecoded[i] != nil {
			e = undecoded[i]
		} else {
			e = check(i, len(items), &items[i])
		}
		if e != nil {
			bad = append(bad, batchItemError{Index: i, Code: e.Code, Message: e.Message})
		}
	}
	if bad != nil {
		return 0, refusedItems(http.StatusBadRequest, bad, len(items))
	}
	return len(items), nil
}

// batchBody is a batch's body as decodeItemsOneByOne reads it.
type batchBody struct {
	Tasks []json.RawMessage `json:"tasks"`
}

// decodeItemsAtOnce decodes data, a batch's body, into its items with one
// decoder, and reports whether it holds between one and maxBatch items
// that all decode and all name their fields exactly (decodeJSON's rules).
// When it does not, decodeItemsOneByOne says why.
func decodeItemsAtOnce[T any](data []byte) ([]T, bool) {
	if _, ok := any((*T)(nil)).(fastDecoder); ok {
		if items, ok := decodeItemsFast[T](data); ok {
			return items, true
		}
	}
	return decodeItemsReflect[T](data)
}

// decodeItemsReflect is decodeItemsAtOnce with encoding/json.
func decodeItemsReflect[T any](data []byte) ([]T, bool) {
	var body struct {
		Tasks []T `json:"tasks"`
	}
	// Room for the items, which the decoder fills without growing it: an
	// item is an object, so there are no more items than '{'.
	body.Tasks = make([]T, 0, min(bytes.Count(data, []byte("{")), maxBatch))
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&body); err != nil || dec.More() || len(body.Tasks) == 0 || len(body.Tasks) > maxBatch {
		return nil, false
	}
	if checkFieldNames(data, reflect.TypeFor[batchBody](), "") != nil {
		return nil, false
	}
	var raw []byte
	_ = eachMember(data, func(key string, v []byte) error {
		if key == "tasks" {
			raw = v
		}
		return nil
	})
	t, n := reflect.TypeFor[T](), 0
	for item := range eachElement(raw) {
		if n >= len(body.Tasks) || checkFieldNames(item, t, "") != nil {
			return nil, false
		}
		n++
	}
	return body.Tasks, n == len(body.Tasks)
}

// decodeItemsOneByOne decodes data, a batch's body, into its items one at
// a time. The second result, when not nil, holds by index why an item
// does not decode; an error refuses the whole body.
func decodeItemsOneByOne[T any](data []byte) ([]T, []*apiError, *apiError) {
	var body batchBody
	if e := decodeJSON(data, &body); e != nil {
		return nil, nil, e
	}
	switch n := len(body.Tasks); {
	case body.Tasks == nil:
		return nil, nil, errBadRequest(`"tasks" is required: an array of the tasks to create`)
	case n == 0:
		return nil, nil, errBadRequest(`"tasks" is empty: give at least one task`)
	case n > maxBatch:
		return nil, nil, &apiError{status: http.StatusRequestEntityTooLarge, Code: codeTooLarge,
			Message: fmt.Sprintf("%d tasks in one batch, more than %d: split it into several requests", n, maxBatch)}
	}
	items := make([]T, len(body.Tasks))
	var undecoded []*apiError
	for i, raw := range body.Tasks {
		if e := decodeJSON(raw, &items[i]); e != nil {
			if undecoded == nil {
				undecoded = make([]*apiError, len(items))
			}
			undecoded[i] = e
		}
	}
	return items, undecoded, nil
}

// eachElement yields the bytes of each value of the JSON array in data,
// which is well-formed (decoded already); a value that is not an array
// yields nothing.
func eachElement(data []byte) iter.Seq[[]byte] {
	return func(yield func([]byte) bool) {
		i := skipSpace(data, 0)
		if i >= len(data) || data[i] != '[' {
			return
		}
		i++
		for {
			i = skipSpace(data, i)
			if i < len(data) && data[i] == ',' {
				i = skipSpace(data, i+1)
			}
			if i >= len(data) || data[i] == ']' {
				return
			}
			end := skipValue(data, i)
			if !yield(data[i:end]) {
				return
			}
			i = end
		}
	}
}

func refusedItems(status int, items []batchItemError, n int) *apiError {
	return &apiError{status: status, Code: items[0].Code, Items: items,
		Message: fmt.Sprintf("%d of the %d tasks refused (first tasks[%d]: %s); nothing was created", len(items), n, items[0].Index, items[0].Message)}
}

// itemKey checks an item's idempotency key ("" for none).
func itemKey(key string) *apiError {
	if key == "" {
		return nil
	}
	if err := checkKey(key, "idempotency_key"); err != nil {
		return errBadRequest("%s", err.Error())
	}
	return nil
}

// reserveKeys binds each item's key to an event id, as keyed does for one
// request: ids[i] is zero for an item without a key. The bindings are
// made concurrently, so that the log syncs them together.
func (s *Server) reserveKeys(ctx context.Context, keys []string) ([]ulid.ULID, error) {
	ids := make([]ulid.ULID, len(keys))
	errs := make([]error, len(keys))
	sem := make(chan struct{}, 32)
	var wg sync.WaitGroup
	for i, key := range keys {
		if key == "" {
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			ids[i], _, errs[i] = s.keys.ReserveKey(ctx, key, s.store.NewID())
		}()
	}
	wg.Wait()
	return ids, errors.Join(errs...)
}

// batchFailed maps a failed batch to the API: a *batcherr.Error lists
// its items (each mapped by from, a reused id as its key reused), any
// other error is the whole batch's.
func batchFailed(err error, keys []string, from func(error) *apiError) *apiError {
	var be *batcherr.Error
	if !errors.As(err, &be) {
		return from(err)
	}
	items := make([]batchItemError, 0, len(be.Items))
	status := 0
	for _, it := range be.Items {
		ierr := it.Err
		if errors.Is(ierr, eventlog.ErrIDReused) && keys[it.Index] != "" {
			ierr = &keyReusedError{key: keys[it.Index], err: ierr}
		}
		e := from(ierr)
		if status == 0 || e.status == http.StatusBadRequest {
			status = e.status
		}
		items = append(items, batchItemError{Index: it.Index, Code: e.Code, Message: e.Message})
	}
	return refusedItems(status, items, len(keys))
}

// createTasks is POST /v1/tasks:batch.
func (s *Server) createTasks(w http.ResponseWriter, r *http.Request) *apiError {
	bs, ok := s.a.(batchSubmitter)
	if !ok {
		return &apiError{status: http.StatusNotImplemented, Code: codeInternal, Message: "this agent takes no batches"}
	}
	var ins []agent.Input
	var keys []string
	type item struct {
		createRequest
		batchKey
	}
	n, e := decodeBatch(s, r, func(i, total int, it *item) *apiError {
		if i == 0 {
			ins, keys = make([]agent.Input, 0, total), make([]string, 0, total)
		}
		in, e := it.input()
		if e == nil {
			e = itemKey(it.IdempotencyKey)
		}
		ins, keys = append(ins, in), append(keys, it.IdempotencyKey)
		return e
	})
	if e != nil {
		return e
	}
	ids, err := s.reserveKeys(r.Context(), keys)
	if err != nil {
		return s.fromError(err)
	}
	for i := range ins {
		ins[i].ID = ids[i]
	}
	subs, err := bs.SubmitInputs(r.Context(), ins)
	if err != nil {
		return batchFailed(err, keys, s.fromError)
	}
	out := struct {
		Tasks []CreatedJSON `json:"tasks"`
	}{Tasks: make([]CreatedJSON, n)}
	replayed := true
	for i, sub := range subs {
		c := CreatedJSON{TaskID: sub.ID, State: fsm.StateIdle, Queued: s.a.Queued(sub.ID)}
		if sub.Replayed {
			if t, err := s.a.Task(sub.ID); err == nil {
				c.State = t.State
			}
		}
		replayed = replayed && sub.Replayed
		out.Tasks[i] = c
	}
	if replayed {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	writeJSON(w, http.StatusCreated, out)
	return nil
}

// apiCreateBatch is POST /api/v1/tasks:batch.
func (s *Server) apiCreateBatch(w http.ResponseWriter, r *http.Request, agentID string) *apiError {
	var reqs []broker.CreateRequest
	var keys []string
	_, e := decodeBatch(s, r, func(i, total int, it *brokerItem) *apiError {
		if i == 0 {
			reqs, keys = make([]broker.CreateRequest, 0, total), make([]string, 0, total)
		}
		it.AgentID = agentID
		reqs, keys = append(reqs, it.CreateRequest), append(keys, it.IdempotencyKey)
		return itemKey(it.IdempotencyKey)
	})
	if e != nil {
		return e
	}
	ids, err := s.reserveKeys(r.Context(), keys)
	if err != nil {
		return s.fromBrokerError(err)
	}
	// Each task made is encoded as CreateEach hands it out.
	buf := jsonBufs.Get().(*bytes.Buffer)
	defer putJSONBuf(buf)
	out := dispatchListOut{jsonOut: jsonOut{b: buf.AvailableBuffer()}}
	replayed := true
	err = s.broker.b.CreateEach(r.Context(), ids, reqs, func(_ int, t *fsm.Task, held bool) {
		out.add(t)
		replayed = replayed && held
	})
	if err != nil {
		return batchFailed(err, keys, s.fromBrokerError)
	}
	*buf = *bytes.NewBuffer(out.b[:0]) // the pool keeps the room the answer took
	if replayed {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	writeJSON(w, http.StatusCreated, &out)
	return nil
}

// dispatchListOut is the answer {"tasks": [...]} of a broker batch, its
// tasks appended one at a time, each as its DispatchJSON.
type dispatchListOut struct {
	jsonOut
	n int
}

func (l *dispatchListOut) add(t *fsm.Task) {
	if l.n == 0 {
		l.raw(`{"tasks":[`)
	} else {
		l.raw(",")
	}
	l.n++
	toDispatchJSON(t).appendJSON(&l.jsonOut)
}

func (l *dispatchListOut) appendJSON(o *jsonOut) {
	o.b = append(o.b, l.b...)
	if l.n == 0 {
		o.raw(`{"tasks":[`)
	}
	o.raw("]}")
	if o.err == nil {
		o.err = l.err
	}
}
