package sse

import (
	"bufio"
	"bytes"
	"context"
	"io"
)

// Event is one Server-Sent Event.
type Event struct {
	ID    string
	Event string
	Data  []byte
}

// ReadSSE reads Server-Sent Events from r and calls fn for each, until r
// ends (nil), fn returns an error, or ctx is done. Lines end in "\r\n",
// "\n" or "\r", as the specification allows all three; maxLine bounds one
// line.
func Read(ctx context.Context, r io.Reader, maxLine int, fn func(Event) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 1<<16), maxLine)
	sc.Split(sseLines())
	var cur Event
	var data [][]byte
	for sc.Scan() {
		if err := ctx.Err(); err != nil {
			return err
		}
		line := sc.Bytes()
		if len(line) == 0 { // dispatch
			if len(data) > 0 {
				cur.Data = bytes.Join(data, []byte("\n"))
				if err := fn(cur); err != nil {
					return err
				}
			}
			cur, data = Event{}, nil
			continue
		}
		if line[0] == ':' { // a comment: keep-alive
			continue
		}
		field, value, _ := bytes.Cut(line, []byte(":"))
		value = bytes.TrimPrefix(value, []byte(" "))
		switch string(field) {
		case "id":
			cur.ID = string(value)
		case "event":
			cur.Event = string(value)
		case "data":
			data = append(data, append([]byte(nil), value...))
		}
	}
	return sc.Err()
}

// sseLines returns a split function for "\r\n", "\n" or a lone "\r". A
// "\r" ends its line at once (a live stream may pause right after it); a
// "\n" right after it, even in the next read, is then skipped.
func sseLines() bufio.SplitFunc {
	skipLF := false
	return func(data []byte, atEOF bool) (advance int, token []byte, err error) {
		if skipLF && len(data) > 0 {
			skipLF = false
			if data[0] == '\n' {
				return 1, nil, nil
			}
		}
		if atEOF && len(data) == 0 {
			return 0, nil, nil
		}
		if i := bytes.IndexAny(data, "\r\n"); i >= 0 {
			if data[i] == '\r' {
				if i+1 < len(data) && data[i+1] == '\n' {
					return i + 2, data[:i], nil
				}
				skipLF = i+1 == len(data)
			}
			return i + 1, data[:i], nil
		}
		if atEOF {
			return len(data), data, nil
		}
		return 0, nil, nil
	}
}
