package main

import (
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/pegasus-engine/pegasus/replay"
)

// completionCommand prints a shell completion script. The scripts ask the
// binary itself for candidates (urfave/cli's --generate-bash-completion), so
// they complete commands, flags and, for commands that take a task, the task
// ids of the configured source.
func completionCommand(std *stdio) *cli.Command {
	return &cli.Command{
		Name:      "completion",
		Usage:     "print a shell completion script (bash or zsh)",
		ArgsUsage: "bash|zsh",
		Description: "Load it in the current shell:\n\n" +
			"   source <(pegasus-replay completion bash)\n" +
			"   source <(pegasus-replay completion zsh)\n\n" +
			"or install it: pegasus-replay completion bash > /etc/bash_completion.d/pegasus-replay",
		BashComplete: func(c *cli.Context) {
			fmt.Fprintln(c.App.Writer, "bash")
			fmt.Fprintln(c.App.Writer, "zsh")
		},
		Action: func(c *cli.Context) error {
			if err := exactArgs(c, "bash|zsh"); err != nil {
				return err
			}
			switch c.Args().First() {
			case "bash":
				_, err := fmt.Fprint(std.out, bashCompletion)
				return err
			case "zsh":
				_, err := fmt.Fprint(std.out, zshCompletion)
				return err
			}
			return usagef("unknown shell %q: want bash or zsh", c.Args().First())
		},
	}
}

// bashCompletion is urfave/cli v2's autocomplete/bash_autocomplete with the
// program name filled in.
const bashCompletion = `# bash completion for pegasus-replay
_pegasus_replay_init_completion() {
  COMPREPLY=()
  _get_comp_words_by_ref "$@" cur prev words cword
}

_pegasus_replay_complete() {
  if [[ "${COMP_WORDS[0]}" != "source" ]]; then
    local cur opts words cword
    COMPREPLY=()
    cur="${COMP_WORDS[COMP_CWORD]}"
    if declare -F _init_completion >/dev/null 2>&1; then
      _init_completion -n "=:" || return
    else
      _pegasus_replay_init_completion -n "=:" || return
    fi
    words=("${words[@]:0:$cword}")
    if [[ "$cur" == "-"* ]]; then
      requestComp="${words[*]} ${cur} --generate-bash-completion"
    else
      requestComp="${words[*]} --generate-bash-completion"
    fi
    opts=$(eval "${requestComp}" 2>/dev/null)
    COMPREPLY=($(compgen -W "${opts}" -- ${cur}))
    return 0
  fi
}

complete -o bashdefault -o default -o nospace -F _pegasus_replay_complete pegasus-replay
`

// zshCompletion is urfave/cli v2's autocomplete/zsh_autocomplete with the
// program name filled in.
const zshCompletion = `#compdef pegasus-replay

_pegasus_replay_complete() {
  local -a opts
  local cur
  cur=${words[-1]}
  if [[ "$cur" == "-"* ]]; then
    opts=("${(@f)$(${words[@]:0:#words[@]-1} ${cur} --generate-bash-completion)}")
  else
    opts=("${(@f)$(${words[@]:0:#words[@]-1} --generate-bash-completion)}")
  fi

  if [[ "${opts[1]}" != "" ]]; then
    _describe 'values' opts
  else
    _files
  fi
}

compdef _pegasus_replay_complete pegasus-replay
`

// completeTaskIDs completes a TASK argument with the ids of the newest tasks
// of the configured source (if any is configured and readable; completion
// never prints errors). Flags are completed as usual.
func completeTaskIDs(std *stdio) cli.BashCompleteFunc {
	return func(c *cli.Context) {
		if c.NArg() > 0 {
			return // the task is already given
		}
		g := readGlobals(c)
		if g.dataDir == "" && g.file == "" { // never hit a server on <TAB>
			cli.DefaultCompleteWithFlags(c.Command)(c)
			return
		}
		quiet := *std
		quiet.errTTY = false
		src, err := openSource(c.Context, &quiet, g)
		if err != nil {
			return
		}
		defer src.Close()
		v, err := src.view(c.Context, &quiet)
		if err != nil {
			return
		}
		page, err := v.Tasks(c.Context, replay.Query{Limit: 200, Desc: true})
		if err != nil {
			return
		}
		for _, t := range page.Tasks {
			fmt.Fprintln(c.App.Writer, t.ID)
		}
	}
}
