package engine

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestScheduleFlagsAndFile(t *testing.T) {
	s, err := ParseSchedule("hourly|@hourly|what time is it? | now")
	if err != nil || s.Name != "hourly" || s.Input != "what time is it? | now" {
		t.Fatalf("parse = %+v, %v", s, err)
	}
	from := time.Date(2025, 1, 1, 10, 30, 0, 0, time.UTC)
	if next := s.sched.Next(from); !next.Equal(time.Date(2025, 1, 1, 11, 0, 0, 0, time.UTC)) {
		t.Fatalf("next = %s", next)
	}
	for _, bad := range []string{"noseparators", "x|not a cron|y", "bad name|@daily|x", "|@daily|x"} {
		if _, err := ParseSchedule(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	dir := t.TempDir()
	f := filepath.Join(dir, "s.json")
	os.WriteFile(f, []byte(`{"schedules":[{"name":"digest","cron":"0 8 * * 1-5","input":"summarize","type":"plan","priority":3}]}`), 0o600)
	ss, err := LoadSchedules(f)
	if err != nil || len(ss) != 1 || ss[0].Type != "plan" || ss[0].Priority != 3 || ss[0].sched == nil {
		t.Fatalf("file = %+v, %v", ss, err)
	}
	os.WriteFile(f, []byte(`{"schedules":[{"name":"x","cron":"@daily","input":"y","when":"now"}]}`), 0o600)
	if _, err := LoadSchedules(f); err == nil || !strings.Contains(err.Error(), "unknown field") {
		t.Fatalf("unknown field: %v", err)
	}
	if err := checkUniqueSchedules([]Schedule{{Name: "a"}, {Name: "a"}}); err == nil {
		t.Fatal("duplicate names accepted")
	}
}
