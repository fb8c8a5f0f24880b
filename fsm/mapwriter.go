package fsm

import (
	"time"

	"github.com/oklog/ulid/v2"
)

// MapWriter writes one flat struct as a msgpack map by hand, with the
// rules and the bytes of EncodeTask's encoder (taskEncoder): the bytes
// internal/codec's reflection writes for the same struct, fields keyed by
// their msgpack tags in declaration order, empty ones omitted. It lets the
// other packages' small records (projection.Summary) be encoded without
// reflection; each such encoder is checked byte for byte against
// reflection by its own test.
type MapWriter struct {
	e taskEncoder
	f fields
}

// NewMapWriter starts a map appended to dst.
func NewMapWriter(dst []byte) MapWriter {
	w := MapWriter{e: taskEncoder{b: dst}}
	w.f = w.e.open()
	return w
}

// Str writes a string field, Int an int, Uint64 a uint64 (in msgpack's
// fixed 9-byte form, as reflection writes it) and Time a time.Time; each
// writes nothing for the empty value.
func (w *MapWriter) Str(k, v string)            { w.e.fStr(&w.f, k, v) }
func (w *MapWriter) Int(k string, v int)        { w.e.fInt(&w.f, k, v) }
func (w *MapWriter) Uint64(k string, v uint64)  { w.e.fUint64(&w.f, k, v) }
func (w *MapWriter) Time(k string, v time.Time) { w.e.fTime(&w.f, k, v) }

// Strs writes a []string field, Bool a bool and ULID a ulid.ULID (16
// bytes of bin 8); each writes nothing for the empty value.
func (w *MapWriter) Strs(k string, v []string)  { w.e.fStrs(&w.f, k, v) }
func (w *MapWriter) Bool(k string, v bool)      { w.e.fBool(&w.f, k, v) }
func (w *MapWriter) ULID(k string, v ulid.ULID) { w.e.fULID(&w.f, k, v) }

// Map writes a field whose value is a map of its own, written by write:
// what reflection writes for a non-nil pointer to a struct (even one whose
// fields are all empty, as {}). The caller leaves a nil pointer out.
func (w *MapWriter) Map(k string, write func(*MapWriter)) {
	w.e.key(&w.f, k)
	sub := MapWriter{e: w.e}
	sub.f = sub.e.open()
	write(&sub)
	sub.e.close(sub.f)
	w.e = sub.e
}

// Close ends the map and returns dst extended by it.
func (w *MapWriter) Close() []byte {
	w.e.close(w.f)
	return w.e.b
}
