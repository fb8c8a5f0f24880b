package main

import (
	"errors"
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/pegasus-engine/pegasus/traces"
	"github.com/pegasus-engine/pegasus/traces/otlp"
)

// exportOTLPJSON is the --json output of export --otlp.
type exportOTLPJSON struct {
	Traces int `json:"traces"`
	Spans  int `json:"spans"`
}

// exportOTLP sends the traces of the root tasks named as arguments, or of
// every root task in the source, to the collector at --otlp.
func exportOTLP(c *cli.Context, std *stdio) error {
	for _, f := range []string{"task", "from", "to", "output", "force"} {
		if c.IsSet(f) {
			return usagef("--%s does not apply with --otlp (name the tasks as arguments)", f)
		}
	}
	g := readGlobals(c)
	src, err := openSource(c.Context, std, g)
	if err != nil {
		return err
	}
	defer src.Close()
	var ids []string
	for _, a := range c.Args().Slice() {
		id := parseTaskID(a)
		if err := checkTask(c.Context, src.reader, id); err != nil {
			return err
		}
		ids = append(ids, id)
	}
	collect := otlp.Collect
	if len(ids) == 0 {
		if ids, err = otlp.RootTasks(c.Context, src.reader); err != nil {
			return err
		}
		collect = otlp.CollectRoot // known to be roots
	}
	x, err := otlp.New(c.Context, otlp.Options{Endpoint: c.String("otlp"), ServiceName: c.String("otlp-service-name")})
	if err != nil {
		return usagef("--otlp: %v", err)
	}
	defer x.Shutdown(c.Context)
	opt := traces.Options{Contents: c.Bool("otlp-contents")}
	var out exportOTLPJSON
	for _, id := range ids {
		spans, err := collect(c.Context, src.reader, id, 0, false, opt)
		if errors.Is(err, otlp.ErrNotRoot) {
			return usagef("%s: %v", id, err)
		}
		if err != nil {
			return err
		}
		if err := x.Export(c.Context, spans); err != nil {
			return fmt.Errorf("exporting task %s: %w", id, err)
		}
		out.Traces++
		out.Spans += len(spans)
	}
	p := newPrinter(std, g)
	if p.json {
		return p.JSON(out)
	}
	p.Printf("exported %d traces (%d spans) from %s to %s\n", out.Traces, out.Spans, src.desc, c.String("otlp"))
	return nil
}
