package main

import (
	"fmt"
	"io"
	"os"

	"github.com/urfave/cli/v2"

	cfgfile "github.com/pegasus-engine/pegasus/config"
	"github.com/pegasus-engine/pegasus/internal/cliconv"
)

// configCommand is `pegasusd config check FILE`: it validates a
// configuration file without starting anything, and prints the effective
// configuration with its secrets redacted (exit 0) or the problem, with
// the file, the line and the key (exit 2).
func configCommand(stdout io.Writer) *cli.Command {
	return &cli.Command{
		Name:  "config",
		Usage: "work with the configuration file (docs/config.md)",
		Subcommands: []*cli.Command{{
			Name:      "check",
			Usage:     "validate a configuration file without starting, and print it with its secrets redacted",
			ArgsUsage: "FILE",
			Description: "Exit 0: the file is valid; the effective configuration is printed, with ${NAME} references and apiKeyEnv names in place of the secrets.\n" +
				"Exit 2: the file is not; the message names the file, the line and the key. FILE defaults to $PEGASUS_CONFIG.",
			OnUsageError: cliconv.OnUsageError,
			Action: func(cc *cli.Context) error {
				path := os.Getenv("PEGASUS_CONFIG")
				switch {
				case cc.NArg() == 1:
					path = cc.Args().First()
				case cc.NArg() > 1 || path == "":
					return cliconv.Usagef("config check takes one FILE (or $PEGASUS_CONFIG)")
				}
				f, err := cfgfile.Load(path, os.Getenv)
				if err != nil {
					return cliconv.Kind(cliconv.ErrUsage, err)
				}
				out, err := f.Redacted()
				if err != nil {
					return err
				}
				_, err = fmt.Fprintf(stdout, "# %s is valid; configuration hash sha256:%s\n%s", path, f.Hash(), out)
				return err
			},
		}},
	}
}
