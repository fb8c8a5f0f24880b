package codec

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
)

type sample struct {
	Name  string            `msgpack:"name"`
	Tags  map[string]string `msgpack:"tags"`
	List  []int             `msgpack:"list"`
	Count int               `msgpack:"count"`
}

// TestEncodeIsCanonical: map insertion order does not matter, and nil and
// empty collections, zero numbers and empty strings encode alike.
func TestEncodeIsCanonical(t *testing.T) {
	m1, m2 := map[string]string{}, map[string]string{}
	for i := range 40 {
		m1[fmt.Sprintf("k%02d", i)] = "v"
		m2[fmt.Sprintf("k%02d", 39-i)] = "v"
	}
	a, err := Encode(&sample{Name: "x", Tags: m1})
	if err != nil {
		t.Fatal(err)
	}
	for range 10 {
		b, _ := Encode(&sample{Name: "x", Tags: m2, List: []int{}})
		if !bytes.Equal(a, b) {
			t.Fatal("equal values encode differently")
		}
	}
	empty, _ := Encode(&sample{Tags: map[string]string{}, List: []int{}})
	if !bytes.Equal(empty, []byte{0x80}) {
		t.Fatalf("an empty value encodes to % x, want an empty map", empty)
	}
	var back sample
	if err := Decode(a, &back); err != nil || back.Name != "x" || len(back.Tags) != 40 {
		t.Fatalf("round trip: %v %+v", err, back)
	}
}

// TestDecodeRefusesBadShapes: forged lengths, deep nesting, trailing bytes
// and nothing at all are errors before the decoder runs.
func TestDecodeRefusesBadShapes(t *testing.T) {
	cases := map[string][]byte{
		"array32 of 2^32-1":  {0xdd, 0xff, 0xff, 0xff, 0xff},
		"map32 of 2^32-1":    {0xdf, 0xff, 0xff, 0xff, 0xff},
		"str32 of 4 GiB":     {0xdb, 0xff, 0xff, 0xff, 0xff},
		"ext32 of 4 GiB":     {0xc9, 0xff, 0xff, 0xff, 0xff, 0x01},
		"nested too deep":    append(bytes.Repeat([]byte{0x91}, MaxDepth+1), 0xc0),
		"trailing bytes":     {0x80, 0x80},
		"never-used code":    {0xc1},
		"nothing":            {},
		"truncated length":   {0xda, 0x01},
		"map missing values": {0x81, 0xa1, 'a'},
	}
	for name, data := range cases {
		var v any
		if err := Decode(data, &v); err == nil {
			t.Errorf("%s: decoded", name)
		}
	}
	ok := append(bytes.Repeat([]byte{0x91}, MaxDepth), 0xc0)
	if err := CheckShape(ok); err != nil {
		t.Errorf("nesting %d: %v", MaxDepth, err)
	}
	if _, err := Encode(make(chan int)); err == nil || !strings.HasPrefix(err.Error(), "codec: ") {
		t.Errorf("encoding a channel: %v", err)
	}
}
