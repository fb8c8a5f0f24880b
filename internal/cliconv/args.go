package cliconv

import (
	"fmt"
	"strings"

	"github.com/urfave/cli/v2"
)

// Interspersed moves a command's flags in front of its positional
// arguments, so `task ID --json` means `task --json ID`: the standard flag
// package stops at the first argument, and people type flags last anyway.
// A "--" ends flag parsing as usual.
func Interspersed(app *cli.App, args []string) []string {
	if len(args) < 2 {
		return args
	}
	var tail []string
	if args[len(args)-1] == "--generate-bash-completion" {
		tail = args[len(args)-1:]
		args = args[:len(args)-1]
	}
	out := []string{args[0]}
	i := 1
	// Global flags before the command name.
	for i < len(args) && strings.HasPrefix(args[i], "-") && args[i] != "--" {
		out = append(out, args[i])
		if takesValue(app.Flags, args[i]) && i+1 < len(args) {
			out = append(out, args[i+1])
			i++
		}
		i++
	}
	if i >= len(args) || args[i] == "--" {
		return append(append(out, args[i:]...), tail...)
	}
	cmd := app.Command(args[i])
	out = append(out, args[i])
	i++
	if cmd == nil {
		return append(append(out, args[i:]...), tail...)
	}
	var flags, positional []string
	for ; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			positional = append(positional, args[i:]...)
			break
		}
		if strings.HasPrefix(a, "-") && a != "-" {
			flags = append(flags, a)
			if takesValue(cmd.Flags, a) && i+1 < len(args) {
				flags = append(flags, args[i+1])
				i++
			}
			continue
		}
		positional = append(positional, a)
	}
	out = append(out, flags...)
	out = append(out, positional...)
	return append(out, tail...)
}

// takesValue reports whether arg (like "--at" or "-d") names a flag in flags
// that takes a separate value. "--at=5" carries its value itself.
func takesValue(flags []cli.Flag, arg string) bool {
	name := strings.TrimLeft(arg, "-")
	if strings.Contains(name, "=") {
		return false
	}
	for _, f := range flags {
		for _, n := range f.Names() {
			if n == name {
				if v, ok := f.(cli.DocGenerationFlag); ok {
					return v.TakesValue()
				}
				return true
			}
		}
	}
	return false
}

// UnknownCommand is the usage error for a command name that does not
// exist, with the nearest existing one when there is a close one:
//
//	unknown command "taks" (did you mean "tasks"?); run pegasusd --help for the list
func UnknownCommand(app *cli.App, name string) error {
	var names []string
	for _, c := range app.Commands {
		if !c.Hidden {
			names = append(names, c.Names()...)
		}
	}
	if s := Nearest(name, names); s != "" {
		return Usagef("unknown command %q (did you mean %q?); run %s --help for the list", name, s, app.Name)
	}
	return Usagef("unknown command %q; run %s --help for the list", name, app.Name)
}

// Nearest returns the candidate closest to s in edit distance, if it is
// close enough to be what was meant (at most a third of its length, and at
// least one edit allowed), or "".
func Nearest(s string, candidates []string) string {
	best, bestD := "", -1
	for _, c := range candidates {
		d := distance(strings.ToLower(s), c)
		if bestD < 0 || d < bestD {
			best, bestD = c, d
		}
	}
	if bestD < 0 || bestD > max(1, len(best)/3) {
		return ""
	}
	return best
}

// distance is the optimal string alignment distance: insertions,
// deletions, substitutions and transpositions of neighbours cost one.
func distance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	d := make([][]int, len(ra)+1)
	for i := range d {
		d[i] = make([]int, len(rb)+1)
		d[i][0] = i
	}
	for j := range rb {
		d[0][j+1] = j + 1
	}
	for i := 1; i <= len(ra); i++ {
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && ra[i-1] == rb[j-2] && ra[i-2] == rb[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(ra)][len(rb)]
}

// OnUsageError makes urfave/cli's flag errors one line (exit code 2)
// instead of the whole help: `flag provided but not defined: -x (see
// pegasusd submit --help)`.
func OnUsageError(c *cli.Context, err error, _ bool) error {
	name := c.App.Name
	if c.Command != nil && c.Command.Name != "" {
		name += " " + c.Command.Name
	}
	return Kind(ErrUsage, fmt.Errorf("%w (see %s --help)", err, name))
}
