package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"
)

// Errors of the fan-out.
var (
	// ErrInvalid is returned for bad options.
	ErrInvalid = errors.New("cluster: invalid options")
	// ErrForeignStream is returned (and the outbox stops) when the stream
	// holds an event beyond the log's head: it was filled from another
	// log, or from this one before a data loss, and publishing on would
	// skip or repeat events.
	ErrForeignStream = errors.New("cluster: the stream holds events this log does not")
)

// OutboxOptions configure an Outbox. The zero value of every field but
// URL is a usable default.
type OutboxOptions struct {
	// URL is the NATS server to publish to, or several, comma-separated
	// (nats://127.0.0.1:4222). Required.
	URL string
	// Stream is the JetStream stream the outbox publishes into, created
	// with Subjects if it does not exist (an existing stream is used as
	// it is). The outbox must be its only publisher. The default value is
	// "PEGASUS".
	Stream string
	// Replicas of the stream when the outbox creates it (3 on a cluster of
	// three servers). The default value is 1.
	Replicas int
	// Duplicates is the stream's de-duplication window by Nats-Msg-Id
	// when the outbox creates it. The default value is 2 minutes.
	Duplicates time.Duration
	// MaxPending is how many publishes may await JetStream's
	// acknowledgement at once. The default value is 256.
	MaxPending int
	// AckTimeout bounds the wait for one acknowledgement; after it the
	// outbox re-synchronises with the stream. The default value is 5s.
	AckTimeout time.Duration
	// CursorInterval is how often the cursor is stored in the log's aux
	// space (one synced write) while it moves; negative means after every
	// acknowledgement (tests). The default value is 1s.
	CursorInterval time.Duration
	// RetryInterval is the wait after a failure (server unreachable,
	// stream missing) before the outbox tries again. The default value is
	// 1s.
	RetryInterval time.Duration
	// CatchUp, if set, is called when the stream holds events beyond the
	// log's head, before they are taken for a foreign stream's: with
	// pegasusd --cluster the log is a node's copy, and the node that
	// published before may have been ahead of it (ReplicatedLog.CatchUp).
	// The default value is nil: the log is the truth.
	CatchUp func(context.Context) error
	// Logger receives the outbox's warnings. The default value discards
	// them.
	Logger *slog.Logger
}

// EnsureDefaults fills the zero fields with their defaults.
func (o *OutboxOptions) EnsureDefaults() {
	if o.Stream == "" {
		o.Stream = "PEGASUS"
	}
	if o.Replicas == 0 {
		o.Replicas = 1
	}
	if o.Duplicates == 0 {
		o.Duplicates = 2 * time.Minute
	}
	if o.MaxPending == 0 {
		o.MaxPending = 256
	}
	if o.AckTimeout == 0 {
		o.AckTimeout = 5 * time.Second
	}
	if o.CursorInterval == 0 {
		o.CursorInterval = time.Second
	}
	if o.RetryInterval == 0 {
		o.RetryInterval = time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
}

// Validate checks options after EnsureDefaults.
func (o *OutboxOptions) Validate() error {
	switch {
	case o.URL == "":
		return fmt.Errorf("%w: a NATS URL is required", ErrInvalid)
	case o.Replicas < 1 || o.Replicas > 5:
		return fmt.Errorf("%w: replicas %d (want 1 to 5)", ErrInvalid, o.Replicas)
	case o.MaxPending < 1:
		return fmt.Errorf("%w: max pending %d", ErrInvalid, o.MaxPending)
	case o.AckTimeout < 0 || o.RetryInterval < 0 || o.Duplicates < 0:
		return fmt.Errorf("%w: negative duration", ErrInvalid)
	}
	return ValidateStreamName(o.Stream)
}

// ValidateStreamName refuses a JetStream stream name JetStream would: one
// with '.', '*', '>', '/', '\\', whitespace or a control character.
func ValidateStreamName(name string) error {
	for _, c := range name {
		if c == '.' || c == '*' || c == '>' || c <= ' ' || c == '/' || c == '\\' {
			return fmt.Errorf("%w: stream name %q", ErrInvalid, name)
		}
	}
	return nil
}
