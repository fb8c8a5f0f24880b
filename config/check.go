package config

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/pegasus-engine/pegasus/agent/llm"
	"github.com/pegasus-engine/pegasus/agent/tools"
)

// BuiltinTools are the tools every daemon has; a configured tool may not
// take their names. ask_user is offered to every task type and cannot be
// listed.
var BuiltinTools = []string{tools.MemoryList, tools.MemoryRead, tools.MemoryWrite, tools.MemoryPatch, tools.MemoryAppend,
	tools.Notify, tools.CurrentTime}

// AskUser is the pseudo-tool offered to every task type.
const AskUser = "ask_user"

// BuiltinTaskTypes are the task types a configuration may override.
var BuiltinTaskTypes = []string{"general", "explore", "plan"}

// DefaultModelName is the name of the --llm-* flags' model (or the
// offline one) when no model of the file is the default.
const DefaultModelName = "default"

// MCPSeparator joins an MCP server's name and its tool's: "everything__echo".
const MCPSeparator = "__"

var (
	nameRE     = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)
	toolRE     = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`) // OpenAI's rule for function names
	serverRE   = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,31}$`)
	envNameRE  = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	cronParser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)
)

// checker converts the decoded document into a File, checking as it goes;
// the first problem ends it.
type checker struct {
	path   string
	loc    *locator
	getenv func(string) string
}

func (c *checker) errorf(key, format string, args ...any) *Error {
	return &Error{File: c.path, Line: c.loc.line(key), Key: key, Msg: fmt.Sprintf(format, args...)}
}

// expand replaces ${NAME} in s with the variable's value; $${ is a
// literal ${.
func (c *checker) expand(key, s string) (string, error) {
	if !strings.Contains(s, "${") {
		return s, nil
	}
	var b strings.Builder
	for {
		i := strings.Index(s, "${")
		if i < 0 {
			b.WriteString(s)
			return b.String(), nil
		}
		if i > 0 && s[i-1] == '$' {
			b.WriteString(s[:i-1] + "${")
			s = s[i+2:]
			continue
		}
		end := strings.IndexByte(s[i:], '}')
		if end < 0 {
			return "", c.errorf(key, "%q: ${ without its closing } (write $${ for a literal ${)", s)
		}
		name := s[i+2 : i+end]
		if !envNameRE.MatchString(name) {
			return "", c.errorf(key, "${%s}: not a variable name", name)
		}
		v := c.getenv(name)
		if v == "" {
			return "", c.errorf(key, "environment variable %s is not set", name)
		}
		b.WriteString(s[:i] + v)
		s = s[i+end+1:]
	}
}

func (c *checker) expandAll(key string, ss []string) ([]string, error) {
	if ss == nil {
		return nil, nil
	}
	out := make([]string, len(ss))
	for i, s := range ss {
		v, err := c.expand(fmt.Sprintf("%s[%d]", key, i), s)
		if err != nil {
			return nil, err
		}
		out[i] = v
	}
	return out, nil
}

func (c *checker) expandMap(key string, m map[string]string) (map[string]string, error) {
	if m == nil {
		return nil, nil
	}
	out := make(map[string]string, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		v, err := c.expand(key+"."+k, m[k])
		if err != nil {
			return nil, err
		}
		out[k] = v
	}
	return out, nil
}

// strs expands each of the fields named by keys under prefix, in order.
func (c *checker) strs(prefix string, fields map[string]*string) error {
	for _, k := range slices.Sorted(maps.Keys(fields)) {
		v, err := c.expand(join(prefix, k), *fields[k])
		if err != nil {
			return err
		}
		*fields[k] = v
	}
	return nil
}

func (c *checker) build(f *File) error {
	d := f.doc
	steps := []func() error{
		func() error { return c.models(f, d.Models) },
		func() error { return c.servers(f, d.MCPServers) },
		func() error { return c.tools(f, d.Tools) },
		func() error { return c.taskTypes(f, d.TaskTypes) },
		func() error { return c.schedules(f, d.Schedules) },
		func() error { return c.limits(f, d.Limits) },
	}
	for _, step := range steps {
		if err := step(); err != nil {
			return err
		}
	}
	return nil
}

