package fsm

import (
	"fmt"
	"io"
)

// mpReader reads msgpack straight from a body held in a string: the
// primitives of msgpack.Decoder that the body reader uses, with the same
// results for the same bytes, but without a reader interface per byte.
// Every string it returns is a substring of the body (no copy: Decode
// makes one copy of a body, the caller of DecodeShared made it).
//
// It trusts codec.CheckShape, which decodeBody runs first: lengths fit in
// the bytes that remain. It still never reads past the end (io.EOF or
// io.ErrUnexpectedEOF, as msgpack would).
type mpReader struct {
	b string
	p int
}

func (d *mpReader) reset(b string) { *d = mpReader{b: b} }

func (d *mpReader) code() (byte, error) {
	if d.p >= len(d.b) {
		return 0, io.EOF
	}
	c := d.b[d.p]
	d.p++
	return c, nil
}

// next returns the next n bytes.
func (d *mpReader) next(n int) (string, error) {
	if n < 0 || n > len(d.b)-d.p {
		return "", io.ErrUnexpectedEOF
	}
	v := d.b[d.p : d.p+n]
	d.p += n
	return v, nil
}

// uint reads an n-byte big-endian unsigned integer (n is 1, 2, 4 or 8).
func (d *mpReader) uint(n int) (uint64, error) {
	v, err := d.next(n)
	if err != nil {
		return 0, err
	}
	var u uint64
	for i := 0; i < n; i++ {
		u = u<<8 | uint64(v[i])
	}
	return u, nil
}

// PeekCode returns the next code without consuming it.
func (d *mpReader) PeekCode() (byte, error) {
	if d.p >= len(d.b) {
		return 0, io.EOF
	}
	return d.b[d.p], nil
}

// DecodeNil consumes a nil.
func (d *mpReader) DecodeNil() error {
	c, err := d.code()
	if err != nil {
		return err
	}
	if c != 0xc0 {
		return fmt.Errorf("msgpack: invalid code=%x decoding nil", c)
	}
	return nil
}

// DecodeBool reads a bool; nil is false.
func (d *mpReader) DecodeBool() (bool, error) {
	c, err := d.code()
	if err != nil {
		return false, err
	}
	switch c {
	case 0xc0, 0xc2:
		return false, nil
	case 0xc3:
		return true, nil
	}
	return false, fmt.Errorf("msgpack: invalid code=%x decoding bool", c)
}

// DecodeInt64 reads any integer encoding as an int64; nil is 0.
func (d *mpReader) DecodeInt64() (int64, error) {
	c, err := d.code()
	if err != nil {
		return 0, err
	}
	switch {
	case c == 0xc0:
		return 0, nil
	case c <= 0x7f || c >= 0xe0: // positive and negative fixint
		return int64(int8(c)), nil
	}
	switch c {
	case 0xcc: // uint8
		n, err := d.uint(1)
		return int64(n), err
	case 0xd0: // int8
		n, err := d.uint(1)
		return int64(int8(n)), err
	case 0xcd: // uint16
		n, err := d.uint(2)
		return int64(n), err
	case 0xd1: // int16
		n, err := d.uint(2)
		return int64(int16(n)), err
	case 0xce: // uint32
		n, err := d.uint(4)
		return int64(n), err
	case 0xd2: // int32
		n, err := d.uint(4)
		return int64(int32(n)), err
	case 0xcf, 0xd3: // uint64, int64
		n, err := d.uint(8)
		return int64(n), err
	}
	return 0, fmt.Errorf("msgpack: invalid code=%x decoding int64", c)
}

// DecodeInt is DecodeInt64 as an int.
func (d *mpReader) DecodeInt() (int, error) {
	n, err := d.DecodeInt64()
	return int(n), err
}

// lenOf returns the length a code declares, reading its length field:
// fixed (the code's low bits under mask), or 1, 2, 4 bytes for codes
// w8, w16, w32; ok=false when c is none of them.
func (d *mpReader) lenOf(c, fixLow, fixHigh, mask, w8, w16, w32 byte) (int, bool, error) {
	switch {
	case c >= fixLow && c <= fixHigh:
		return int(c & mask), true, nil
	case w8 != 0 && c == w8:
		n, err := d.uint(1)
		return int(n), true, err
	case c == w16:
		n, err := d.uint(2)
		return int(n), true, err
	case c == w32:
		n, err := d.uint(4)
		return int(n), true, err
	}
	return 0, false, nil
}

