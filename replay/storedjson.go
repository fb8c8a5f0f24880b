package replay

import (
	"encoding/base64"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/oklog/ulid/v2"

	"github.com/pegasus-engine/pegasus/eventlog"
)

// AppendStored appends ev's stored JSON form (MarshalStored) to dst. The
// common event is written by hand, byte for byte what encoding/json makes
// of storedJSON (TestAppendStoredMatchesReflection holds them equal on
// random events), since building it by reflection was most of what an
// append cost the clustered daemon before it was published. Strings that
// encoding/json would change (invalid UTF-8, U+2028, U+2029) and times it
// refuses go through encoding/json.
func AppendStored(dst []byte, ev eventlog.Event) ([]byte, error) {
	t := ev.Time.UTC()
	if y := t.Year(); y < 0 || y > 9999 || !plainStrings(&ev) {
		j := storedJSON(ev)
		data, err := marshalJSON(&j)
		return append(dst, data...), err
	}
	dst = append(dst, `{"id":`...)
	dst = appendID(dst, ev.ID)
	dst = append(dst, `,"seq":`...)
	dst = strconv.AppendUint(dst, ev.Seq, 10)
	dst = append(dst, `,"stream":`...)
	dst = appendString(dst, ev.Stream)
	dst = append(dst, `,"version":`...)
	dst = strconv.AppendUint(dst, ev.Version, 10)
	dst = append(dst, `,"type":`...)
	dst = appendString(dst, ev.Type)
	dst = append(dst, `,"schema":`...)
	dst = strconv.AppendUint(dst, uint64(ev.Schema), 10)
	dst = append(dst, `,"time":"`...)
	dst = t.AppendFormat(dst, time.RFC3339Nano)
	dst = append(dst, '"')
	if ev.Causation != (ulid.ULID{}) {
		dst = append(dst, `,"causation":`...)
		dst = appendID(dst, ev.Causation)
	}
	if ev.Correlation != (ulid.ULID{}) {
		dst = append(dst, `,"correlation":`...)
		dst = appendID(dst, ev.Correlation)
	}
	if len(ev.Metadata) > 0 {
		keys := make([]string, 0, len(ev.Metadata))
		for k := range ev.Metadata {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		dst = append(dst, `,"metadata":{`...)
		for i, k := range keys {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendString(dst, k)
			dst = append(dst, ':')
			dst = appendString(dst, ev.Metadata[k])
		}
		dst = append(dst, '}')
	}
	dst = append(dst, `,"body":"`...)
	dst = base64.StdEncoding.AppendEncode(dst, ev.Body)
	return append(dst, `"}`...), nil
}

// appendID appends a non-zero id as a JSON string ("" for the zero id).
func appendID(dst []byte, id ulid.ULID) []byte {
	if id == (ulid.ULID{}) {
		return append(dst, `""`...)
	}
	dst = append(dst, '"')
	var text [ulid.EncodedSize]byte
	_ = id.MarshalTextTo(text[:])
	dst = append(dst, text[:]...)
	return append(dst, '"')
}

// plainStrings reports whether every string of ev is valid UTF-8 without
// U+2028 and U+2029, which encoding/json writes otherwise than appendString.
func plainStrings(ev *eventlog.Event) bool {
	if !plain(ev.Stream) || !plain(ev.Type) {
		return false
	}
	for k, v := range ev.Metadata {
		if !plain(k) || !plain(v) {
			return false
		}
	}
	return true
}

func plain(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			if !utf8.ValidString(s[i:]) {
				return false
			}
			for _, r := range s[i:] {
				if r == '\u2028' || r == '\u2029' {
					return false
				}
			}
			return true
		}
	}
	return true
}

// appendString appends s, a plain string (plain), as a JSON string as
// encoding/json writes it without HTML escaping.
func appendString(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		dst = append(dst, s[start:i]...)
		switch c {
		case '"', '\\':
			dst = append(dst, '\\', c)
		case '\b':
			dst = append(dst, '\\', 'b')
		case '\f':
			dst = append(dst, '\\', 'f')
		case '\n':
			dst = append(dst, '\\', 'n')
		case '\r':
			dst = append(dst, '\\', 'r')
		case '\t':
			dst = append(dst, '\\', 't')
		default:
			dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		}
		start = i + 1
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}
