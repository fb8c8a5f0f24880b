package main

import (
	"bufio"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	cfgfile "github.com/pegasus-engine/pegasus/config"
)

// configDocs are the documents whose configuration files are checked.
var configDocs = []string{"../../docs/config.md", "../../docs/tools.md", "../../docs/limits.md", "../../README.md"}

// docBlock is a fenced block of a document: its language, text, and the
// file name a "<!-- config-file: NAME -->" line just before it gives it.
type docBlock struct {
	where, lang, name, text string
}

var configFileRE = regexp.MustCompile(`^<!-- config-file: (\S+) -->\s*$`)

// readDocBlocks returns the fenced blocks of a Markdown file.
func readDocBlocks(t *testing.T, file string) []docBlock {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []docBlock
	var cur *docBlock
	name := ""
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case cur == nil && strings.HasPrefix(line, "```"):
			cur = &docBlock{where: filepath.Base(file) + ":" + itoa(n), lang: strings.TrimPrefix(line, "```"), name: name}
			name = ""
		case cur != nil && strings.HasPrefix(line, "```"):
			out = append(out, *cur)
			cur = nil
		case cur != nil:
			cur.text += line + "\n"
		case configFileRE.MatchString(line):
			name = configFileRE.FindStringSubmatch(line)[1]
		case strings.TrimSpace(line) != "":
			name = ""
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func itoa(n int) string { return strconv.Itoa(n) }

// writeDocFiles writes the named blocks of file into dir and returns
// name -> path.
func writeDocFiles(t *testing.T, file, dir string) map[string]string {
	t.Helper()
	files := map[string]string{}
	for _, b := range readDocBlocks(t, file) {
		if b.name == "" {
			continue
		}
		p := filepath.Join(dir, b.name)
		if err := os.WriteFile(p, []byte(b.text), 0o644); err != nil {
			t.Fatal(err)
		}
		files[b.name] = p
	}
	return files
}

// TestConfigDocFiles: every YAML and JSON block of the documents is a
// valid configuration (a snippet alone, or a named file beside the
// others), except the files named bad*, which must be refused.
func TestConfigDocFiles(t *testing.T) {
	anyEnv := func(name string) string { return "value-of-" + name }
	n := 0
	for _, doc := range configDocs {
		dir := t.TempDir()
		writeDocFiles(t, doc, dir)
		for _, b := range readDocBlocks(t, doc) {
			if b.lang != "yaml" && b.lang != "json" {
				continue
			}
			n++
			p := filepath.Join(dir, b.name)
			if b.name == "" {
				p = filepath.Join(dir, "snippet."+b.lang)
				if err := os.WriteFile(p, []byte(b.text), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			_, err := cfgfile.Load(p, anyEnv)
			switch bad := strings.HasPrefix(b.name, "bad"); {
			case bad && err == nil:
				t.Errorf("%s: %s loads, but its name says it must not", b.where, b.name)
			case !bad && err != nil:
				t.Errorf("%s: %v", b.where, err)
			}
		}
	}
	if n == 0 {
		t.Fatal("no configuration in the documents")
	}
}
