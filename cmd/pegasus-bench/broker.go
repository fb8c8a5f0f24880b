package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"

	"github.com/pegasus-engine/pegasus/internal/brokerbench"
)

// The broker's workload (-broker): internal/brokerbench against a pegasusd
// started here on loopback with a fresh data directory, at the broker's
// defaults, or against a running daemon (-url). Each round runs the closed
// loop (tasks/s) and then the open loop (latency at a fixed rate), each on
// a daemon of its own.
//
//	go build -o bin/ ./cmd/pegasusd ./cmd/pegasus-bench && bin/pegasus-bench -broker -rounds 3

// brokerFlags are the flags of -broker.
type brokerFlags struct {
	url, pegasusd, dir string
	rounds             int
	cfg                brokerbench.Config
}

var listeningRE = regexp.MustCompile(`pegasusd listening.* url=(http://\S+)`)

func runBroker(ctx context.Context, f brokerFlags) error {
	shapes := []brokerbench.Config{f.cfg, f.cfg}
	shapes[0].Rate = 0
	if shapes[1].Rate <= 0 {
		shapes[1].Rate = 200
	}
	for round := range f.rounds {
		for i, cfg := range shapes {
			d, err := f.daemon(ctx)
			if err != nil {
				return err
			}
			cfg.URL = d.url
			cfg.Prefix = fmt.Sprintf("bench-r%d-%d-", round, i)
			res, err := brokerbench.Run(ctx, cfg)
			if serr := d.remove(); err == nil {
				err = serr
			}
			if err != nil {
				return err
			}
			fmt.Println(res)
		}
	}
	return nil
}

// daemon is the daemon of one run: the one at f.url, or a pegasusd
// started with args on a fresh data directory.
func (f brokerFlags) daemon(ctx context.Context, args ...string) (*daemonProc, error) {
	if f.url != "" {
		return &daemonProc{url: f.url}, nil
	}
	return startDaemon(ctx, f.pegasusd, f.dir, args...)
}

// daemonProc is a pegasusd started by startDaemon (or, with no cmd, one
// running elsewhere at url).
type daemonProc struct {
	url, data string // data: the data directory
	tmp       string // the temporary directory holding data
	cmd       *exec.Cmd
	logged    chan struct{}
	stopped   bool
}

// startDaemon starts the pegasusd binary bin with args on a free loopback
// port and a new data directory under dir.
func startDaemon(ctx context.Context, bin, dir string, args ...string) (*daemonProc, error) {
	if bin == "" {
		bin = "pegasusd"
		if exe, err := os.Executable(); err == nil {
			if p := filepath.Join(filepath.Dir(exe), "pegasusd"); fileExists(p) {
				bin = p
			}
		}
	}
	tmp, err := os.MkdirTemp(dir, "pegasus-brokerbench-")
	if err != nil {
		return nil, err
	}
	d := &daemonProc{tmp: tmp, data: filepath.Join(tmp, "data"), logged: make(chan struct{})}
	d.cmd = exec.CommandContext(ctx, bin, append([]string{"serve", "--addr", "127.0.0.1:0", "--data-dir", d.data,
		"--log-level", "info", "--log-format", "text"}, args...)...)
	stderr, err := d.cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := d.cmd.Start(); err != nil {
		_ = os.RemoveAll(tmp)
		return nil, fmt.Errorf("start %s (build it with go build -o bin/ ./cmd/pegasusd, or give -pegasusd): %w", bin, err)
	}
	urls := make(chan string, 1)
	var logs strings.Builder
	go func() {
		defer close(d.logged)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if m := listeningRE.FindStringSubmatch(sc.Text()); m != nil {
				urls <- m[1]
			} else if logs.Len() < 1<<16 {
				logs.WriteString(sc.Text() + "\n")
			}
		}
	}()
	select {
	case d.url = <-urls:
		return d, nil
	case <-d.logged:
		_ = d.remove()
		return nil, fmt.Errorf("%s exited before listening:\n%s", bin, logs.String())
	case <-time.After(30 * time.Second):
		_ = d.remove()
		return nil, errors.New(bin + " did not start within 30s")
	}
}

// stop stops the daemon (SIGTERM: a graceful stop, which checkpoints the
// projections) and waits for it to exit.
func (d *daemonProc) stop() error {
	if d.cmd == nil || d.stopped {
		return nil
	}
	d.stopped = true
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	err := d.cmd.Wait()
	<-d.logged
	return err
}

// remove stops the daemon and removes its data.
func (d *daemonProc) remove() error {
	err := d.stop()
	if d.tmp != "" {
		if rerr := os.RemoveAll(d.tmp); err == nil {
			err = rerr
		}
	}
	return err
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir()
}
