package main

import (
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/pegasus-engine/pegasus/engine"
	"github.com/pegasus-engine/pegasus/traces/otlp"
)

// tracesFlags are serve's flags of the live trace export (docs/tracing.md).
func tracesFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "otlp-endpoint", EnvVars: []string{"PEGASUS_OTLP_ENDPOINT"},
			Usage: "send each root task's trace to the OTLP/HTTP collector at this base `URL` (http://127.0.0.1:4318) when it ends; " +
				"without it, OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT turn the export on (docs/tracing.md)"},
		&cli.StringFlag{Name: "otlp-service-name", EnvVars: []string{"PEGASUS_OTLP_SERVICE_NAME"},
			Usage: "the service.name of the exported traces (default: OTEL_SERVICE_NAME, else pegasus)"},
		&cli.DurationFlag{Name: "otlp-open-interval", Value: 30 * time.Second, EnvVars: []string{"PEGASUS_OTLP_OPEN_INTERVAL"},
			Usage: "how often the finished spans of root tasks still running are sent; 0: only at their end"},
		&cli.BoolFlag{Name: "otlp-contents", EnvVars: []string{"PEGASUS_OTLP_CONTENTS"},
			Usage: "export prompt and completion contents and tool arguments and results (off: the GenAI conventions advise against it)"},
	}
}

func tracesConfigFrom(cc *cli.Context) (engine.TracesOptions, error) {
	o := engine.TracesOptions{OTLP: otlp.Options{Endpoint: cc.String("otlp-endpoint"), ServiceName: cc.String("otlp-service-name")},
		OpenInterval: cc.Duration("otlp-open-interval")}
	o.Mapping.Contents = cc.Bool("otlp-contents")
	switch {
	case o.OpenInterval < 0:
		return o, errors.New("--otlp-open-interval must not be negative")
	case o.OpenInterval == 0:
		o.OpenInterval = -1
	}
	if ep := o.OTLP.Endpoint; ep != "" {
		u, err := url.Parse(ep)
		if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
			return o, fmt.Errorf("--otlp-endpoint %q: want an http:// or https:// URL such as http://127.0.0.1:4318", ep)
		}
	}
	o.Enabled = o.OTLP.Configured()
	return o, nil
}
