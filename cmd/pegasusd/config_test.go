package main

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/pegasus-engine/pegasus/internal/daemontest"
)

const goodConfig = `# a configuration with a secret of each kind
models:
  - name: main
    baseUrl: http://127.0.0.1:1/v1
    model: small
    apiKeyEnv: CFG_TEST_KEY
    default: true
mcpServers:
  search:
    url: http://127.0.0.1:1/mcp
    headers: {Authorization: "Bearer ${CFG_TEST_TOKEN}"}
tools:
  - name: shout
    description: Upper-cases a text.
    parameters: {type: object, properties: {text: {type: string}}, required: [text]}
    capability: shout
taskTypes:
  - name: loud
    systemPrompt: You shout.
    tools: [shout, current_time]
    model: main
schedules:
  - {name: yearly, cron: "@yearly", input: happy new year, type: loud}
`

const badConfig = `mcpServers:
  everything:
    command: npx
    comand: npx
`

// configFiles writes the good and the bad configuration into a new
// directory.
func configFiles(t *testing.T) (good, bad string) {
	t.Helper()
	dir := t.TempDir()
	good, bad = filepath.Join(dir, "good.yaml"), filepath.Join(dir, "bad.yaml")
	for p, text := range map[string]string{good: goodConfig, bad: badConfig} {
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return good, bad
}

// secretEnv is the environment of the good configuration, its secrets
// canaries.
var secretEnv = []string{"CFG_TEST_KEY=sk-canary-key", "CFG_TEST_TOKEN=canary-token"}

// runBin runs the binary and returns its output and exit code.
func runBin(t *testing.T, env []string, bin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	var out, errOut strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatal(err)
	}
	return out.String(), errOut.String(), code
}

// TestConfigCheck: `pegasusd config check FILE` exits 0 and prints the
// configuration with its secrets as their references, or exits 2 with
// one line naming the file, the line and the key.
func TestConfigCheck(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the daemon")
	}
	bin := buildDaemon(t)
	good, bad := configFiles(t)

	out, errOut, code := runBin(t, secretEnv, bin, "config", "check", good)
	if code != exitOK || errOut != "" {
		t.Fatalf("good file: exit %d\n%s%s", code, out, errOut)
	}
	for _, want := range []string{"# " + good + " is valid; configuration hash sha256:", "apiKeyEnv: CFG_TEST_KEY",
		"Authorization: Bearer ${CFG_TEST_TOKEN}", "capability: shout"} {
		if !strings.Contains(out, want) {
			t.Errorf("the output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "canary") {
		t.Errorf("the output holds a secret:\n%s", out)
	}

	for _, c := range []struct {
		name string
		env  []string
		args []string
		want string
	}{
		{"unknown key", nil, []string{bad}, "pegasusd: " + bad + ":4: mcpServers.everything.comand: unknown key"},
		{"missing secret", nil, []string{good}, "pegasusd: " + good + ":6: models[0].apiKeyEnv: environment variable CFG_TEST_KEY is not set"},
		{"no file", nil, []string{filepath.Join(t.TempDir(), "none.yaml")}, "no such file"},
		{"no argument", []string{"PEGASUS_CONFIG="}, nil, "config check takes one FILE"},
		{"PEGASUS_CONFIG", []string{"PEGASUS_CONFIG=" + bad}, nil, bad + ":4: mcpServers.everything.comand"},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, errOut, code := runBin(t, c.env, bin, append([]string{"config", "check"}, c.args...)...)
			if code != exitUsage || out != "" || !strings.Contains(errOut, c.want) || strings.Count(errOut, "\n") != 1 {
				t.Errorf("exit %d, stdout %q, stderr %q; want exit 2 and one line with %q", code, out, errOut, c.want)
			}
		})
	}
}

// TestConfigRefusedAtStart: the daemon refuses a bad file with the
// message config check gives and exit 2, before it creates anything;
// --schedules-file cannot be combined with a file that has schedules.
func TestConfigRefusedAtStart(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the daemon")
	}
	bin := buildDaemon(t)
	good, bad := configFiles(t)
	data := filepath.Join(t.TempDir(), "data")
	schedules := filepath.Join(t.TempDir(), "schedules.json")
	if err := os.WriteFile(schedules, []byte(`{"schedules":[{"name":"s","cron":"@daily","input":"x"}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	_, check, _ := runBin(t, nil, bin, "config", "check", bad)
	for _, c := range []struct {
		name string
		env  []string
		args []string
		want string
	}{
		{"bad file", nil, []string{"--config", bad}, check},
		{"bad file in PEGASUS_CONFIG", []string{"PEGASUS_CONFIG=" + bad}, nil, check},
		{"missing secret", nil, []string{"--config", good}, "models[0].apiKeyEnv: environment variable CFG_TEST_KEY is not set"},
		{"schedules twice", secretEnv, []string{"--config", good, "--schedules-file", schedules}, "give the schedules in one place"},
	} {
		t.Run(c.name, func(t *testing.T) {
			args := append([]string{"serve", "--addr", "127.0.0.1:0", "--data-dir", data}, c.args...)
			out, errOut, code := runBin(t, c.env, bin, args...)
			if code != exitUsage || !strings.Contains(errOut, c.want) || out != "" {
				t.Errorf("exit %d, stderr %q; want exit 2 and %q", code, errOut, c.want)
			}
			if _, err := os.Stat(data); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the data directory was created: %v", err)
			}
		})
	}
}

var agentStartedRE = regexp.MustCompile(`agent started.* model="?([^" ]*)"? config=(\S*) head=`)

