package fsm

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
)

// TestScripts runs the scripts in testdata/scripts/, one behaviour per file, in the
// style of etcd raft's testdata. Directives:
//
//	apply      one event per input line: TYPE key=value ...; prints, per
//	           event, its version, DescribeEvent and the transition, "fact"
//	           or the error
//	describe   prints Describe of the task
//	reset      forgets the task: the next apply starts a new one
//	next       prints Next of the task: the work due, and the event types
//	           that answer it
//	legal      prints the legal event types of every state of the current
//	           machine, or of machine=NAME@VERSION
//
// Regenerate the expected output after a deliberate change with
//
//	go test ./fsm/ -run TestScripts -rewrite
//
// and read the diff.
func TestScripts(t *testing.T) {
	datadriven.Walk(t, "testdata/scripts", func(t *testing.T, path string) {
		var (
			s    stepper
			task Task
		)
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			switch d.Cmd {
			case "apply":
				var out strings.Builder
				for _, line := range strings.Split(d.Input, "\n") {
					line = strings.TrimSpace(line)
					if line == "" || strings.HasPrefix(line, "#") {
						continue
					}
					ev, err := parseEvent(&s, task, line)
					if err != nil {
						d.Fatalf(t, "%s: %v", line, err)
					}
					before, _ := EncodeTask(task)
					next, err := Apply(task, ev)
					fmt.Fprintf(&out, "v%d %s: ", ev.Version, DescribeEvent(ev))
					if err != nil {
						after, _ := EncodeTask(next)
						if !bytes.Equal(before, after) {
							t.Errorf("%s: refused event changed the task", line)
						}
						kind := "event"
						var te *TransitionError
						if errors.As(err, &te) {
							kind = "transition"
						}
						fmt.Fprintf(&out, "refused (%s): %v\n", kind, err)
						continue
					}
					if bad := checkHistory(next); bad != "" {
						t.Errorf("%s: %s", line, bad)
					}
					from := task.State
					if from == "" {
						from = StateIdle
					}
					if len(next.History) == len(task.History) {
						if task.State == StateNone {
							fmt.Fprintf(&out, "created in %s\n", next.State)
						} else {
							fmt.Fprintf(&out, "fact in %s\n", next.State)
						}
					} else {
						fmt.Fprintf(&out, "%s -> %s\n", from, next.State)
					}
					task = next
				}
				return out.String()
			case "describe":
				return Describe(task)
			case "reset":
				task = Task{}
				return ""
			case "next":
				return Next(&task).String() + "\n"
			case "legal":
				var out strings.Builder
				m := DefaultMachine()
				for _, arg := range d.CmdArgs {
					if arg.Key != "machine" || len(arg.Vals) != 1 {
						d.Fatalf(t, "legal: unknown argument %s", arg)
					}
					ref, err := ParseMachineRef(arg.Vals[0])
					if err != nil {
						d.Fatalf(t, "%v", err)
					}
					m, _ = MachineFor(ref)
				}
				for _, st := range m.States() {
					fmt.Fprintf(&out, "%s:", st)
					for _, et := range m.Legal(st) {
						fmt.Fprintf(&out, " %s", et)
					}
					out.WriteByte('\n')
				}
				return out.String()
			}
			d.Fatalf(t, "unknown directive %q", d.Cmd)
			return ""
		})
	})
}
