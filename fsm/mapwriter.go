package fsm

import "time"

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

// Close ends the map and returns dst extended by it.
func (w *MapWriter) Close() []byte {
	w.e.close(w.f)
	return w.e.b
}