func (c *checker) models(f *File, ms []rawModel) error {
	seen := map[string]bool{}
	def := ""
	for i, r := range ms {
		key := fmt.Sprintf("models[%d]", i)
		if err := c.strs(key, map[string]*string{"name": &r.Name, "baseUrl": &r.BaseURL, "model": &r.Model, "timeout": &r.Timeout}); err != nil {
			return err
		}
		m := Model{Name: r.Name, BaseURL: r.BaseURL, Model: r.Model, APIKeyEnv: r.APIKeyEnv, MaxAttempts: r.MaxAttempts,
			Concurrency: r.Concurrency, Default: r.Default, NoStream: r.Stream != nil && !*r.Stream}
		switch {
		case !nameRE.MatchString(m.Name):
			return c.errorf(key+".name", "%q: a model's name is letters, digits, '_', '.', '-' (at most 64)", m.Name)
		case seen[m.Name]:
			return c.errorf(key+".name", "two models are named %q", m.Name)
		case m.Name == DefaultModelName && !m.Default:
			return c.errorf(key+".name", "%q names the --llm-* flags' model when no model is the default: give this one another name, or default: true", m.Name)
		case m.BaseURL == "":
			return c.errorf(key+".baseUrl", "model %q has no baseUrl (the API root, for example https://api.openai.com/v1)", m.Name)
		case m.Model == "":
			return c.errorf(key+".model", "model %q has no model (the name the server knows it by)", m.Name)
		case m.MaxAttempts < 0 || m.MaxAttempts > 100:
			return c.errorf(key+".maxAttempts", "%d: want 1 to 100 (0: the default, 4)", m.MaxAttempts)
		case m.Concurrency < 0 || m.Concurrency > 100000:
			return c.errorf(key+".concurrency", "%d: want 1 to 100000 (0: the daemon's --max-concurrent-llm)", m.Concurrency)
		case m.Default && def != "":
			return c.errorf(key+".default", "models %q and %q are both the default", def, m.Name)
		}
		seen[m.Name] = true
		if m.Default {
			def = m.Name
		}
		if err := checkURL(m.BaseURL); err != nil {
			return c.errorf(key+".baseUrl", "%v", err)
		}
		if r.Timeout != "" {
			t, err := time.ParseDuration(r.Timeout)
			if err != nil || t <= 0 {
				return c.errorf(key+".timeout", "%q: want a positive duration such as 30s or 2m", r.Timeout)
			}
			m.Timeout = t
		}
		if m.APIKeyEnv != "" {
			if !envNameRE.MatchString(m.APIKeyEnv) {
				return c.errorf(key+".apiKeyEnv", "%q: want the name of an environment variable, not the key itself", m.APIKeyEnv)
			}
			v := c.getenv(m.APIKeyEnv)
			if v == "" {
				return c.errorf(key+".apiKeyEnv", "environment variable %s is not set", m.APIKeyEnv)
			}
			m.APIKey = llm.Secret(v)
		}
		f.Models = append(f.Models, m)
	}
	return nil
}

func checkURL(s string) error {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("%q: want an http:// or https:// URL", llm.RedactURL(s))
	}
	return nil
}

