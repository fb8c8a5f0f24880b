package projection

import (
	"bytes"
	"flag"
	"reflect"
	"testing"
	"time"

	"github.com/pegasus-engine/pegasus/fsm"
	"github.com/pegasus-engine/pegasus/internal/codec"
	"github.com/pegasus-engine/pegasus/internal/randfill"
)

var summarySeed = flag.Uint64("summary.seed", 0, "seed of TestEncodeSummaryMatchesReflection (0: a new one)")

// TestEncodeSummaryMatchesReflection: the hand encoder of Summary writes
// exactly the bytes of the canonical reflection encoder (internal/codec),
// for random summaries with every field filled or empty, so that persisted
// summaries, and verify's byte comparison, do not change with it.
func TestEncodeSummaryMatchesReflection(t *testing.T) {
	rng := randfill.Rand(t, *summarySeed, "summary.seed", 3)
	for i := range 2000 {
		var s Summary // every field by reflection: a new one is filled, and must be encoded
		randfill.Fill(rng, reflect.ValueOf(&s).Elem())
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
