package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/pegasus-engine/pegasus/agent/llm"
)

// ErrModelProbe is returned by ProbeModel under strict when the model
// endpoint does not answer as an OpenAI-compatible API would. (Its text
// names the daemon, whose operators read it.)
var ErrModelProbe = errors.New("pegasusd: model endpoint check failed")

// probeTimeout bounds the start-up check of the model endpoint.
const probeTimeout = 10 * time.Second

// ProbeModel checks the model endpoint of o once (GET {base}/models),
// so that a wrong PEGASUS_LLM_BASE_URL, key or model name shows at start
// rather than when the first task fails. A problem is a warning; with
// strict (--llm-strict) it is ErrModelProbe. An empty BaseURL (the
// offline model) needs no check.
func ProbeModel(ctx context.Context, o llm.Options, strict bool, logger *slog.Logger) error {
	if o.BaseURL == "" {
		return nil
	}
	problem := checkModelEndpoint(ctx, o)
	if problem == "" {
		logger.Info("model endpoint answers", "url", o.BaseURL, "model", o.Model)
		return nil
	}
	if strict {
		return fmt.Errorf("%w: %s (drop --llm-strict to start anyway)", ErrModelProbe, problem)
	}
	logger.Warn("model endpoint check failed: tasks will fail until it is fixed", "problem", problem,
		"url", o.BaseURL, "model", o.Model)
	return nil
}

// checkModelEndpoint returns what is wrong with the model endpoint, in
// the operator's terms, or "".
func checkModelEndpoint(ctx context.Context, o llm.Options) string {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	u := strings.TrimRight(o.BaseURL, "/") + "/models"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return fmt.Sprintf("--llm-base-url %q is not a URL: %v", o.BaseURL, err)
	}
	if o.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+string(o.APIKey))
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Sprintf("GET %s: %v (is the model server running, and is PEGASUS_LLM_BASE_URL right?)", u, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	switch {
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		return fmt.Sprintf("GET %s answered %s: check PEGASUS_LLM_API_KEY", u, resp.Status)
	case resp.StatusCode == http.StatusNotFound:
		return fmt.Sprintf("GET %s answered %s: PEGASUS_LLM_BASE_URL should be the API root, usually ending in /v1", u, resp.Status)
	case resp.StatusCode/100 != 2:
		return fmt.Sprintf("GET %s answered %s", u, resp.Status)
	}
	var list struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &list); err != nil {
		return fmt.Sprintf("GET %s did not answer a model list (not an OpenAI-compatible API?)", u)
	}
	if len(list.Data) == 0 {
		return "" // some servers list nothing; the first call will tell
	}
	for _, m := range list.Data {
		if m.ID == o.Model {
			return ""
		}
	}
	names := make([]string, 0, 5)
	for i, m := range list.Data {
		if i == 5 {
			names = append(names, "...")
			break
		}
		names = append(names, m.ID)
	}
	return fmt.Sprintf("the server does not list model %q (PEGASUS_LLM_MODEL); it lists %s", o.Model, strings.Join(names, ", "))
}