func (c *checker) servers(f *File, ss map[string]rawServer) error {
	names := slices.SortedFunc(maps.Keys(ss), func(a, b string) int {
		return c.loc.line("mcpServers."+a) - c.loc.line("mcpServers."+b)
	})
	for _, name := range names {
		r, key := ss[name], "mcpServers."+name
		switch {
		case !serverRE.MatchString(name) || strings.Contains(name, MCPSeparator):
			return c.errorf(key, "%q: a server's name is letters, digits, '_' and '-' (at most 32, no %q): it prefixes its tools' names", name, MCPSeparator)
		case r.Command == "" && r.URL == "":
			return c.errorf(key, "server %q has neither command (stdio) nor url (Streamable HTTP)", name)
		case r.Command != "" && r.URL != "":
			return c.errorf(key+".url", "server %q has both command and url: give one", name)
		case r.URL != "" && (len(r.Args) > 0 || len(r.Env) > 0 || r.Cwd != ""):
			return c.errorf(key+".url", "server %q has a url: args, env and cwd are for a command", name)
		case r.Command != "" && len(r.Headers) > 0:
			return c.errorf(key+".headers", "server %q has a command: headers are for a url", name)
		}
		switch strings.ToLower(r.Type) {
		case "":
		case "stdio":
			if r.Command == "" {
				return c.errorf(key+".type", "server %q: type stdio needs a command", name)
			}
		case "http", "streamablehttp", "streamable-http":
			if r.URL == "" {
				return c.errorf(key+".type", "server %q: type %s needs a url", name, r.Type)
			}
		case "sse":
			return c.errorf(key+".type", "server %q: the SSE transport is not supported: use the server's Streamable HTTP endpoint", name)
		default:
			return c.errorf(key+".type", "%q: want stdio or http", r.Type)
		}
		s := MCPServer{Name: name}
		var err error
		if s.Command, err = c.expand(key+".command", r.Command); err != nil {
			return err
		}
		if s.Args, err = c.expandAll(key+".args", r.Args); err != nil {
			return err
		}
		for k := range r.Env {
			if !envNameRE.MatchString(k) {
				return c.errorf(key+".env."+k, "%q: not a variable name", k)
			}
		}
		if s.Env, err = c.expandMap(key+".env", r.Env); err != nil {
			return err
		}
		if s.Cwd, err = c.expand(key+".cwd", r.Cwd); err != nil {
			return err
		}
		if s.Cwd != "" && !filepath.IsAbs(s.Cwd) {
			s.Cwd = filepath.Join(filepath.Dir(c.path), s.Cwd)
		}
		if s.URL, err = c.expand(key+".url", r.URL); err != nil {
			return err
		}
		if s.URL != "" {
			if err := checkURL(s.URL); err != nil {
				return c.errorf(key+".url", "%v", err)
			}
		}
		if s.Headers, err = c.expandMap(key+".headers", r.Headers); err != nil {
			return err
		}
		if r.InitTimeout != "" {
			d, err := time.ParseDuration(r.InitTimeout)
			if err != nil || d <= 0 {
				return c.errorf(key+".initTimeout", "%q: want a positive duration such as 10s or 2m", r.InitTimeout)
			}
			s.InitTimeout = d
		}
		f.MCPServers = append(f.MCPServers, s)
	}
	return nil
}

// mcpPrefixed reports whether name is, or may only be, an MCP server's
// tool: it begins with a declared server's prefix.
func mcpPrefixed(f *File, name string) (string, bool) {
	for _, s := range f.MCPServers {
		if strings.HasPrefix(name, s.Name+MCPSeparator) {
			return s.Name, true
		}
	}
	return "", false
}

func (c *checker) tools(f *File, ts []rawTool) error {
	seen := map[string]bool{}
	for i, r := range ts {
		key := fmt.Sprintf("tools[%d]", i)
		if err := c.strs(key, map[string]*string{"name": &r.Name, "description": &r.Description, "capability": &r.Capability}); err != nil {
			return err
		}
		t := Tool{Name: r.Name, Description: r.Description, Capability: r.Capability,
			TimeoutSeconds: r.TimeoutSeconds, MaxRetries: r.MaxRetries, HeartbeatSeconds: r.HeartbeatSeconds}
		switch {
		case !toolRE.MatchString(t.Name):
			return c.errorf(key+".name", "%q: a tool's name is letters, digits, '_' and '-' (at most 64)", t.Name)
		case slices.Contains(BuiltinTools, t.Name) || t.Name == AskUser:
			return c.errorf(key+".name", "%q is a built-in tool's name", t.Name)
		case strings.Contains(t.Name, MCPSeparator):
			if s, ok := mcpPrefixed(f, t.Name); ok {
				return c.errorf(key+".name", "%q would clash with the tools of MCP server %q", t.Name, s)
			}
			return c.errorf(key+".name", "%q: %q is reserved for MCP servers' tools (<server>%s<tool>)", t.Name, MCPSeparator, MCPSeparator)
		case seen[t.Name]:
			return c.errorf(key+".name", "two tools are named %q", t.Name)
		case t.Capability == "":
			return c.errorf(key+".capability", "tool %q has no capability (the broker capability of the workers that run it)", t.Name)
		case !nameRE.MatchString(t.Capability):
			return c.errorf(key+".capability", "%q: a capability is letters, digits, '_', '.', '-' (at most 64)", t.Capability)
		case t.TimeoutSeconds < 0:
			return c.errorf(key+".timeoutSeconds", "%d: must not be negative", t.TimeoutSeconds)
		case t.MaxRetries < 0:
			return c.errorf(key+".maxRetries", "%d: must not be negative", t.MaxRetries)
		case t.HeartbeatSeconds < 0:
			return c.errorf(key+".heartbeatSeconds", "%d: must not be negative", t.HeartbeatSeconds)
		}
		seen[t.Name] = true
		params, err := objectSchema(r.Parameters)
		if err != nil {
			return c.errorf(key+".parameters", "%v", err)
		}
		t.Parameters = params
		f.Tools = append(f.Tools, t)
	}
	return nil
}

