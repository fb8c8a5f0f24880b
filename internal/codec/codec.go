// Package codec is the canonical msgpack encoding that Pegasus persists:
// event bodies (package fsm), snapshots and tasks, the read models and the
// memory and system bodies (package projection), and the replay store's
// records. It is the only place in the module that calls the msgpack
// library's encoder or its whole-value decoder; a lint test
// (internal/lint) refuses msgpack.Marshal, msgpack.Unmarshal and their
// encoders and decoders everywhere else.
//
// Two promises hold for every caller:
//
//   - Encode is canonical: struct fields as maps keyed by their msgpack
//     tags, in declaration order; map keys sorted; empty fields omitted (so
//     nil and empty collections encode alike). Equal values encode to
//     equal bytes, which is what lets verify compare a persisted
//     projection with a fresh fold byte for byte.
//   - Decode refuses hostile bytes before the decoder can allocate for
//     them (CheckShape): a corrupt stored value is an error, never a crash
//     or an allocation sized by a forged length.
//
// The package imports nothing of the module, so every layer can use it.
package codec

import (
	"bytes"
	"fmt"

	"github.com/vmihailenco/msgpack/v5"
)

// Encode returns the canonical msgpack encoding of v (see the package
// comment). Equal values encode to equal bytes.
func Encode(v any) ([]byte, error) { return Append(nil, v) }

// Append appends the canonical msgpack encoding of v to dst and returns
// the extended slice, as Encode would encode it.
func Append(dst []byte, v any) ([]byte, error) {
	buf := bytes.NewBuffer(dst)
	enc := msgpack.GetEncoder()
	defer msgpack.PutEncoder(enc)
	enc.Reset(buf)
	enc.SetSortMapKeys(true)
	enc.SetOmitEmpty(true)
	if err := enc.Encode(v); err != nil {
		return nil, fmt.Errorf("codec: encode %T: %w", v, err)
	}
	return buf.Bytes(), nil
}

// Decode decodes exactly one msgpack value from data into v. It first
// checks, without allocating, that every length the bytes declare fits in
// the bytes that remain (CheckShape), so hostile or corrupt bytes are an
// error, never an allocation sized by a forged length. Trailing bytes are
// an error too, so one value has one encoding. Use it for every msgpack
// value read back from storage.
func Decode(data []byte, v any) error {
	if err := CheckShape(data); err != nil {
		return err
	}
	r := bytes.NewReader(data)
	dec := msgpack.GetDecoder()
	defer msgpack.PutDecoder(dec)
	dec.Reset(r)
	return dec.Decode(v)
}

// MaxDepth bounds the nesting of arrays and maps in a decoded value. Real
// bodies nest a few levels; the bound keeps hostile bytes from driving the
// decoder's recursion (when skipping unknown fields) into a stack overflow.
const MaxDepth = 32

// CheckShape walks the msgpack encoding in data without allocating and
// refuses it unless it is exactly one well-formed value whose every
// declared length fits in the bytes that remain and whose nesting is at most
// MaxDepth. The msgpack decoder trusts declared array lengths and allocates
// them up front (v5.4.1 ignores its own allocation limit for slices), so a
// few hostile bytes claiming 2^32 elements would otherwise exhaust memory.
// After this check, what a decoder allocates is bounded by len(data).
// Decode calls it; a hand-written decoder (fsm's body reader) calls it
// first too.
//
// data is a byte slice or a string (fsm decodes bodies held in strings).
func CheckShape[T ~[]byte | ~string](data T) error {
	// pending[i] is how many values level i still expects.
	var pending [MaxDepth + 1]uint64
	depth := 0
	pending[0] = 1
	p := 0
	rest := func() uint64 { return uint64(len(data) - p) }
	for {
		for depth >= 0 && pending[depth] == 0 {
			depth--
		}
		if depth < 0 {
			break
		}
		pending[depth]--
		if p >= len(data) {
			return fmt.Errorf("truncated at byte %d", p)
		}
		c := data[p]
		p++
		var skip, n uint64 // bytes of payload to skip; values the container holds
		container := false
		switch {
		case c <= 0x7f, c >= 0xe0, c == 0xc0, c == 0xc2, c == 0xc3:
		case c >= 0x80 && c <= 0x8f:
			n, container = 2*uint64(c&0x0f), true
		case c >= 0x90 && c <= 0x9f:
			n, container = uint64(c&0x0f), true
		case c >= 0xa0 && c <= 0xbf:
			skip = uint64(c & 0x1f)
		default:
			var size int // width of the length or value field
			switch c {
			case 0xcc, 0xd0:
				skip = 1
			case 0xcd, 0xd1:
				skip = 2
			case 0xca, 0xce, 0xd2:
				skip = 4
			case 0xcb, 0xcf, 0xd3:
				skip = 8
			case 0xd4, 0xd5, 0xd6, 0xd7, 0xd8: // fixext: type byte + 1, 2, 4, 8, 16
				skip = 1 + 1<<(c-0xd4)
			case 0xc4, 0xd9, 0xc7:
				size = 1
			case 0xc5, 0xda, 0xc8, 0xdc, 0xde:
				size = 2
			case 0xc6, 0xdb, 0xc9, 0xdd, 0xdf:
				size = 4
			default: // 0xc1 is never used
				return fmt.Errorf("invalid code 0x%02x at byte %d", c, p-1)
			}
			if size > 0 {
				if rest() < uint64(size) {
					return fmt.Errorf("truncated length at byte %d", p)
				}
				var l uint64
				for i := p; i < p+size; i++ {
					l = l<<8 | uint64(data[i])
				}
				p += size
				switch c {
				case 0xc7, 0xc8, 0xc9: // ext: type byte + data
					skip = 1 + l
				case 0xdc, 0xdd:
					n, container = l, true
				case 0xde, 0xdf:
					n, container = 2*l, true
				default:
					skip = l
				}
			}
		}
		if skip > rest() {
			return fmt.Errorf("length %d at byte %d exceeds the %d bytes left", skip, p, rest())
		}
		p += int(skip)
		if container && n > 0 {
			if n > rest() { // every value takes at least one byte
				return fmt.Errorf("%d values declared at byte %d exceed the %d bytes left", n, p, rest())
			}
			if depth == MaxDepth {
				return fmt.Errorf("nested deeper than %d", MaxDepth)
			}
			depth++
			pending[depth] = n
		}
	}
	if p != len(data) {
		return fmt.Errorf("%d trailing bytes", len(data)-p)
	}
	return nil
}
