package main

import (
	"github.com/urfave/cli/v2"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pegasus-engine/pegasus/fsm"
)

func TestScheduleFlagsAndFile(t *testing.T) {
	s, err := parseScheduleFlag("hourly|@hourly|what time is it? | now")
	if err != nil || s.Name != "hourly" || s.Input != "what time is it? | now" {
		t.Fatalf("parse = %+v, %v", s, err)
	}
	from := time.Date(2025, 1, 1, 10, 30, 0, 0, time.UTC)
	if next := s.sched.Next(from); !next.Equal(time.Date(2025, 1, 1, 11, 0, 0, 0, time.UTC)) {
		t.Fatalf("next = %s", next)
	}
	for _, bad := range []string{"noseparators", "x|not a cron|y", "bad name|@daily|x", "|@daily|x"} {
		if _, err := parseScheduleFlag(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	dir := t.TempDir()
	f := filepath.Join(dir, "s.json")
	os.WriteFile(f, []byte(`{"schedules":[{"name":"digest","cron":"0 8 * * 1-5","input":"summarize","type":"plan","priority":3}]}`), 0o600)
	ss, err := loadSchedules(f)
	if err != nil || len(ss) != 1 || ss[0].Type != "plan" || ss[0].Priority != 3 || ss[0].sched == nil {
		t.Fatalf("file = %+v, %v", ss, err)
	}
	os.WriteFile(f, []byte(`{"schedules":[{"name":"x","cron":"@daily","input":"y","when":"now"}]}`), 0o600)
	if _, err := loadSchedules(f); err == nil || !strings.Contains(err.Error(), "unknown field") {
		t.Fatalf("unknown field: %v", err)
	}
	if err := checkUniqueSchedules([]schedule{{Name: "a"}, {Name: "a"}}); err == nil {
		t.Fatal("duplicate names accepted")
	}
}

func TestScheduleFiresATask(t *testing.T) {
	td := startDaemon(t, testConfig(t))
	s, err := parseScheduleFlag("tick|@every 1h|hello from cron")
	if err != nil {
		t.Fatal(err)
	}
	s.Type, s.Priority = "explore", 4
	td.d.scheduleJob(s)() // what cron runs at each tick
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
		Events []eventJSON `json:"events"`
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
	if len(cfg.schedules) != 2 || cfg.schedules[0].Input != "summarize a, b and c" || cfg.schedules[1].Name != "ping" {
		t.Fatalf("schedules from the environment = %+v", cfg.schedules)
	}
	if err := app.Run([]string{"pegasusd", "--schedule", "only|@hourly|x, y"}); err != nil {
		t.Fatal(err)
	}
	if len(cfg.schedules) != 1 || cfg.schedules[0].Name != "only" || cfg.schedules[0].Input != "x, y" {
		t.Fatalf("a flag must replace the variable: %+v", cfg.schedules)
	}
}
