package server

import (
	"errors"
	"io"
	"log/slog"
)

// Options configures a Server. The zero value, after EnsureDefaults,
// serves without a token, on the daemon's defaults.
type Options struct {
	// Token is the bearer token every route but /healthz and /readyz
	// requires. The default value is "": no token (listen on loopback
	// only).
	Token string
	// AdminToken is the bearer token of the broker's admin routes
	// (/api/v1/stats, agents, drain, dlq). The default value is "": the
	// admin routes answer only with OpenAdmin.
	AdminToken string
	// AgentToken is the bearer token the broker's worker routes require
	// (register, poll, progress, complete, fail). The default value is "":
	// not required.
	AgentToken string
	// OpenAdmin opens the admin routes without a token when AdminToken is
	// empty; pegasusd sets it when it listens on loopback. The default
	// value is false: without AdminToken the admin routes refuse.
	OpenAdmin bool
	// MaxBodyBytes is the largest request body accepted. The default value
	// is 1 MiB.
	MaxBodyBytes int64
	// CheckpointDir is where POST /v1/admin/checkpoint writes copies of
	// the log. The default value is "pegasus-data-checkpoints", beside
	// pegasusd's default data directory.
	CheckpointDir string
	// NoMetricsRoute leaves /metrics out of the handler, when it is served
	// on a listener of its own (pegasusd --metrics-addr). The default
	// value is false: /metrics is served, behind the token.
	NoMetricsRoute bool
	// Logger receives the request log and handler errors. The default
	// value is a logger that discards everything.
	Logger *slog.Logger
}

// EnsureDefaults fills the unset fields with their defaults.
func (o *Options) EnsureDefaults() {
	if o.MaxBodyBytes == 0 {
		o.MaxBodyBytes = 1 << 20
	}
	if o.CheckpointDir == "" {
		o.CheckpointDir = "pegasus-data-checkpoints"
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
}

// Validate reports options no request could live with.
func (o *Options) Validate() error {
	if o.MaxBodyBytes < 1024 {
		return errors.New("server: MaxBodyBytes must be at least 1024")
	}
	return nil
}
