package fsm

import (
	"bytes"
	"flag"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/pegasus-engine/pegasus/internal/codec"
	"github.com/pegasus-engine/pegasus/internal/randfill"
)

var encodeSeed = flag.Uint64("encode.seed", 0, "seed of TestEncodeTaskMatchesReflection (0: a new one)")

// TestEncodeTaskMatchesReflection: EncodeTask writes the bytes msgpack's
// reflection encoder (internal/codec) writes, for random tasks with every
// field filled or empty, and the bytes decode back to the task.
func TestEncodeTaskMatchesReflection(t *testing.T) {
	rng := randfill.Rand(t, *encodeSeed, "encode.seed", 1)
	n := 1000
	if testing.Short() {
		n = 300
	}
	for i := range n {
		var task Task
		randfill.Fill(rng, reflect.ValueOf(&task).Elem())
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
		randfill.Fill(rand.New(rand.NewPCG(a, b)), reflect.ValueOf(&task).Elem())
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
