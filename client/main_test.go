package client_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/pegasus-engine/pegasus/internal/daemontest"
)

// server is the URL of the daemon TestMain starts for the examples and
// the tests that share one; bin is its binary, for tests that run their
// own (a kill -9).
var server, bin string

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "pegasus-client-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	if bin, err = daemontest.Build(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	d, err := daemontest.Start(bin, filepath.Join(dir, "data"), "")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	server = d.URL
	code := m.Run()
	if err := d.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return code
}
