package projection

import (
	"errors"
	"fmt"

	"github.com/pegasus-engine/pegasus/fsm"
)

// ErrMalformed is returned by the Decode functions of this package for bytes
// that are not a valid encoding. They never panic, whatever the bytes.
var ErrMalformed = errors.New("projection: malformed encoding")

// marshal is the canonical encoding of every persisted read model and of the
// memory event bodies, fsm's (fsm.EncodeCanonical): equal values encode to
// equal bytes, which is what lets verify compare a persisted projection
// with a fresh fold byte for byte.
func marshal(v any) ([]byte, error) {
	b, err := fsm.EncodeCanonical(v)
	if err != nil {
		return nil, fmt.Errorf("projection: %w", err)
	}
	return b, nil
}

// unmarshal decodes exactly one msgpack value with fsm.DecodeCanonical,
// which refuses forged lengths before the decoder can allocate for them: a
// corrupt persisted record is reported, never a crash.
func unmarshal(data []byte, v any) error {
	if err := fsm.DecodeCanonical(data, v); err != nil {
		return fmt.Errorf("%w: %T: %v", ErrMalformed, v, err)
	}
	return nil
}
