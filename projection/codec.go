package projection

import (
	"errors"
	"fmt"

	"github.com/pegasus-engine/pegasus/internal/codec"
)

// ErrMalformed is returned by the Decode functions of this package for bytes
// that are not a valid encoding. They never panic, whatever the bytes.
var ErrMalformed = errors.New("projection: malformed encoding")

// marshal is the canonical encoding of every persisted read model and of the
// memory and system event bodies (internal/codec): equal values encode to
// equal bytes, which is what lets verify compare a persisted projection
// with a fresh fold byte for byte.
func marshal(v any) ([]byte, error) { return marshalAppend(nil, v) }

// marshalAppend appends marshal's encoding of v to dst.
func marshalAppend(dst []byte, v any) ([]byte, error) {
	b, err := codec.Append(dst, v)
	if err != nil {
		return nil, fmt.Errorf("projection: %w", err)
	}
	return b, nil
}

// unmarshal decodes exactly one msgpack value with codec.Decode, which
// refuses forged lengths before the decoder can allocate for them: a
// corrupt persisted record is reported, never a crash.
func unmarshal(data []byte, v any) error {
	if err := codec.Decode(data, v); err != nil {
		return fmt.Errorf("%w: %T: %v", ErrMalformed, v, err)
	}
	return nil
}
