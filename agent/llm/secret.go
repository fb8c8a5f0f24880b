package llm

import (
	"log/slog"
	"strings"
)

// Secret is a credential such as an API key. Its String, GoString, JSON
// and slog forms are all "[REDACTED]", so printing an Options value, logging
// it or writing it into an event body never leaks the key. Reveal returns
// the real value for the one place that needs it: the Authorization header.
type Secret string

const redacted = "[REDACTED]"

// Reveal returns the secret's value.
func (s Secret) Reveal() string { return string(s) }

// String implements fmt.Stringer.
func (s Secret) String() string {
	if s == "" {
		return ""
	}
	return redacted
}

// GoString implements fmt.GoStringer (the %#v verb).
func (s Secret) GoString() string { return `llm.Secret("` + s.String() + `")` }

// LogValue implements slog.LogValuer.
func (s Secret) LogValue() slog.Value { return slog.StringValue(s.String()) }

// MarshalText implements encoding.TextMarshaler, which encoding/json and
// msgpack's text fallback use.
func (s Secret) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// scrub removes the secret from text that is about to leave the client
// (error messages built from server responses may echo a request header).
func (s Secret) scrub(text string) string {
	if len(s) < 4 { // too short to scrub without mangling ordinary words
		return text
	}
	return strings.ReplaceAll(text, string(s), redacted)
}
