package config

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"maps"
	"slices"
	"strings"

	"github.com/goccy/go-yaml"

	"github.com/pegasus-engine/pegasus/agent/llm"
)

// Redacted is what a literal credential is printed as.
const Redacted = "<redacted>"

// redactValue keeps a value made of ${NAME} references and text around
// them only when the name is not a credential's; a credential written
// literally becomes <redacted>.
func redactValue(name, v string) string {
	if !llm.SensitiveName(name) {
		return v
	}
	if strings.Contains(v, "${") {
		// "Bearer ${TOKEN}": the reference is what the file holds.
		return v
	}
	return Redacted
}

// redacted is the document with literal credentials replaced.
func (f *File) redacted() document {
	d := f.doc
	d.Models = slices.Clone(d.Models)
	for i := range d.Models {
		d.Models[i].BaseURL = llm.RedactURL(d.Models[i].BaseURL)
	}
	if d.MCPServers != nil {
		d.MCPServers = maps.Clone(d.MCPServers)
		for name, s := range d.MCPServers {
			s.URL = llm.RedactURL(s.URL)
			s.Env = redactMap(s.Env)
			s.Headers = redactMap(s.Headers)
			s.Args = slices.Clone(s.Args)
			for i, a := range s.Args {
				s.Args[i] = llm.RedactURL(a)
			}
			d.MCPServers[name] = s
		}
	}
	return d
}

func redactMap(m map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = redactValue(k, v)
	}
	return out
}

// Redacted returns the configuration as YAML, as the file gives it (with
// its ${NAME} references and apiKeyEnv names, never their values), with
// literal credentials replaced by <redacted>.
func (f *File) Redacted() ([]byte, error) {
	d := f.redacted()
	return yaml.MarshalWithOptions(d, yaml.IndentSequence(true), yaml.UseLiteralStyleIfMultiline(true))
}

// Hash is the hex SHA-256 of the effective configuration: the redacted
// document and the text of the system prompt files, so that an edited
// prompt file changes it. Secrets count as their references.
func (f *File) Hash() string {
	h := sha256.New()
	b, _ := json.Marshal(f.redacted()) // maps are sorted: a stable encoding
	h.Write(b)
	for _, name := range slices.Sorted(maps.Keys(f.prompts)) {
		h.Write([]byte("\x00" + name + "\x00" + f.prompts[name]))
	}
	return hex.EncodeToString(h.Sum(nil))
}

// DefaultModel returns the model marked default, or nil.
func (f *File) DefaultModel() *Model {
	for i := range f.Models {
		if f.Models[i].Default {
			return &f.Models[i]
		}
	}
	return nil
}
