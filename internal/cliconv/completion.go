package cliconv

import "strings"

// CompletionScript returns the shell completion script of prog for shell
// ("bash" or "zsh"). The scripts ask the binary itself for candidates
// (urfave/cli's --generate-bash-completion), so they complete commands,
// flags and whatever a command's BashComplete prints.
func CompletionScript(prog, shell string) (string, error) {
	var s string
	switch shell {
	case "bash":
		s = bashCompletion
	case "zsh":
		s = zshCompletion
	default:
		return "", Usagef("unknown shell %q: want bash or zsh", shell)
	}
	fn := strings.ReplaceAll(prog, "-", "_")
	return strings.NewReplacer("{{PROG}}", prog, "{{FUNC}}", fn).Replace(s), nil
}

// bashCompletion is urfave/cli v2's autocomplete/bash_autocomplete with the
// program name left to fill in.
const bashCompletion = `# bash completion for {{PROG}}
_{{FUNC}}_init_completion() {
  COMPREPLY=()
  _get_comp_words_by_ref "$@" cur prev words cword
}

_{{FUNC}}_complete() {
  if [[ "${COMP_WORDS[0]}" != "source" ]]; then
    local cur opts words cword
    COMPREPLY=()
    cur="${COMP_WORDS[COMP_CWORD]}"
    if declare -F _init_completion >/dev/null 2>&1; then
      _init_completion -n "=:" || return
    else
      _{{FUNC}}_init_completion -n "=:" || return
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

complete -o bashdefault -o default -o nospace -F _{{FUNC}}_complete {{PROG}}
`

// zshCompletion is urfave/cli v2's autocomplete/zsh_autocomplete with the
// program name left to fill in.
const zshCompletion = `#compdef {{PROG}}

_{{FUNC}}_complete() {
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

compdef _{{FUNC}}_complete {{PROG}}
`
