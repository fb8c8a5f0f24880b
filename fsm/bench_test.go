package fsm

import (
	"fmt"
	"testing"
)

// realisticHistory returns the events of a task that runs iterations
// reason/act loops of three tool calls each, then answers, completes and
// reflects: the shape of a typical agent task.
func realisticHistory(tb testing.TB, iterations int) []Event {
	lines := []string{"TASK_CREATED text=\"find and summarise three papers\""}
	for range iterations {
		lines = append(lines, "MODEL_CALLED", "REASON_DONE plan=tool_call:search,tool_call:fetch,tool_call:fetch")
		for range 3 {
			lines = append(lines, "TASK_NOTIFY", "TOOL_CALL_STARTED", "TOOL_CALL_COMPLETED result=\"a result of some length, as tools return\" ms=230")
		}
	}
	lines = append(lines, "MODEL_CALLED", "REASON_DONE plan=respond", "STEP_COMPLETED result=\"the summary\"",
		"TASK_COMPLETED result=\"the summary\"", "MODEL_CALLED purpose=reflect", "REFLECTION_COMPLETE facts=3 episode=e")
	var s stepper
	_, evs := foldLines(tb, &s, Task{}, lines...)
	return evs
}

func foldAll(evs []Event) (Task, error) {
	var t Task
	var err error
	for _, ev := range evs {
		if t, err = Apply(t, ev); err != nil {
			return t, err
		}
	}
	return t, nil
}

// BenchmarkApply folds a realistic task history from zero per op and
// reports the cost per event.
func BenchmarkApply(b *testing.B) {
	for _, iters := range []int{1, 5} {
		evs := realisticHistory(b, iters)
		b.Run(fmt.Sprintf("events=%d", len(evs)), func(b *testing.B) {
			allocs := testing.AllocsPerRun(20, func() { _, _ = foldAll(evs) })
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				if _, err := foldAll(evs); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(evs)), "ns/event")
			b.ReportMetric(allocs/float64(len(evs)), "allocs/event")
		})
	}
}

// BenchmarkDecodeApply is replay's inner loop: decode each stored body,
// then apply it.
func BenchmarkDecodeApply(b *testing.B) {
	evs := realisticHistory(b, 5)
	bodies := make([][]byte, len(evs))
	for i, ev := range evs {
		var err error
		if bodies[i], err = Encode(ev.Body); err != nil {
			b.Fatal(err)
		}
	}
	run := func() error {
		var t Task
		for i, ev := range evs {
			body, err := Decode(ev.Type, SchemaVersion, bodies[i])
			if err != nil {
				return err
			}
			ev.Body = body
			if t, err = Apply(t, ev); err != nil {
				return err
			}
		}
		return nil
	}
	allocs := testing.AllocsPerRun(20, func() { _ = run() })
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if err := run(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(evs)), "ns/event")
	b.ReportMetric(allocs/float64(len(evs)), "allocs/event")
}

// BenchmarkEncodeTask is the cost of a snapshot or of one byte-identical
// comparison of a finished task.
func BenchmarkEncodeTask(b *testing.B) {
	t, err := foldAll(realisticHistory(b, 5))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := EncodeTask(t); err != nil {
			b.Fatal(err)
		}
	}
}

// agentCall is the events of one task of the agent's MCP benchmark: an
// input, its admission, a model turn that asks for one tool call, the
// call, a second model turn that answers, the answer and the result.
var agentCall = []string{
	"MESSAGE_RECEIVED text=\"call echo with the message hello\"",
	"TASK_CREATED text=\"call echo with the message hello\" meta=origin:bench",
	"MODEL_CALLED ms=3",
	"REASON_DONE plan=tool_call:everything__echo text=\"I will call echo.\"",
	"TOOL_CALL_STARTED",
	"TOOL_CALL_COMPLETED result=\"Echo: hello\" ms=2",
	"MODEL_CALLED ms=3",
	"REASON_DONE plan=respond text=\"Echo says hello.\"",
	"STEP_COMPLETED result=\"Echo says hello.\"",
	"TASK_COMPLETED result=\"Echo says hello.\"",
}

// BenchmarkAgentCall is the machine's share of one recorded tool call
// through the agent (agent/mcp's BenchmarkMCPAgentDeep), per part:
// encoding each body the agent writes, decoding each as the fold does,
// folding them, and predicting each stage's outcome on a copy (a clone, a
// fork) of the task before it (the agent's stages). Each op is one task
// of ten events.
func BenchmarkAgentCall(b *testing.B) {
	var s stepper
	_, evs := foldLines(b, &s, Task{}, agentCall...)
	bodies := make([][]byte, len(evs))
	before := make([]Task, len(evs)) // the task each event applies to
	var t Task
	for i, ev := range evs {
		var err error
		if bodies[i], err = Encode(ev.Body); err != nil {
			b.Fatal(err)
		}
		before[i] = t
		if t, err = Apply(t, ev); err != nil {
			b.Fatal(err)
		}
	}
	run := func(b *testing.B, f func() error) {
		b.ReportAllocs()
		for b.Loop() {
			if err := f(); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("encode", func(b *testing.B) {
		run(b, func() error {
			for _, ev := range evs {
				if _, err := Encode(ev.Body); err != nil {
					return err
				}
			}
			return nil
		})
	})
	b.Run("decode", func(b *testing.B) {
		run(b, func() error {
			for i, ev := range evs {
				if _, err := Decode(ev.Type, SchemaVersion, bodies[i]); err != nil {
					return err
				}
			}
			return nil
		})
	})
	b.Run("fold", func(b *testing.B) {
		run(b, func() error { _, err := foldAll(evs); return err })
	})
	for _, copyOf := range []struct {
		name string
		copy func(Task) Task
	}{{"clone", Task.Clone}, {"fork", Task.Fork}} {
		b.Run("predict-"+copyOf.name, func(b *testing.B) {
			run(b, func() error {
				for i, ev := range evs[1:] {
					if _, err := Apply(copyOf.copy(before[i+1]), ev); err != nil {
						return err
					}
				}
				return nil
			})
		})
	}
}
