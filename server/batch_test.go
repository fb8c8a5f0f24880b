package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"github.com/pegasus-engine/pegasus/broker"
	"reflect"
	"strings"
	"testing"
)

// TestEachMember: the byte scanner that checks field names finds the
// members json.Decoder finds, in every shape of value.
func TestEachMember(t *testing.T) {
	for _, doc := range []string{
		`{}`, ` { } `, `null`, `[1,2]`, `"s"`,
		`{"a":1}`, `{"a" : "x\"}y" , "b":[1,{"c":"]"}],"d":{"e":null},"f":true,"g":-1.5e3}`,
		"{\n\t\"a\\u0062\": \"\\\\\",\r\n \"x\":{}}\n",
		`{"k":"\\","l":"a\\\"b","m":[[],[[]]],"n":{"o":{"p":[{}]}},"q":false}`,
		`{"é":"ü","":0}`,
	} {
		var want []string
		dec := json.NewDecoder(bytes.NewReader([]byte(doc)))
		if tok, err := dec.Token(); err == nil && tok == json.Delim('{') {
			for dec.More() {
				tok, _ := dec.Token()
				var raw json.RawMessage
				if err := dec.Decode(&raw); err != nil {
					t.Fatal(err)
				}
				want = append(want, fmt.Sprintf("%s=%s", tok, raw))
			}
		}
		var got []string
		err := eachMember([]byte(doc), func(key string, raw []byte) error {
			got = append(got, fmt.Sprintf("%s=%s", key, raw))
			return nil
		})
		if err != nil || fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s: %q, %v; want %q", doc, got, err, want)
		}
	}
}

// TestBatchDecodedAtOnceAsOneByOne: the one-pass decoding of a batch takes
// exactly the bodies whose every item decodes one by one, into the same
// items; any other body falls back to the item-by-item decoding, which
// names what is wrong.
func TestBatchDecodedAtOnceAsOneByOne(t *testing.T) {
	type item struct {
		broker.CreateRequest
		batchKey
	}
	many := `{"tasks":[` + strings.TrimSuffix(strings.Repeat(`{"title":"t"},`, maxBatch+1), ",") + `]}`
	for _, c := range []struct {
		body string
		ok   bool
	}{
		{`{"tasks":[{"title":"a","required_capabilities":["x"],"metadata":{"k":{"n":1}},"idempotency_key":"k1"},{"title":"b","priority":3}]}`, true},
		{` { "tasks" : [ { "title" : "a" } , {"title":"b"} ] } `, true},
		{`{"tasks":[{"title":"a"},null]}`, true},
		{`{"tasks":[{"title":"a","Title":"b"}]}`, false}, // a field name in another case
		{`{"tasks":[{"title":"a","title":"b"}]}`, false}, // a field twice
		{`{"tasks":[{"title":"a","nope":1}]}`, false},    // an unknown field
		{`{"tasks":[{"title":1}]}`, false},               // a wrong type
		{`{"tasks":[{"title":"a"}],"tasks":[{"title":"b"}]}`, false},
		{`{"Tasks":[{"title":"a"}]}`, false},
		{`{"tasks":[{"title":"a"}]} {}`, false}, // trailing data
		{`{"tasks":[]}`, false},
		{`{"tasks":null}`, false},
		{`{}`, false},
		{`[]`, false},
		{many, false},
	} {
		atOnce, ok := decodeItemsAtOnce[item]([]byte(c.body))
		oneByOne, undecoded, e := decodeItemsOneByOne[item]([]byte(c.body))
		refused := e != nil || undecoded != nil
		if ok != c.ok || ok == refused {
			t.Errorf("%.60s: at once %v, one by one refused %v (%v, %v); want at once %v", c.body, ok, refused, e, undecoded, c.ok)
			continue
		}
		if ok && !reflect.DeepEqual(atOnce, oneByOne) {
			t.Errorf("%.60s: at once %+v, one by one %+v", c.body, atOnce, oneByOne)
		}
	}
}
