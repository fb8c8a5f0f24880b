// Package randfill fills values with random contents by reflection, for
// the tests that check a hand-written encoder byte for byte against the
// reflection encoder (fsm.EncodeTask, projection.Summary.Encode). Only
// tests import it.
package randfill

import (
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"time"

	"github.com/oklog/ulid/v2"
)

// Fill sets v (addressable) to a random value: every field of every
// struct, by reflection, so that a field added to a struct is filled
// without the test knowing it, and a hand encoder checked against
// reflection must write it. Values cover each msgpack encoding's forms:
// empty and not, short and long strings, every integer width and sign,
// times before 1970, after 2514 and in another zone, nil, empty and
// filled pointers, slices and maps. A kind it has no rule for panics.
func Fill(rng *rand.Rand, v reflect.Value) { fill(rng, v, 0) }

func fill(rng *rand.Rand, v reflect.Value, depth int) {
	if rng.IntN(4) == 0 {
		return // leave it empty
	}
	switch v.Type() {
	case reflect.TypeFor[time.Time]():
		secs := []int64{0, 1, 1 << 33, 1<<34 - 1, 1 << 34, 17e9, -1, -62135596800, rng.Int64N(4e9)}[rng.IntN(9)]
		tm := time.Unix(secs, int64(rng.IntN(3))*int64(rng.IntN(1e9)))
		if rng.IntN(2) == 0 {
			tm = tm.In(time.FixedZone("X", 3600))
		}
		v.Set(reflect.ValueOf(tm))
		return
	case reflect.TypeFor[ulid.ULID]():
		var id ulid.ULID
		for i := range id {
			id[i] = byte(rng.IntN(256))
		}
		v.Set(reflect.ValueOf(id))
		return
	}
	switch v.Kind() {
	case reflect.String:
		n := []int{1, 5, 31, 32, 255, 256, 1000, 65535, 65536}[rng.IntN(9)]
		if n > 1000 && rng.IntN(32) != 0 {
			n = 7
		}
		v.SetString(strings.Repeat(string(rune('a'+rng.IntN(26))), n) + []string{"", "é", "\x00"}[rng.IntN(3)])
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int64:
		mags := []int64{1, 31, 32, 127, 128, 255, 256, 65535, 65536, 1 << 31, 1 << 32, math.MaxInt64}
		n := mags[rng.IntN(len(mags))] - int64(rng.IntN(2))
		if rng.IntN(2) == 0 {
			n = -n - int64(rng.IntN(2))
		}
		v.SetInt(n)
	case reflect.Uint64:
		v.SetUint([]uint64{1, 127, 128, 1 << 40, math.MaxUint64}[rng.IntN(5)])
	case reflect.Pointer:
		if depth > 6 {
			return
		}
		p := reflect.New(v.Type().Elem())
		if rng.IntN(3) != 0 {
			fill(rng, p.Elem(), depth+1)
		}
		v.Set(p)
	case reflect.Slice:
		if depth > 6 {
			return
		}
		n := []int{0, 1, 3, 15, 16}[rng.IntN(5)]
		if depth > 2 {
			n = min(n, 2) // nested lists stay short: the test's time
		}
		s := reflect.MakeSlice(v.Type(), n, n)
		for i := range n {
			fill(rng, s.Index(i), depth+1)
		}
		v.Set(s)
	case reflect.Map:
		n := []int{0, 1, 2, 16}[rng.IntN(4)]
		m := reflect.MakeMap(v.Type())
		for i := range n {
			m.SetMapIndex(reflect.ValueOf(string(rune('z'-i))+strings.Repeat("k", rng.IntN(3))), reflect.ValueOf(strings.Repeat("v", rng.IntN(40))))
		}
		v.Set(m)
	case reflect.Struct:
		for i := range v.NumField() {
			fill(rng, v.Field(i), depth+1)
		}
	default:
		panic("randfill: no rule for " + v.Type().String() + ": add one")
	}
}