// bytesLen is the length of a string or binary; -1 for nil.
func (d *mpReader) bytesLen(c byte) (int, error) {
	if c == 0xc0 {
		return -1, nil
	}
	if n, ok, err := d.lenOf(c, 0xa0, 0xbf, 0x1f, 0xd9, 0xda, 0xdb); ok {
		return n, err
	}
	if n, ok, err := d.lenOf(c, 1, 0, 0, 0xc4, 0xc5, 0xc6); ok { // bin8/16/32 (no fixed form)
		return n, err
	}
	return 0, fmt.Errorf("msgpack: invalid code=%x decoding string/bytes length", c)
}

// DecodeBytesLen reads the header of a string or binary; -1 for nil.
func (d *mpReader) DecodeBytesLen() (int, error) {
	c, err := d.code()
	if err != nil {
		return 0, err
	}
	return d.bytesLen(c)
}

// DecodeString reads a string (or binary) as a substring of the body;
// nil is "".
func (d *mpReader) DecodeString() (string, error) {
	c, err := d.code()
	if err != nil {
		return "", err
	}
	n, err := d.bytesLen(c)
	if err != nil || n <= 0 {
		return "", err
	}
	return d.next(n)
}

// DecodeMapLen reads a map header; -1 for nil. An ext header before it is
// skipped, as msgpack does.
func (d *mpReader) DecodeMapLen() (int, error) {
	c, err := d.code()
	if err != nil {
		return 0, err
	}
	if isExt(c) {
		if err := d.skipExtHeader(c); err != nil {
			return 0, err
		}
		if c, err = d.code(); err != nil {
			return 0, err
		}
	}
	if c == 0xc0 {
		return -1, nil
	}
	if n, ok, err := d.lenOf(c, 0x80, 0x8f, 0x0f, 0, 0xde, 0xdf); ok {
		return n, err
	}
	return 0, fmt.Errorf("msgpack: unexpected code=%x decoding map length", c)
}

// DecodeArrayLen reads an array header; -1 for nil.
func (d *mpReader) DecodeArrayLen() (int, error) {
	c, err := d.code()
	if err != nil {
		return 0, err
	}
	if c == 0xc0 {
		return -1, nil
	}
	if n, ok, err := d.lenOf(c, 0x90, 0x9f, 0x0f, 0, 0xdc, 0xdd); ok {
		return n, err
	}
	return 0, fmt.Errorf("msgpack: invalid code=%x decoding array length", c)
}

func isExt(c byte) bool { return (c >= 0xd4 && c <= 0xd8) || (c >= 0xc7 && c <= 0xc9) }

// extLen is the data length of an ext code, reading its length field.
func (d *mpReader) extLen(c byte) (int, error) {
	if c >= 0xd4 && c <= 0xd8 {
		return 1 << (c - 0xd4), nil
	}
	n, _, err := d.lenOf(c, 1, 0, 0, 0xc7, 0xc8, 0xc9)
	return n, err
}

// skipExtHeader consumes an ext's length and type, not its data.
func (d *mpReader) skipExtHeader(c byte) error {
	if _, err := d.extLen(c); err != nil {
		return err
	}
	_, err := d.next(1)
	return err
}

// Skip consumes one value, whatever it is. codec.CheckShape bounded the
// nesting (codec.MaxDepth), so the recursion is bounded too.
func (d *mpReader) Skip() error {
	c, err := d.code()
	if err != nil {
		return err
	}
	var n int // values a container holds
	switch {
	case c <= 0x7f || c >= 0xe0 || c == 0xc0 || c == 0xc2 || c == 0xc3:
		return nil
	case c >= 0x80 && c <= 0x8f:
		n = 2 * int(c&0x0f)
	case c >= 0x90 && c <= 0x9f:
		n = int(c & 0x0f)
	case c == 0xdc || c == 0xdd:
		l, err := d.uint(2 << (c - 0xdc))
		if err != nil {
			return err
		}
		n = int(l)
	case c == 0xde || c == 0xdf:
		l, err := d.uint(2 << (c - 0xde))
		if err != nil {
			return err
		}
		n = 2 * int(l)
	case c == 0xcc || c == 0xd0:
		_, err = d.next(1)
		return err
	case c == 0xcd || c == 0xd1:
		_, err = d.next(2)
		return err
	case c == 0xca || c == 0xce || c == 0xd2:
		_, err = d.next(4)
		return err
	case c == 0xcb || c == 0xcf || c == 0xd3:
		_, err = d.next(8)
		return err
	case isExt(c):
		l, err := d.extLen(c)
		if err != nil {
			return err
		}
		_, err = d.next(1 + l)
		return err
	default:
		l, err := d.bytesLen(c)
		if err != nil {
			return err
		}
		_, err = d.next(l)
		return err
	}
	for i := 0; i < n; i++ {
		if err := d.Skip(); err != nil {
			return err
		}
	}
	return nil
}
