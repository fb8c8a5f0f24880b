package projection

import (
	"bytes"
	"flag"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/pegasus-engine/pegasus/fsm"
	"github.com/pegasus-engine/pegasus/internal/codec"
)

var summarySeed = flag.Uint64("summary.seed", 0, "seed of TestEncodeSummaryMatchesReflection (0: a new one)")

// randomSummary fills each field of a Summary by reflection, so a field
// added to Summary is filled without this test knowing it and the hand
// encoder must write it. Values cover each encoding's forms: empty and
// not, strings of every length class, every integer width and sign, times
// before 1970, after 2514 and in another zone.
func randomSummary(rng *rand.Rand) Summary {
	var s Summary
	v := reflect.ValueOf(&s).Elem()
	for i := range v.NumField() {
		f := v.Field(i)
		if rng.IntN(4) == 0 {
			continue // empty
		}
		switch f.Kind() {
		case reflect.String:
			f.SetString(strings.Repeat("é", []int{0, 1, 15, 16, 127, 128, 40000}[rng.IntN(7)]) + "x")
		case reflect.Int:
			f.SetInt([]int64{1, -1, -32, -33, 127, 128, 255, 256, 65535, 65536, -129, math.MaxInt32 + 1, math.MinInt64, math.MaxInt64}[rng.IntN(14)])
		case reflect.Uint64:
			f.SetUint([]uint64{1, 127, 128, 256, 65536, 1 << 32, math.MaxUint64}[rng.IntN(7)])
		case reflect.Struct:
			if f.Type() != reflect.TypeFor[time.Time]() {
				panic("randomSummary: a struct field that is not a time: " + f.Type().String())
			}
			secs := []int64{0, 1, 1 << 33, 1<<34 - 1, 1 << 34, 17e9, -1, -62135596800, rng.Int64N(4e9)}[rng.IntN(9)]
			tm := time.Unix(secs, int64(rng.IntN(3))*int64(rng.IntN(1e9)))
			if rng.IntN(2) == 0 {
				tm = tm.In(time.FixedZone("X", 3600))
			}
			f.Set(reflect.ValueOf(tm))
		default:
			panic("randomSummary: a field of kind " + f.Kind().String() + ": teach the test and Summary.Encode")
		}
	}
	return s
}

// TestEncodeSummaryMatchesReflection: the hand encoder of Summary writes
// exactly the bytes of the canonical reflection encoder (internal/codec),
// for random summaries with every field filled or empty, so that persisted
// summaries, and verify's byte comparison, do not change with it.
func TestEncodeSummaryMatchesReflection(t *testing.T) {
	seed := *summarySeed
	if seed == 0 {
		seed = rand.Uint64()
	}
	t.Logf("seed %d (rerun with -summary.seed %d)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, 3))
	for i := range 2000 {
		s := randomSummary(rng)
		checkSummaryEncoding(t, i, &s)
	}
}

func checkSummaryEncoding(t *testing.T, i int, s *Summary) {
	t.Helper()
	want, err := codec.Encode(s)
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("summary %d: hand encoding differs from reflection\n got %x\nwant %x\n%+v", i, got, want, s)
	}
	back, err := DecodeSummary(got)
	if err != nil {
		t.Fatal(err)
	}
	again, _ := back.Encode()
	if !bytes.Equal(again, got) {
		t.Fatalf("summary %d does not decode to itself", i)
	}
}

// FuzzEncodeSummary: for any field values, the hand encoder writes the
// reflection encoder's bytes.
func FuzzEncodeSummary(f *testing.F) {
	f.Add("01JD0000000000000000000000", "general", "reasoning", "pegasus.task@1", "cli", 1, int64(1e9), int64(2e9), 2, uint64(12), uint64(1234), "an input", "")
	f.Fuzz(func(t *testing.T, id, typ, state, machine, source string, prio int, created, updated int64, iter int, events, seq uint64, input, errText string) {
		s := Summary{ID: id, Type: typ, State: fsm.State(state), Machine: machine, Source: source, Priority: prio,
			CreatedAt: time.Unix(created, 0).UTC(), UpdatedAt: time.Unix(0, updated), Iteration: iter, Events: events, Seq: seq,
			Input: input, Error: errText}
		checkSummaryEncoding(t, 0, &s)
	})
}
