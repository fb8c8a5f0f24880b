package eventlog

import "unsafe"

// bytesToString returns a string sharing b's memory. Callers must never
// modify b afterwards; the decoder uses it for the stream and type names,
// which live in a buffer nothing else references.
func bytesToString(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}