// objectSchema checks that v is a JSON Schema of an object and returns it
// as JSON; nil is an object without properties.
func objectSchema(v any) (json.RawMessage, error) {
	if v == nil {
		return json.RawMessage(`{"type":"object","properties":{}}`), nil
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("want a JSON Schema object such as {type: object, properties: {...}}")
	}
	if m["type"] != "object" {
		return nil, fmt.Errorf("want a JSON Schema of type object (the arguments are an object), not type %v", m["type"])
	}
	if p, ok := m["properties"]; ok {
		if _, ok := p.(map[string]any); !ok {
			return nil, fmt.Errorf("properties: want an object of the arguments' schemas")
		}
	}
	b, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("not expressible as JSON: %v", err)
	}
	return b, nil
}

func (c *checker) taskTypes(f *File, ts []rawTaskType) error {
	seen := map[string]bool{}
	models := map[string]bool{}
	for _, m := range f.Models {
		models[m.Name] = true
	}
	for i, r := range ts {
		key := fmt.Sprintf("taskTypes[%d]", i)
		if err := c.strs(key, map[string]*string{"name": &r.Name, "description": &r.Description, "systemPrompt": &r.SystemPrompt,
			"systemPromptFile": &r.SystemPromptFile, "model": &r.Model}); err != nil {
			return err
		}
		t := TaskType{Name: r.Name, Description: r.Description, SystemPrompt: r.SystemPrompt, SystemPromptFile: r.SystemPromptFile,
			Model: r.Model, MaxIterations: r.MaxIterations, Reflection: r.Reflection}
		var err error
		if t.Tools, err = c.expandAll(key+".tools", r.Tools); err != nil {
			return err
		}
		if t.Fallback, err = c.expandAll(key+".fallback", r.Fallback); err != nil {
			return err
		}
		switch {
		case !nameRE.MatchString(t.Name):
			return c.errorf(key+".name", "%q: a task type's name is letters, digits, '_', '.', '-' (at most 64)", t.Name)
		case seen[t.Name]:
			return c.errorf(key+".name", "two task types are named %q", t.Name)
		case t.SystemPrompt != "" && t.SystemPromptFile != "":
			return c.errorf(key+".systemPromptFile", "task type %q has both systemPrompt and systemPromptFile: give one", t.Name)
		case t.SystemPrompt == "" && t.SystemPromptFile == "":
			return c.errorf(key, "task type %q has no systemPrompt (or systemPromptFile)", t.Name)
		case t.Model != "" && !models[t.Model]:
			return c.errorf(key+".model", "task type %q names model %q, which models does not declare%s", t.Name, t.Model, known(models))
		case t.MaxIterations < 0 || t.MaxIterations > 1000:
			return c.errorf(key+".maxIterations", "%d: want 1 to 1000 (0: the daemon's --max-iterations)", t.MaxIterations)
		}
		seen[t.Name] = true
		for j, m := range t.Fallback {
			switch {
			case !models[m]:
				return c.errorf(fmt.Sprintf("%s.fallback[%d]", key, j), "task type %q names model %q, which models does not declare%s", t.Name, m, known(models))
			case m == t.Model || slices.Index(t.Fallback, m) < j:
				return c.errorf(fmt.Sprintf("%s.fallback[%d]", key, j), "model %q is already tried before", m)
			}
		}
		for j, name := range t.Tools {
			if err := c.toolRef(f, name); err != "" {
				return c.errorf(fmt.Sprintf("%s.tools[%d]", key, j), "task type %q: %s", t.Name, err)
			}
		}
		if t.SystemPromptFile != "" {
			p := t.SystemPromptFile
			if !filepath.IsAbs(p) {
				p = filepath.Join(filepath.Dir(c.path), p)
			}
			b, err := os.ReadFile(p)
			if err != nil {
				return c.errorf(key+".systemPromptFile", "%v", err)
			}
			if strings.TrimSpace(string(b)) == "" {
				return c.errorf(key+".systemPromptFile", "%s is empty", p)
			}
			t.SystemPrompt = string(b)
			f.prompts[t.Name] = t.SystemPrompt
		}
		f.TaskTypes = append(f.TaskTypes, t)
	}
	return nil
}

