package server

import (
	"errors"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/iotest"
	"time"
)

// TestDecodeBodyExactNames: field names match exactly at every depth, in
// embedded structs too; maps take any key; duplicates are refused.
func TestDecodeBodyExactNames(t *testing.T) {
	type Inner struct {
		Name string `json:"name"`
	}
	type Embedded struct {
		Extra string `json:"extra"`
	}
	type body struct {
		Embedded
		Input  string            `json:"input"`
		Inner  *Inner            `json:"inner"`
		Meta   map[string]string `json:"meta"`
		When   time.Time         `json:"when"`
		Plain  int
		Hidden string `json:"-"`
	}
	for in, want := range map[string]string{
		`{"input":"x","extra":"e","inner":{"name":"n"},"meta":{"ANY":"v"},"Plain":1,"when":"2026-01-01T00:00:00Z"}`: "",
		`{"inner":null}`:                    "",
		`{"Input":"x"}`:                     `unknown field "Input" (field names are case-sensitive: "input")`,
		`{"EXTRA":"e"}`:                     `unknown field "EXTRA" (field names are case-sensitive: "extra")`,
		`{"inner":{"NAME":"n"}}`:            `unknown field "inner.NAME" (field names are case-sensitive: "inner.name")`,
		`{"plain":1}`:                       `unknown field "plain" (field names are case-sensitive: "Plain")`,
		`{"input":"x","input":"y"}`:         `field "input" appears twice`,
		`{"inner":{"name":"a","name":"b"}}`: `field "inner.name" appears twice`,
		`{"Hidden":"h"}`:                    `unknown field "Hidden"`,
		`{"Plain":"one"}`:                   `field "Plain" must be an integer`,
		`{"input":5}`:                       `field "input" must be a string`,
		`{"meta":[]}`:                       `field "meta" must be an object`,
		`{"when":3}`:                        `a time must be an RFC 3339 string, like 2026-01-02T15:04:05Z`,
		`{"when":"yesterday"}`:              `a time must be an RFC 3339 string, like 2026-01-02T15:04:05Z`,
	} {
		var b body
		e := decodeBody(httptest.NewRequest("POST", "/", strings.NewReader(in)), &b, false)
		switch {
		case want == "" && e != nil:
			t.Errorf("%s: %v", in, e)
		case want != "" && (e == nil || e.Message != want):
			t.Errorf("%s: %v, want %q", in, e, want)
		}
	}
}

// TestReadBody: the body is read whole whatever its Content-Length says
// (exact, unknown, smaller than the body, larger than presizeLimit), and a
// body cut short of its Content-Length is an error.
func TestReadBody(t *testing.T) {
	body := strings.Repeat("x", 3000)
	for name, cl := range map[string]int64{"exact": 3000, "unknown": -1, "smaller": 10, "huge": presizeLimit + 1} {
		r := httptest.NewRequest("POST", "/", strings.NewReader(body))
		r.ContentLength = cl
		got, err := readBody(r)
		if err != nil || string(got) != body {
			t.Errorf("%s: got %d bytes, %v; want the %d bytes", name, len(got), err, len(body))
		}
	}
	r := httptest.NewRequest("POST", "/", iotest.ErrReader(errShort))
	r.ContentLength = 100
	if _, err := readBody(r); err != errShort {
		t.Errorf("a failing body: got %v, want %v", err, errShort)
	}
}

var errShort = errors.New("short body")
