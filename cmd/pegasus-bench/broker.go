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
			url, stop := f.url, func() error { return nil }
			if url == "" {
				var err error
				if url, stop, err = startDaemon(ctx, f.pegasusd, f.dir); err != nil {
					return err
				}
			}
			cfg.URL = url
			cfg.Prefix = fmt.Sprintf("bench-r%d-%d-", round, i)
			res, err := brokerbench.Run(ctx, cfg)
			if serr := stop(); err == nil {
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

// startDaemon starts the pegasusd binary bin on a free loopback port with a
// new data directory under dir, and returns its URL and how to stop it
// (SIGTERM, then removing the data).
func startDaemon(ctx context.Context, bin, dir string) (string, func() error, error) {
	if bin == "" {
		bin = "pegasusd"
		if exe, err := os.Executable(); err == nil {
			if p := filepath.Join(filepath.Dir(exe), "pegasusd"); fileExists(p) {
				bin = p
			}
		}
	}
	data, err := os.MkdirTemp(dir, "pegasus-brokerbench-")
	if err != nil {
		return "", nil, err
	}
	cmd := exec.CommandContext(ctx, bin, "serve", "--addr", "127.0.0.1:0", "--data-dir", filepath.Join(data, "data"),
		"--log-level", "info", "--log-format", "text")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return "", nil, err
	}
	if err := cmd.Start(); err != nil {
		_ = os.RemoveAll(data)
		return "", nil, fmt.Errorf("start %s (build it with go build -o bin/ ./cmd/pegasusd, or give -pegasusd): %w", bin, err)
	}
	urls := make(chan string, 1)
	var logs strings.Builder
	logged := make(chan struct{})
	go func() {
		defer close(logged)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if m := listeningRE.FindStringSubmatch(sc.Text()); m != nil {
				urls <- m[1]
			} else if logs.Len() < 1<<16 {
				logs.WriteString(sc.Text() + "\n")
			}
		}
	}()
	stop := func() error {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		err := cmd.Wait()
		<-logged
		if rerr := os.RemoveAll(data); err == nil {
			err = rerr
		}
		return err
	}
	select {
	case u := <-urls:
		return u, stop, nil
	case <-logged:
		_ = stop()
		return "", nil, fmt.Errorf("%s exited before listening:\n%s", bin, logs.String())
	case <-time.After(30 * time.Second):
		_ = stop()
		return "", nil, errors.New(bin + " did not start within 30s")
	}
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir()
}
