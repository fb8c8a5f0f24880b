package server

import (
	"encoding/json"
	"maps"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pegasus-engine/pegasus/broker"
)

// TestCreateFieldsAreTheRequests: the hand decoder knows exactly the
// fields encoding/json decodes into a create (and a batch item).
func TestCreateFieldsAreTheRequests(t *testing.T) {
	item := slices.Sorted(maps.Keys(jsonFields(reflect.TypeFor[brokerItem]())))
	single := slices.Sorted(maps.Keys(jsonFields(reflect.TypeFor[createBody]())))
	want := slices.Sorted(slices.Values(createFields[:]))
	if !slices.Equal(item, want) {
		t.Errorf("a batch item's fields %v, the decoder's %v", item, want)
	}
	if want = slices.DeleteFunc(want, func(s string) bool { return s == "idempotency_key" }); !slices.Equal(single, want) {
		t.Errorf("a create's fields %v, the decoder's %v", single, want)
	}
}

// TestCreateDecodedAsEncodingJSON: random create bodies, valid and not
// (values of every kind and of the wrong type, escapes, invalid UTF-8,
// unknown and misspelled fields, a field twice, broken syntax), decode
// to the same request, or to the same error, with the hand decoder as
// with encoding/json alone, one by one and as batches.
func TestCreateDecodedAsEncodingJSON(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 26))
	pick := func(vs ...string) string { return vs[rng.IntN(len(vs))] }
	strs := []string{`"plain"`, `""`, `"é 中文"`, `"quo\"te"`, `"\u00e9\n"`, "\"bad \xff utf8\"", `null`, `1`, `true`, `[]`, `{}`}
	ints := []string{`0`, `-3`, `42`, `123456789012345678`, `-999999999999999999`, `1234567890123456789012`, `1.5`, `1e2`, `-0`, `null`, `"5"`, `true`}
	values := map[string][]string{
		"required_capabilities": {`[]`, `["gpu","x"]`, `["a",null]`, `["\u0041"]`, `null`, `"a"`, `[1]`, ` [ "x" , "y" ] `, "[\"\xfe\"]"},
		"retry_eligible":        {`true`, `false`, `null`, `1`, `"true"`},
		"metadata":              {`{}`, `{"a":1,"b":{"c":[1, 2]}}`, `null`, `[]`, `"s"`, `{"k":"v","k2":null}`},
		"run_at":                {`"2026-11-27T08:00:00Z"`, `"2026-11-27T08:00:00.5+01:00"`, `null`, `"yesterday"`, `5`},
	}
	for _, f := range []string{"priority", "timeout_seconds", "max_retries", "delay_seconds", "heartbeat_seconds", "retry_backoff_seconds"} {
		values[f] = ints
	}
	names := append(createFields[:], "x", "Title", "agent_id", "-")
	space := func() string { return pick("", "", "", " ", "\n\t ") }
	object := func(withKey bool) string {
		var b strings.Builder
		b.WriteString("{" + space())
		n := rng.IntN(7)
		for i := range n {
			name := names[rng.IntN(len(createFields)-1)]
			switch r := rng.IntN(40); {
			case r == 0:
				name = pick(names[len(createFields):]...)
			case r == 1 && i > 0:
				name = "title" // maybe twice
			case r < 6 && withKey:
				name = "idempotency_key"
			}
			v := pick(strs...)
			if vs, ok := values[name]; ok && rng.IntN(8) > 0 {
				v = pick(vs...)
			} else if !ok && rng.IntN(4) > 0 {
				v = pick(strs[:6]...)
			}
			if i > 0 {
				b.WriteString(pick(",", ",", ",", ",", ",", ",", ",", ",", ",", ""))
			}
			b.WriteString(space() + `"` + name + `"` + space() + ":" + space() + v + space())
		}
		b.WriteString(pick("}", "}", "}", "}", "}", "}", "}", "}", "}", ",}", ""))
		return b.String()
	}
	at := func(r *broker.CreateRequest) time.Time {
		t := r.RunAt
		r.RunAt = time.Time{}
		return t
	}
	fast := 0
	for i := range 20000 {
		data := []byte(object(false))
		var want broker.CreateRequest
		werr := decodeJSON(data, &want)
		var got createBody
		gerr := decodeJSON(data, &got)
		if (werr == nil) != (gerr == nil) || (werr != nil && werr.Message != gerr.Message) {
			t.Fatalf("%d: %s\nencoding/json: %v\nby hand: %v", i, data, werr, gerr)
		}
		g := broker.CreateRequest(got)
		if wt, gt := at(&want), at(&g); !wt.Equal(gt) || wt.Location().String() != gt.Location().String() || !reflect.DeepEqual(want, g) {
			t.Fatalf("%d: %s\nencoding/json: %+v\nby hand: %+v", i, data, want, g)
		}
		var probe createBody
		if json.Valid(data) && probe.decodeFast(data) {
			fast++
		}
	}
	if fast < 2000 {
		t.Errorf("the hand decoder took %d bodies of 20,000: the test does not exercise it", fast)
	}
	fast = 0
	for i := range 5000 {
		items := make([]string, 1+rng.IntN(4))
		for j := range items {
			items[j] = object(true)
			if rng.IntN(4) > 0 {
				items[j] = `{"title":"t` + string(rune('a'+j)) + `","idempotency_key":"k"}`
			}
		}
		data := []byte(`{"tasks":[` + strings.Join(items, ",") + "]}")
		want, wok := decodeItemsReflect[brokerItem](data)
		got, gok := decodeItemsFast[brokerItem](data)
		if wok != gok {
			t.Fatalf("%d: %s\nencoding/json takes it: %v, by hand: %v", i, data, wok, gok)
		}
		if !gok {
			continue
		}
		fast++
		for j := range want {
			if wt, gt := at(&want[j].CreateRequest), at(&got[j].CreateRequest); !wt.Equal(gt) {
				t.Fatalf("%d: item %d: run_at %v, by hand %v", i, j, wt, gt)
			}
		}
		if !reflect.DeepEqual(want, got) {
			t.Fatalf("%d: %s\nencoding/json: %+v\nby hand: %+v", i, data, want, got)
		}
	}
	if fast < 500 {
		t.Errorf("%d batches of 5,000 decoded: the test does not exercise the decoder", fast)
	}
}
