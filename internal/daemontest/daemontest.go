// Package daemontest builds pegasusd and runs it as a subprocess for the
// tests of packages that talk to it over HTTP (client, examples): a real
// daemon on a free port of the loopback with its own data directory,
// killed with SIGKILL and restarted on the same directory and port when a
// test says so. It works without a *testing.T, so that TestMain can start
// the daemon that Example functions use.
package daemontest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"
)

// Build compiles pegasusd into dir and returns the binary's path.
func Build(dir string) (string, error) {
	bin := filepath.Join(dir, "pegasusd")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/pegasus-engine/pegasus/cmd/pegasusd").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("daemontest: go build: %v\n%s", err, out)
	}
	return bin, nil
}

// StartTimeout bounds how long Start waits for the daemon to listen.
const StartTimeout = 60 * time.Second

// ErrNotListening is Start's error for a daemon that exited, or was
// killed, before it listened (as a supervisor would see it); it carries
// the daemon's output.
var ErrNotListening = errors.New("daemontest: pegasusd did not start")

// Daemon is a running pegasusd.
type Daemon struct {
	URL     string // http://127.0.0.1:PORT
	Addr    string // 127.0.0.1:PORT
	DataDir string
	// Cmd is the daemon's process, for signals (SIGSTOP, SIGCONT) and
	// Wait.
	Cmd *exec.Cmd

	bin   string
	wrap  []string
	extra []string
	mu    sync.Mutex
	logs  bytes.Buffer
	done  chan struct{} // its stderr is read to the end
}

var listening = regexp.MustCompile(`pegasusd listening.* url=(http://\S+)`)

// Start runs bin serve on dataDir at addr ("": a free port of the
// loopback) with the extra flags, and returns once it listens.
func Start(bin, dataDir, addr string, extra ...string) (*Daemon, error) {
	return StartWrapped(nil, bin, dataDir, addr, extra...)
}

// StartWrapped is Start with the daemon's command line after wrap (for
// example ip netns exec NAME, which executes it in a network namespace
// as the same process).
func StartWrapped(wrap []string, bin, dataDir, addr string, extra ...string) (*Daemon, error) {
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	args := append([]string{"serve", "--addr", addr, "--data-dir", dataDir, "--log-level", "info", "--log-format", "text"}, extra...)
	argv := append(append(wrap[:len(wrap):len(wrap)], bin), args...)
	d := &Daemon{DataDir: dataDir, bin: bin, wrap: wrap, extra: extra, Cmd: exec.Command(argv[0], argv[1:]...), done: make(chan struct{})}
	stderr, err := d.Cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := d.Cmd.Start(); err != nil {
		return nil, err
	}
	urls := make(chan string, 1)
	go func() {
		defer close(d.done)
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		found := false
		for sc.Scan() {
			line := sc.Text()
			d.mu.Lock()
			d.logs.WriteString(line + "\n")
			d.mu.Unlock()
			if m := listening.FindStringSubmatch(line); m != nil && !found {
				found = true
				urls <- m[1]
			}
		}
		close(urls)
	}()
	select {
	case u, ok := <-urls:
		if !ok {
			_ = d.Cmd.Wait()
			return nil, fmt.Errorf("%w: it exited before listening:\n%s", ErrNotListening, d.Logs())
		}
		d.URL, d.Addr = u, strings.TrimPrefix(u, "http://")
		return d, nil
	case <-time.After(StartTimeout):
		_ = d.Cmd.Process.Kill()
		_ = d.Cmd.Wait()
		return nil, fmt.Errorf("%w within %s:\n%s", ErrNotListening, StartTimeout, d.Logs())
	}
}

// Done is closed once the daemon's standard error is read to the end:
// it exited.
func (d *Daemon) Done() <-chan struct{} { return d.done }

// Logs is what the daemon wrote to stderr so far.
func (d *Daemon) Logs() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.logs.String()
}

// Kill kills the daemon with SIGKILL (a crash) and waits for it.
func (d *Daemon) Kill() error {
	if d.Cmd.ProcessState != nil {
		return nil
	}
	if err := d.Cmd.Process.Kill(); err != nil {
		return err
	}
	_ = d.Cmd.Wait()
	<-d.done
	return nil
}

// Stop stops the daemon with SIGINT and expects a clean exit.
func (d *Daemon) Stop() error {
	if d.Cmd.ProcessState != nil {
		return nil
	}
	if err := d.Cmd.Process.Signal(os.Interrupt); err != nil {
		return err
	}
	err := d.Cmd.Wait()
	<-d.done
	if err != nil {
		return errors.Join(fmt.Errorf("daemontest: pegasusd did not stop cleanly: %w", err), errors.New(d.Logs()))
	}
	return nil
}

// Restart starts the daemon again, stopped or killed, on the same data
// directory, address and flags.
func (d *Daemon) Restart() (*Daemon, error) {
	return StartWrapped(d.wrap, d.bin, d.DataDir, d.Addr, d.extra...)
}
