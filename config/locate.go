package config

import (
	"errors"
	"fmt"
	"strings"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/token"
)

// locator knows the line of every key of the file, and the key of every
// token, so that a problem found after decoding still names its place.
type locator struct {
	lines map[string]int    // key path -> line
	keys  map[[2]int]string // token (line, column) -> key path
	docs  []int             // each document's first line
}

func locate(f *ast.File) *locator {
	l := &locator{lines: map[string]int{}, keys: map[[2]int]string{}}
	for _, d := range f.Docs {
		if d.Body != nil {
			l.docs = append(l.docs, line(d.Body.GetToken()))
			l.walk(d.Body, "")
		} else {
			l.docs = append(l.docs, 1)
		}
	}
	return l
}

func line(tk *token.Token) int {
	if tk == nil || tk.Position == nil {
		return 0
	}
	return tk.Position.Line
}

func (l *locator) mark(tk *token.Token, path string) {
	if tk == nil || tk.Position == nil {
		return
	}
	at := [2]int{tk.Position.Line, tk.Position.Column}
	if _, ok := l.keys[at]; !ok {
		l.keys[at] = path
	}
}

func (l *locator) walk(n ast.Node, path string) {
	switch n := n.(type) {
	case *ast.MappingNode:
		for _, v := range n.Values {
			l.walk(v, path)
		}
	case *ast.MappingValueNode:
		key := join(path, keyText(n.Key))
		if _, ok := l.lines[key]; !ok {
			l.lines[key] = line(n.Key.GetToken())
		}
		l.mark(n.Key.GetToken(), key)
		l.mark(n.Start, key)
		l.walk(n.Value, key)
	case *ast.SequenceNode:
		for i, v := range n.Values {
			item := fmt.Sprintf("%s[%d]", path, i)
			if v != nil {
				l.lines[item] = line(v.GetToken())
				l.walk(v, item)
			}
		}
	case *ast.AnchorNode:
		l.walk(n.Value, path)
	case *ast.TagNode:
		l.walk(n.Value, path)
	case nil:
	default:
		l.mark(n.GetToken(), path)
	}
}

func keyText(k ast.MapKeyNode) string {
	if s, ok := k.(*ast.StringNode); ok {
		return s.Value
	}
	return strings.Trim(k.String(), `"'`)
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// line is the line of key, or of its nearest parent in the file (a
// missing key is reported where its object is).
func (l *locator) line(key string) int {
	for key != "" {
		if n, ok := l.lines[key]; ok {
			return n
		}
		i := strings.LastIndexAny(key, ".[")
		if i < 0 {
			break
		}
		key = key[:i]
	}
	return 0
}

func (l *locator) docLine(i int) int {
	if i < len(l.docs) {
		return l.docs[i]
	}
	return 0
}

// decodeError turns the decoder's error into an *Error with the key.
func (l *locator) decodeError(path string, err error) error {
	var ye yaml.Error
	if !errors.As(err, &ye) || ye.GetToken() == nil {
		return &Error{File: path, Msg: err.Error()}
	}
	tk := ye.GetToken()
	key := l.keys[[2]int{tk.Position.Line, tk.Position.Column}]
	e := &Error{File: path, Line: tk.Position.Line, Key: key, Msg: ye.GetMessage()}
	var (
		unknown *yaml.UnknownFieldError
		typ     *yaml.TypeError
		dup     *yaml.DuplicateKeyError
		node    *yaml.UnexpectedNodeTypeError
	)
	switch {
	case errors.As(err, &unknown):
		e.Msg = "unknown key" + knownKeys(key)
	case errors.As(err, &typ):
		e.Msg = fmt.Sprintf("want %s, not %s", kindName(typ.DstType), kindName(typ.SrcType))
	case errors.As(err, &node):
		e.Msg = fmt.Sprintf("want %s, not %s", nodeName(node.Expected), nodeName(node.Actual))
	case errors.As(err, &dup):
		e.Msg = "the key appears twice"
	}
	return e
}

// knownKeys lists the keys the object of key may hold, for the message
// about an unknown one.
func knownKeys(key string) string {
	var known string
	switch depth := strings.Count(key, "."); {
	case depth == 0:
		known = "models, taskTypes, mcpServers, tools, schedules"
	case strings.HasPrefix(key, "models["):
		known = "name, baseUrl, model, apiKeyEnv, timeout, maxAttempts, concurrency, default, stream"
	case strings.HasPrefix(key, "taskTypes["):
		known = "name, description, systemPrompt, systemPromptFile, tools, model, fallback, maxIterations, reflection"
	case strings.HasPrefix(key, "mcpServers.") && depth == 2:
		known = "command, args, env, cwd (stdio), url, headers (Streamable HTTP), type, initTimeout"
	case strings.HasPrefix(key, "tools["):
		known = "name, description, parameters, capability, timeoutSeconds, maxRetries, heartbeatSeconds"
	case strings.HasPrefix(key, "schedules["):
		known = "name, cron, input, type, priority"
	default:
		return ""
	}
	return " (known: " + known + ")"
}

func nodeName(t ast.NodeType) string {
	switch t {
	case ast.MappingType, ast.MappingValueType:
		return "an object"
	case ast.SequenceType:
		return "a list"
	case ast.StringType:
		return "a string"
	case ast.IntegerType:
		return "a whole number"
	case ast.FloatType:
		return "a number"
	case ast.BoolType:
		return "true or false"
	case ast.NullType:
		return "null"
	}
	return "a " + t.String()
}
