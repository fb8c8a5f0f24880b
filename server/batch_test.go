package server

import (
	"bytes"
	"encoding/json"
	"fmt"
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
