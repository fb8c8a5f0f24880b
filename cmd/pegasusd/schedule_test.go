package main

import (
	"github.com/pegasus-engine/pegasus/engine"
	"github.com/pegasus-engine/pegasus/replay"
	"github.com/urfave/cli/v2"
	"io"
	"strings"
	"testing"

	"github.com/pegasus-engine/pegasus/fsm"
)

func TestScheduleFiresATask(t *testing.T) {
	td := startDaemon(t, testConfig(t))
	s, err := engine.ParseSchedule("tick|@every 1h|hello from cron")
	if err != nil {
		t.Fatal(err)
	}
	s.Type, s.Priority = "explore", 4
	td.d.engine.Fire(s) // what cron runs at each tick
	var list struct {
		Tasks []struct {
			ID     string `json:"task_id"`
			Source string `json:"source"`
		} `json:"tasks"`
	}
	td.do("GET", "/v1/tasks", "").json(t, &list)
	if len(list.Tasks) != 1 || list.Tasks[0].Source != "schedule:tick" {
		t.Fatalf("tasks = %+v", list)
	}
	task := td.waitTask(list.Tasks[0].ID)
	if task.Type != "explore" || task.Priority != 4 || task.Input != "hello from cron" {
		t.Fatalf("task = %+v", task)
	}
	var evs struct {
		Events []replay.EventJSON `json:"events"`
	}
	td.do("GET", "/v1/events?limit=5", "").json(t, &evs)
	found := false
	for _, e := range evs.Events {
		found = found || (e.Stream == list.Tasks[0].ID && e.Version == 1 && e.Type == string(fsm.ScheduleFired))
	}
	if !found {
		t.Fatalf("no SCHEDULE_FIRED input in %+v", evs.Events)
	}
}

func TestConfigValidation(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--llm-base-url", "http://localhost:11434/v1"}, "--llm-model"},
		{[]string{"--llm-model", "llama3"}, "--llm-base-url"},
		{[]string{"--max-active-tasks", "0"}, "at least 1"},
		{[]string{"--max-body-bytes", "10"}, "at least 1024"},
		{[]string{"--schedule", "broken"}, "NAME|CRON|INPUT"},
		{[]string{"--log-level", "loud"}, "--log-level"},
		{[]string{"extra-arg"}, "no arguments"},
	} {
		var stderr strings.Builder
		args := append([]string{"pegasusd", "serve", "--data-dir", t.TempDir(), "--addr", "127.0.0.1:0"}, c.args...)
		if code := run(args, nil, &stderr, &stderr); code == 0 || !strings.Contains(stderr.String(), c.want) {
			t.Errorf("%v: exit %d, %q (want %q)", c.args, code, stderr.String(), c.want)
		}
	}
}

// TestScheduleEnvironmentKeepsCommas reads $PEGASUS_SCHEDULE through the
// daemon's own flag parsing: one schedule per line, so an input with a
// comma stays whole, and a --schedule flag replaces the variable.
func TestScheduleEnvironmentKeepsCommas(t *testing.T) {
	t.Setenv("PEGASUS_SCHEDULE", "digest|@daily|summarize a, b and c\r\n\nping|@every 90s|ping\n")
	var cfg *config
	app := newApp(&client{stdout: io.Discard, stderr: io.Discard})
	app.Commands = nil
	app.Action = func(cc *cli.Context) (err error) {
		cfg, err = configFrom(cc)
		return err
	}
	if err := app.Run([]string{"pegasusd"}); err != nil {
		t.Fatal(err)
	}
	if len(cfg.engine.Schedules) != 2 || cfg.engine.Schedules[0].Input != "summarize a, b and c" || cfg.engine.Schedules[1].Name != "ping" {
		t.Fatalf("schedules from the environment = %+v", cfg.engine.Schedules)
	}
	if err := app.Run([]string{"pegasusd", "--schedule", "only|@hourly|x, y"}); err != nil {
		t.Fatal(err)
	}
	if len(cfg.engine.Schedules) != 1 || cfg.engine.Schedules[0].Name != "only" || cfg.engine.Schedules[0].Input != "x, y" {
		t.Fatalf("a flag must replace the variable: %+v", cfg.engine.Schedules)
	}
}
