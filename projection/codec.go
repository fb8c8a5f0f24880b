package projection

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/vmihailenco/msgpack/v5"
)

// ErrMalformed is returned by the Decode functions of this package for bytes
// that are not a valid encoding. They never panic, whatever the bytes.
var ErrMalformed = errors.New("projection: malformed encoding")

// marshal is the canonical encoding of every persisted read model and of the
// memory event bodies: msgpack maps keyed by the msgpack tags, map keys
// sorted, empty fields omitted. Equal values encode to equal bytes, which is
// what lets verify compare a persisted projection with a fresh fold byte for
// byte. It matches fsm's encoding of tasks and bodies.
func marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := msgpack.GetEncoder()
	defer msgpack.PutEncoder(enc)
	enc.Reset(&buf)
	enc.SetSortMapKeys(true)
	enc.SetOmitEmpty(true)
	if err := enc.Encode(v); err != nil {
		return nil, fmt.Errorf("projection: encode %T: %w", v, err)
	}
	return buf.Bytes(), nil
}

// unmarshal decodes exactly one msgpack value; trailing bytes are an error.
func unmarshal(data []byte, v any) error {
	r := bytes.NewReader(data)
	dec := msgpack.GetDecoder()
	defer msgpack.PutDecoder(dec)
	dec.Reset(r)
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w: %T: %v", ErrMalformed, v, err)
	}
	if r.Len() != 0 {
		return fmt.Errorf("%w: %T: %d trailing bytes", ErrMalformed, v, r.Len())
	}
	return nil
}