func known(set map[string]bool) string {
	if len(set) == 0 {
		return " (it declares none)"
	}
	return " (it declares " + strings.Join(slices.Sorted(maps.Keys(set)), ", ") + ")"
}

// toolRef says what is wrong with a task type's tool name or glob, or "".
func (c *checker) toolRef(f *File, name string) string {
	if name == AskUser {
		return AskUser + " is offered to every task type and is not listed"
	}
	names := append([]string(nil), BuiltinTools...)
	for _, t := range f.Tools {
		names = append(names, t.Name)
	}
	if !strings.ContainsAny(name, `*?[\`) {
		if slices.Contains(names, name) {
			return ""
		}
		if _, ok := mcpPrefixed(f, name); ok {
			return "" // an MCP server's tool: known once the server answers
		}
		return fmt.Sprintf("unknown tool %q (not built-in, not in tools, no MCP server prefix %s)", name, serverPrefixes(f))
	}
	if _, err := path.Match(name, ""); err != nil {
		return fmt.Sprintf("%q: not a valid glob: %v", name, err)
	}
	for _, n := range names {
		if ok, _ := path.Match(name, n); ok {
			return ""
		}
	}
	lit := name[:strings.IndexAny(name, `*?[\`)]
	for _, s := range f.MCPServers {
		p := s.Name + MCPSeparator
		if strings.HasPrefix(p, lit) || strings.HasPrefix(lit, p) {
			return ""
		}
	}
	return fmt.Sprintf("the glob %q matches no tool (not built-in, not in tools, no MCP server prefix %s)", name, serverPrefixes(f))
}

func serverPrefixes(f *File) string {
	if len(f.MCPServers) == 0 {
		return "as no mcpServers are declared"
	}
	ps := make([]string, len(f.MCPServers))
	for i, s := range f.MCPServers {
		ps[i] = s.Name + MCPSeparator
	}
	return "among " + strings.Join(ps, ", ")
}

func (c *checker) schedules(f *File, ss []rawSchedule) error {
	types := taskTypeNames(f)
	seen := map[string]bool{}
	for i, r := range ss {
		key := fmt.Sprintf("schedules[%d]", i)
		if err := c.strs(key, map[string]*string{"name": &r.Name, "cron": &r.Cron, "input": &r.Input, "type": &r.Type, "concurrencyKey": &r.ConcurrencyKey}); err != nil {
			return err
		}
		switch {
		case !nameRE.MatchString(r.Name):
			return c.errorf(key+".name", "%q: a schedule's name is letters, digits, '_', '.', '-' (at most 64)", r.Name)
		case seen[r.Name]:
			return c.errorf(key+".name", "two schedules are named %q", r.Name)
		case r.Type != "" && !types[r.Type]:
			return c.errorf(key+".type", "unknown task type %q%s", r.Type, knownTypes(types))
		case !keyOK(r.ConcurrencyKey):
			return c.errorf(key+".concurrencyKey", "%q: %s", r.ConcurrencyKey, keyRule)
		}
		if _, err := cronParser.Parse(r.Cron); err != nil {
			return c.errorf(key+".cron", "%q: %v", r.Cron, err)
		}
		seen[r.Name] = true
		f.Schedules = append(f.Schedules, Schedule(r))
	}
	return nil
}

// taskTypeNames are the names of f's task types, the built-in ones
// included.
func taskTypeNames(f *File) map[string]bool {
	types := map[string]bool{}
	for _, t := range BuiltinTaskTypes {
		types[t] = true
	}
	for _, t := range f.TaskTypes {
		types[t.Name] = true
	}
	return types
}

func knownTypes(types map[string]bool) string {
	return " (known: " + strings.Join(slices.Sorted(maps.Keys(types)), ", ") + ")"
}
