package fsm

import (
	"bytes"
	"flag"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/pegasus-engine/pegasus/internal/codec"
)

var encodeSeed = flag.Uint64("encode.seed", 0, "seed of TestEncodeTaskMatchesReflection (0: a new one)")

// fillRandom sets v (addressable) to a random value: every field of every
// struct, by reflection, so a field added to a task's structs is filled
// without this test knowing it, and the hand encoder must write it. Values
// cover each encoding's forms: empty and not, short and long strings,
// every integer width, times before 1970 and after 2514, nil, empty and
// filled pointers, slices and maps.
func fillRandom(rng *rand.Rand, v reflect.Value, depth int) {
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
			fillRandom(rng, p.Elem(), depth+1)
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
			fillRandom(rng, s.Index(i), depth+1)
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
			fillRandom(rng, v.Field(i), depth+1)
		}
	default:
		panic("fillRandom: no rule for " + v.Type().String() + ": add one")
	}
}

// TestEncodeTaskMatchesReflection: EncodeTask writes the bytes msgpack's
// reflection encoder (internal/codec) writes, for random tasks with every
// field filled or empty, and the bytes decode back to the task.
func TestEncodeTaskMatchesReflection(t *testing.T) {
	seed := *encodeSeed
	if seed == 0 {
		seed = rand.Uint64()
	}
	t.Logf("seed %d (-encode.seed to repeat)", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	n := 1000
	if testing.Short() {
		n = 300
	}
	for i := range n {
		var task Task
		fillRandom(rng, reflect.ValueOf(&task).Elem(), 0)
		checkEncodeTask(t, i, &task)
	}
	// The zero task and a task with a dispatch part that is all empty.
	checkEncodeTask(t, -1, &Task{})
	checkEncodeTask(t, -2, &Task{Dispatch: &Dispatch{}, Context: Context{Plan: &Plan{Steps: []PlanStep{{}}}}})
}

func checkEncodeTask(t *testing.T, i int, task *Task) {
	t.Helper()
	want, err := codec.Encode(task)
	if err != nil {
		t.Fatal(err)
	}
	got, err := EncodeTask(*task)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		at := 0
		for at < min(len(got), len(want)) && got[at] == want[at] {
			at++
		}
		t.Fatalf("task %d: EncodeTask differs from the reflection encoder at byte %d of %d/%d:\n got %x\nwant %x",
			i, at, len(got), len(want), got[max(0, at-16):min(len(got), at+16)], want[max(0, at-16):min(len(want), at+16)])
	}
	back, err := DecodeTask(got)
	if err != nil {
		t.Fatalf("task %d: %v", i, err)
	}
	if again, _ := EncodeTask(back); !bytes.Equal(again, got) {
		t.Fatalf("task %d: decoded and encoded again, the bytes differ", i)
	}
}

// FuzzEncodeTask: the same check, the task drawn from the fuzzer's seed.
func FuzzEncodeTask(f *testing.F) {
	f.Add(uint64(1), uint64(2))
	f.Add(uint64(42), uint64(0))
	f.Fuzz(func(t *testing.T, a, b uint64) {
		var task Task
		fillRandom(rand.New(rand.NewPCG(a, b)), reflect.ValueOf(&task).Elem(), 0)
		checkEncodeTask(t, 0, &task)
	})
}

// BenchmarkEncodeTaskReflection is BenchmarkEncodeTask through msgpack's
// reflection (internal/codec), the encoder EncodeTask replaced: compare the
// two in one run.
func BenchmarkEncodeTaskReflection(b *testing.B) {
	t, err := foldAll(realisticHistory(b, 5))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := codec.Encode(&t); err != nil {
			b.Fatal(err)
		}
	}
}