// TestConfigServe: a daemon started with a file records the
// configuration's hash (its start-up log, SYSTEM_STARTED's model) and
// never its secrets; without a file it starts as it always did;
// --schedules-file alone still works, with a deprecation warning.
func TestConfigServe(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the daemon")
	}
	bin := buildDaemon(t)
	good, _ := configFiles(t)
	for k, v := range map[string]string{"CFG_TEST_KEY": "sk-canary-key", "CFG_TEST_TOKEN": "canary-token"} {
		t.Setenv(k, v)
	}
	check, _, _ := runBin(t, nil, bin, "config", "check", good)
	hash := regexp.MustCompile(`hash sha256:([0-9a-f]{64})`).FindStringSubmatch(check)
	if hash == nil {
		t.Fatalf("no hash in %q", check)
	}

	d, err := daemontest.Start(bin, t.TempDir(), "", "--config", good)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Kill()
	logs := d.Logs()
	if !strings.Contains(logs, "configuration file="+good+" hash="+hash[1]) {
		t.Errorf("no configuration line with the hash:\n%s", logs)
	}
	if m := agentStartedRE.FindStringSubmatch(logs); m == nil || m[1] != "small" || m[2] != "sha256:"+hash[1] {
		t.Errorf("agent started: %v, want the model with the hash:\n%s", m, logs)
	}
	// No answer of the API holds a secret: the catalog, readiness, the
	// metrics, the events.
	for _, path := range []string{"/v1/tools", "/v1/models", "/v1/task-types", "/readyz", "/metrics", "/v1/events?limit=100"} {
		resp, err := http.Get(d.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusOK && path != "/readyz" {
			t.Errorf("GET %s: %d %s", path, resp.StatusCode, body)
		}
		if strings.Contains(string(body), "canary") {
			t.Errorf("GET %s holds a secret: %s", path, body)
		}
	}
	if err := d.Stop(); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(d.Logs(), "canary") {
		t.Errorf("the log holds a secret:\n%s", d.Logs())
	}
	// Nor does any file of the data directory (the event log's tables and
	// its write-ahead log, the checkpoints).
	err = filepath.WalkDir(d.DataDir, func(path string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		if err == nil && bytes.Contains(b, []byte("canary")) {
			t.Errorf("%s holds a secret", path)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}

	// A flag overrides the file's default model.
	d, err = daemontest.Start(bin, t.TempDir(), "", "--config", good, "--llm-model", "other")
	if err != nil {
		t.Fatal(err)
	}
	defer d.Kill()
	if m := agentStartedRE.FindStringSubmatch(d.Logs()); m == nil || m[1] != "other" || m[2] != "sha256:"+hash[1] {
		t.Errorf("agent started: %v, want the flag's model:\n%s", m, d.Logs())
	}
	if err := d.Stop(); err != nil {
		t.Fatal(err)
	}

	// Without a file: as before, no configuration, the flags' model.
	schedules := filepath.Join(t.TempDir(), "schedules.json")
	if err := os.WriteFile(schedules, []byte(`{"schedules":[{"name":"s","cron":"@daily","input":"x"}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	d, err = daemontest.Start(bin, t.TempDir(), "", "--schedules-file", schedules)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Kill()
	logs = d.Logs()
	if m := agentStartedRE.FindStringSubmatch(logs); m == nil || m[1] != "pegasus-offline-demo" {
		t.Errorf("agent started: %v, want the offline model alone:\n%s", m, logs)
	}
	if strings.Contains(logs, "configuration") && !strings.Contains(logs, "--schedules-file (PEGASUS_SCHEDULES_FILE) is deprecated") {
		t.Errorf("a configuration without a file:\n%s", logs)
	}
	if !strings.Contains(logs, "level=WARN msg=\"--schedules-file (PEGASUS_SCHEDULES_FILE) is deprecated") {
		t.Errorf("no deprecation warning:\n%s", logs)
	}
	if err := d.Stop(); err != nil {
		t.Fatal(err)
	}
}
