package cliconv

import (
	"slices"
	"strings"

	"github.com/urfave/cli/v2"
)

// Setting is one way a value may be given: a flag on the command line
// (Explicit) or an environment variable.
type Setting struct {
	Flag     string // "--file"
	Env      string // "PEGASUS_FILE"
	Value    string
	Explicit bool // given on the command line
}

// OneOf picks the one setting of a group of exclusive choices (the sources
// --data-dir, --server, --file): an explicit flag beats an environment
// variable, so `-f export.ndjson` works after `export PEGASUS_DATA_DIR=...`.
// It returns the index of the chosen setting, -1 when none is set, or a
// usage error when two are given the same way.
func OneOf(settings ...Setting) (int, error) {
	for _, explicit := range []bool{true, false} {
		chosen := -1
		var given []string
		for i, s := range settings {
			if s.Value == "" || s.Explicit != explicit {
				continue
			}
			chosen = i
			if explicit {
				given = append(given, s.Flag)
			} else {
				given = append(given, s.Env)
			}
		}
		if len(given) > 1 {
			return -1, Usagef("give only one of %s", strings.Join(given, ", "))
		}
		if chosen >= 0 {
			return chosen, nil
		}
	}
	return -1, nil
}

// EnvName is the PEGASUS_* variable of a command's own flag:
// PEGASUS_<CMD>_<FLAG>, so `tasks --limit` reads PEGASUS_TASKS_LIMIT.
func EnvName(cmd, flag string) []string {
	return []string{"PEGASUS_" + upperSnake(cmd) + "_" + upperSnake(flag)}
}

func upperSnake(s string) string {
	return strings.ToUpper(strings.ReplaceAll(s, "-", "_"))
}

// ExplicitFlags returns the names (with their aliases) of the flags among
// flags that args gives on the command line, as opposed to through their
// environment variables, which urfave/cli does not tell apart. It stops at
// "--" and skips the values of flags that take one.
func ExplicitFlags(args []string, flags []cli.Flag) map[string]bool {
	set := map[string]bool{}
	for i := 1; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			break
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			continue
		}
		name, _, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		for _, f := range flags {
			if !slices.Contains(f.Names(), name) {
				continue
			}
			for _, n := range f.Names() {
				set[n] = true
			}
			if !hasValue && takesValue(flags, a) {
				i++
			}
		}
	}
	return set
}
