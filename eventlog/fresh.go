package eventlog

import "github.com/oklog/ulid/v2"

// maxFresh bounds Log.fresh. Ids drawn with NewID and never appended
// (a request refused after its id was drawn, an id drawn for another use)
// would otherwise pile up: when the set is full it is emptied, and the
// ids it held are looked up like any caller's id, which is only slower.
const maxFresh = 1 << 16

// freshUse says which uses of a fresh id no append has made yet.
type freshUse uint8

const (
	freshID     freshUse = 1 << iota // as an event's id
	freshStream                      // as a stream's name (its string form)
)

// noteFresh records id, just drawn by NewID, as fresh for both uses
// (idMu held: in the same hold as the draw). NewID never draws an id
// twice and ids only increase, so until an append uses it the log holds
// no event with this id and, since no one could name a stream after it
// before it was drawn, no such stream.
func (l *Log) noteFresh(id ulid.ULID) {
	if l.fresh == nil {
		l.fresh = make(map[ulid.ULID]freshUse)
	} else if len(l.fresh) >= maxFresh {
		clear(l.fresh)
	}
	l.fresh[id] = freshID | freshStream
}

// takeFresh reports whether id was still fresh for use, and makes it no
// longer so: the append that asks is its first such use, and any later
// one (a retry, a second append to the stream) reads the indexes.
func (l *Log) takeFresh(id ulid.ULID, use freshUse) bool {
	l.idMu.Lock()
	defer l.idMu.Unlock()
	u, ok := l.fresh[id]
	if !ok || u&use == 0 {
		return false
	}
	if u &^= use; u == 0 {
		delete(l.fresh, id)
	} else {
		l.fresh[id] = u
	}
	return true
}

// freshStream is takeFresh for a stream's name: whether stream is the
// string form of a fresh id that no append has named a stream after.
func (l *Log) freshStream(stream string) bool {
	if len(stream) != ulid.EncodedSize {
		return false
	}
	id, err := ulid.ParseStrict(stream)
	if err != nil {
		return false
	}
	var canon [ulid.EncodedSize]byte
	if id.MarshalTextTo(canon[:]) != nil || string(canon[:]) != stream {
		return false // another spelling of the id (lower case) names another stream
	}
	return l.takeFresh(id, freshStream)
}
