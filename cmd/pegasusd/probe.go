package main

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
)

// errModelProbe is returned by start under --llm-strict when the model
// endpoint does not answer as an OpenAI-compatible API would.
var errModelProbe = errors.New("pegasusd: model endpoint check failed")

// probeTimeout bounds the start-up check of the model endpoint.
const probeTimeout = 10 * time.Second

// probeModel checks the model endpoint once at start (GET {base}/models),
// so that a wrong PEGASUS_LLM_BASE_URL, key or model name shows now rather
// than when the first task fails. A problem is a warning; under
// --llm-strict it stops the start. The offline model needs no check.
func probeModel(ctx context.Context, cfg *config, logger *slog.Logger) error {
	if cfg.llmBaseURL == "" {
		return nil
	}
	problem := checkModelEndpoint(ctx, cfg)
	if problem == "" {
		logger.Info("model endpoint answers", "url", cfg.llmBaseURL, "model", cfg.llmModel)
		return nil
	}
	if cfg.llmStrict {
		return fmt.Errorf("%w: %s (drop --llm-strict to start anyway)", errModelProbe, problem)
	}
	logger.Warn("model endpoint check failed: tasks will fail until it is fixed", "problem", problem,
		"url", cfg.llmBaseURL, "model", cfg.llmModel)
	return nil
}

// checkModelEndpoint returns what is wrong with the model endpoint, in
// the operator's terms, or "".
func checkModelEndpoint(ctx context.Context, cfg *config) string {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	u := strings.TrimRight(cfg.llmBaseURL, "/") + "/models"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return fmt.Sprintf("--llm-base-url %q is not a URL: %v", cfg.llmBaseURL, err)
	}
	if cfg.llmKey != "" {
		req.Header.Set("Authorization", "Bearer "+string(cfg.llmKey))
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
		if m.ID == cfg.llmModel {
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
	return fmt.Sprintf("the server does not list model %q (PEGASUS_LLM_MODEL); it lists %s", cfg.llmModel, strings.Join(names, ", "))
}
