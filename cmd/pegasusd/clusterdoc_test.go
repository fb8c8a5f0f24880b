package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// shBlocks returns the contents of a Markdown document's ```sh blocks.
func shBlocks(t *testing.T, file string) []string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range regexp.MustCompile("(?s)```sh\n(.*?)```").FindAllStringSubmatch(string(b), -1) {
		out = append(out, m[1])
	}
	return out
}

// TestClusterDocCommands runs the commands of docs/cluster.md as a reader
// would paste them: it builds nats-server with the document's go build
// line, starts three servers with its loop (its /tmp paths moved into a
// temporary directory, the ports as written), runs pegasusd with its
// --publish line on them, creates an agent task and a broker task, and
// checks the fan-out (checkFanout).
func TestClusterDocCommands(t *testing.T) {
	if testing.Short() {
		t.Skip("builds nats-server and the daemon")
	}
	var build, loop, daemon string
	for _, block := range shBlocks(t, "../../docs/cluster.md") {
		for _, line := range strings.Split(block, "\n") {
			switch {
			case strings.HasPrefix(line, "go build -o bin/nats-server "):
				build = line
			case strings.HasPrefix(line, "pegasusd --publish ") && strings.Contains(line, "--publish-replicas 3"):
				daemon = line
			}
		}
		if strings.HasPrefix(block, "for i in 1 2 3") {
			loop = block
		}
	}
	if build == "" || loop == "" || daemon == "" {
		t.Fatalf("docs/cluster.md lacks the build line (%q), the three-server loop or the pegasusd --publish line (%q)", build, daemon)
	}
	dir := t.TempDir()
	local := func(s string) string {
		s = strings.ReplaceAll(s, "/tmp/", dir+"/")
		return strings.ReplaceAll(s, "bin/nats-server", filepath.Join(dir, "bin", "nats-server"))
	}
	if out, err := exec.Command("bash", "-c", local(build)).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", build, err, out)
	}
	// Record the servers' pids to stop them, whatever happens.
	pids := filepath.Join(dir, "pids")
	script := strings.ReplaceAll(local(loop), " &\n", " & echo $! >> "+pids+"\n")
	t.Cleanup(func() {
		b, _ := os.ReadFile(pids)
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
	if out, err := exec.Command("bash", "-c", script).CombinedOutput(); err != nil {
		t.Fatalf("the three-server loop: %v\n%s", err, out)
	}

	args := strings.Fields(daemon)[1:]
	nc, err := nats.Connect(args[1], nats.RetryOnFailedConnect(true), nats.MaxReconnects(-1))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	bin := buildDaemon(t)
	data := filepath.Join(dir, "data")
	p := startProc(t, bin, data, args...)
	td := &testDaemon{t: t, url: p.url}
	mustStatus(t, td.as("client", "POST", "/api/v1/tasks", `{"title":"a broker task"}`), 201)
	mustStatus(t, td.do("POST", "/v1/tasks", `{"input":"hello"}`), 201)
	p.kill(t)
	r := checkFanout(t, bin, data, args, js, "PEGASUS")
	t.Logf("docs/cluster.md's commands: %d events on the three servers' stream", r.Last)
}
