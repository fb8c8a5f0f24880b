package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/pegasus-engine/pegasus/agent/llm"
)

// ErrModelProbe is returned by ProbeModel under strict when the model
// endpoint does not answer as an OpenAI-compatible API would. (Its text
// names the daemon, whose operators read it.)
var ErrModelProbe = errors.New("pegasusd: model endpoint check failed")

// ProbeModel checks the model endpoint of o once (GET {base}/models),
// so that a wrong PEGASUS_LLM_BASE_URL, key or model name shows at start
// rather than when the first task fails. A problem is a warning; with
// strict (--llm-strict) it is ErrModelProbe. An empty BaseURL (the
// offline model) needs no check.
func ProbeModel(ctx context.Context, o llm.Options, strict bool, logger *slog.Logger) error {
	_, err := CheckModel(ctx, o, llm.FlagHints, strict, logger)
	return err
}

// CheckModel is ProbeModel with its result (for Options.ModelProbe), and
// the hints of where the endpoint is configured (llm.FlagHints,
// ModelHints); nil for the offline model.
func CheckModel(ctx context.Context, o llm.Options, h llm.ProbeHints, strict bool, logger *slog.Logger) (*llm.ProbeResult, error) {
	if o.BaseURL == "" {
		return nil, nil
	}
	r := llm.Probe(ctx, o, h)
	if r.OK {
		logger.Info("model endpoint answers", "url", llm.RedactURL(o.BaseURL), "model", o.Model)
		return &r, nil
	}
	if strict {
		return &r, fmt.Errorf("%w: %s (drop --llm-strict to start anyway)", ErrModelProbe, r.Error)
	}
	logger.Warn("model endpoint check failed: tasks will fail until it is fixed", "problem", r.Error,
		"url", llm.RedactURL(o.BaseURL), "model", o.Model)
	return &r, nil
}
