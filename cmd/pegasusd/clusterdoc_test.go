package main

import (
	"context"
	"github.com/pegasus-engine/pegasus/server"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

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
	var build, loop, daemon, verify string
	var clustered []string
	vars := map[string]string{} // NAME=value lines, expanded in the lines after them
	for _, block := range shBlocks(t, "../../docs/cluster.md") {
		for _, line := range strings.Split(block, "\n") {
			for k, v := range vars {
				line = strings.ReplaceAll(line, "$"+k, v)
			}
			if m := regexp.MustCompile(`^([A-Z]+)=(\S+)$`).FindStringSubmatch(line); m != nil {
				vars[m[1]] = m[2]
			}
			switch {
			case strings.HasPrefix(line, "go build -o bin/nats-server "):
				build = line
			case strings.HasPrefix(line, "pegasusd --publish ") && strings.Contains(line, "--publish-replicas 3"):
				daemon = line
			case strings.HasPrefix(line, "pegasusd --cluster "):
				clustered = append(clustered, line)
			case strings.HasPrefix(line, "pegasus-replay ") && strings.Contains(line, " --cluster ") && strings.HasSuffix(line, " verify"):
				verify = line
			}
		}
		if strings.HasPrefix(block, "for i in 1 2 3") {
			loop = block
		}
	}
	if build == "" || loop == "" || daemon == "" || len(clustered) != 2 || verify == "" {
		t.Fatalf("docs/cluster.md lacks the build line (%q), the three-server loop, the pegasusd --publish line (%q), "+
			"the two pegasusd --cluster lines (%q) or the pegasus-replay verify line (%q)", build, daemon, clustered, verify)
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
	clusterDocCommands(t, bin, js, local, clustered, verify)
}

// clusterDocCommands deletes the single daemon's fan-out stream (it holds
// another log's events on the fan-out's subjects), runs the document's two
// pegasusd --cluster --publish lines on the same servers, the first holding
// every partition before the second starts and giving half back to it
// (HTTP ports chosen free). It submits a task to the second, waits there
// until it finished, reads it from the first, waits until the fan-out
// published its completion, stops both, runs the document's pegasus-replay
// --cluster verify line on the first's copy and checks the fan-out's
// stream against the second's (cluster.VerifyFanout).
func clusterDocCommands(t *testing.T, bin string, js jetstream.JetStream, local func(string) string, lines []string, verify string) {
	t.Helper()
	if err := js.DeleteStream(context.Background(), "PEGASUS"); err != nil {
		t.Fatal(err)
	}
	var procs []*proc
	stream, lastData := "PEGASUS", ""
	for i, line := range lines {
		args := strings.Fields(local(line))[1:]
		for j := range args {
			switch {
			case j == 0:
			case args[j-1] == "--addr":
				args[j] = "127.0.0.1:0"
			case args[j-1] == "--publish-stream":
				stream = args[j]
			case args[j-1] == "--data-dir":
				lastData = args[j]
			}
		}
		p := startProc(t, bin, filepath.Join(t.TempDir(), "unused"), args...)
		procs = append(procs, p)
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("%s:\n%s", line, lastLines(p.output(), 40))
			}
		})
		if i == 0 {
			waitLeases(t, js, "n1", 16)
		}
	}
	if !strings.Contains(lines[0], "--publish ") {
		t.Fatalf("the pegasusd --cluster lines do not publish: %q", lines)
	}
	waitOwners(t, js, map[string]int{"n1": 8, "n2": 8})
	second := &testDaemon{t: t, url: procs[1].url}
	var c server.CreatedJSON
	r := second.do("POST", "/v1/tasks", `{"input":"hello"}`)
	mustStatus(t, r, 201)
	r.json(t, &c)
	client := &http.Client{Timeout: 70 * time.Second}
	for _, p := range []*proc{procs[1], procs[0]} {
		for {
			tj, code, err := waitTask(client, p.url, c.TaskID)
			if err != nil || code != 200 {
				t.Fatalf("task %s on %s: %d %v", c.TaskID, p.url, code, err)
			}
			if tj.State.IsTerminal() {
				break
			}
		}
	}
	completed := "pegasus.task." + c.TaskID + ".TASK_COMPLETED"
	if n := waitSubject(t, js, stream, completed); n != 1 {
		t.Fatalf("%d messages on %s", n, completed)
	}
	for _, p := range procs {
		p.stop(t)
	}
	replayBin := filepath.Join(t.TempDir(), "pegasus-replay")
	if out, err := exec.Command("go", "build", "-o", replayBin, "../pegasus-replay").CombinedOutput(); err != nil {
		t.Fatalf("go build pegasus-replay: %v\n%s", err, out)
	}
	out, err := exec.Command("bash", "-c", strings.Replace(local(verify), "pegasus-replay", replayBin, 1)).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "cluster: the copy is stream PEGASUS_LOG's messages to") {
		t.Fatalf("%s: %v\n%s", verify, err, out)
	}
	l, _, _ := verifyFanout(t, lastData, js, stream)
	l.Close()
}

// waitSubject waits until the stream holds a message on subj and returns
// how many it holds. It polls (a subprocess publishes).
func waitSubject(t *testing.T, js jetstream.JetStream, stream, subj string) int {
	t.Helper()
	deadline := time.Now().Add(testTimeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		st, err := js.Stream(ctx, stream)
		if err == nil {
			var info *jetstream.StreamInfo
			if info, err = st.Info(ctx, jetstream.WithSubjectFilter(subj)); err == nil && info.State.Subjects[subj] > 0 {
				cancel()
				return int(info.State.Subjects[subj])
			}
		}
		cancel()
		if time.Now().After(deadline) {
			t.Fatalf("no message on %s in stream %s within %v: %v", subj, stream, testTimeout, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
