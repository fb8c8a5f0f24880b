package engine

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strings"

	"github.com/robfig/cron/v3"
)

// Schedule is one recurring input: every time Cron fires, a task is
// created from a SCHEDULE_FIRED input.
type Schedule struct {
	Name     string `json:"name"`
	Cron     string `json:"cron"`  // "*/5 * * * *", "@hourly", "@every 90s"
	Input    string `json:"input"` // the task's input text
	Type     string `json:"type,omitempty"`
	Priority int    `json:"priority,omitempty"`
	// ConcurrencyKey is the concurrency key of the tasks it creates.
	ConcurrencyKey string `json:"concurrency_key,omitempty"`

	sched cron.Schedule
}

// cronParser accepts the standard five fields and the descriptors
// (@hourly, @daily, @every 1h30m, ...). Times are UTC.
var cronParser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)

// ParseSchedule reads "NAME|CRON|INPUT" (the input may contain '|').
func ParseSchedule(s string) (Schedule, error) {
	parts := strings.SplitN(s, "|", 3)
	if len(parts) != 3 {
		return Schedule{}, fmt.Errorf("schedule %q: want NAME|CRON|INPUT", s)
	}
	sc := Schedule{Name: strings.TrimSpace(parts[0]), Cron: strings.TrimSpace(parts[1]), Input: parts[2]}
	return sc, sc.check()
}

// LoadSchedules reads a JSON file {"schedules": [{"name", "cron", "input",
// "type", "priority"}]}.
func LoadSchedules(path string) ([]Schedule, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var f struct {
		Schedules []Schedule `json:"schedules"`
	}
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	for i := range f.Schedules {
		if err := f.Schedules[i].check(); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
	}
	return f.Schedules, nil
}

func (s *Schedule) check() error {
	if !nameRE.MatchString(s.Name) {
		return fmt.Errorf("schedule name %q: use letters, digits, '_', '.', '-' (at most 64)", s.Name)
	}
	sc, err := cronParser.Parse(s.Cron)
	if err != nil {
		return fmt.Errorf("schedule %q: cron %q: %w", s.Name, s.Cron, err)
	}
	s.sched = sc
	return nil
}

func checkUniqueSchedules(ss []Schedule) error {
	seen := map[string]bool{}
	for _, s := range ss {
		if seen[s.Name] {
			return fmt.Errorf("two schedules are named %q", s.Name)
		}
		seen[s.Name] = true
	}
	return nil
}
