package mcp

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// taskHTTP is the HTTP transport of a Streamable HTTP session: it rewrites
// the messages a taskConn rewrites on stdio, in the bodies of the requests
// and of their answers (JSON or server-sent events).
//
// The SDK's HTTP connection cannot be wrapped: Client.Connect tells it the
// session's state through an unexported method, which a wrapper hides, and
// without it the connection sends no protocol version header and opens no
// stream for the server's notifications. The HTTP client it is given is
// the one place that sees the raw messages and leaves the connection whole.
type taskHTTP struct {
	st   *taskState
	next http.RoundTripper
}

func (h taskHTTP) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method == http.MethodPost && r.Body != nil && r.Body != http.NoBody {
		body, err := io.ReadAll(r.Body)
		_ = r.Body.Close()
		if err != nil {
			return nil, err
		}
		body = recode(body, h.st.out)
		r = r.Clone(r.Context())
		r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
		r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	}
	resp, err := h.next.RoundTrip(r)
	if err != nil || resp.StatusCode/100 != 2 || resp.Body == nil {
		return resp, err
	}
	ct := resp.Header.Get("Content-Type")
	switch {
	case strings.HasPrefix(ct, "application/json"):
		if !h.st.waiting() {
			return resp, nil
		}
		body, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if err != nil {
			return nil, err
		}
		body = h.rewrite(body)
		resp.Body, resp.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
		resp.Header.Set("Content-Length", strconv.Itoa(len(body)))
	case strings.HasPrefix(ct, "text/event-stream"):
		resp.Body = &sseRewriter{h: h, body: resp.Body, r: bufio.NewReader(resp.Body)}
	}
	return resp, nil
}

// rewrite returns an answer's new text, or data when it is left alone.
func (h taskHTTP) rewrite(data []byte) []byte {
	if !h.st.waiting() {
		return data
	}
	return recode(data, h.st.in)
}

// recode returns the text of the message in data as fn rewrites it, or
// data itself when it holds no single message or fn leaves it alone.
func recode(data []byte, fn func(jsonrpc.Message) jsonrpc.Message) []byte {
	msg, err := jsonrpc.DecodeMessage(data)
	if err != nil {
		return data
	}
	out := fn(msg)
	if out == msg {
		return data
	}
	b, err := jsonrpc.EncodeMessage(out)
	if err != nil {
		return data
	}
	return b
}

// sseRewriter passes a stream of server-sent events through, one event at
// a time, with each event's data rewritten by taskHTTP.rewrite.
type sseRewriter struct {
	h     taskHTTP
	body  io.ReadCloser
	r     *bufio.Reader
	event [][]byte     // the lines of the event being read
	out   bytes.Buffer // what Read hands out next
	err   error
}

func (s *sseRewriter) Read(p []byte) (int, error) {
	for s.out.Len() == 0 {
		if s.err != nil {
			return 0, s.err
		}
		line, err := s.r.ReadBytes('\n')
		if len(line) > 0 {
			s.event = append(s.event, line)
			if len(bytes.TrimRight(line, "\r\n")) == 0 {
				s.flush()
			}
		}
		if err != nil {
			s.flush()
			s.err = err
		}
	}
	return s.out.Read(p)
}

// flush writes the event read so far to out, its data rewritten.
func (s *sseRewriter) flush() {
	defer func() { s.event = s.event[:0] }()
	var data [][]byte
	for _, l := range s.event {
		if v, ok := bytes.CutPrefix(bytes.TrimRight(l, "\r\n"), []byte("data:")); ok {
			data = append(data, bytes.TrimPrefix(v, []byte(" ")))
		}
	}
	if len(data) > 0 {
		joined := bytes.Join(data, []byte("\n"))
		if b := s.h.rewrite(joined); !bytes.Equal(b, joined) {
			wrote := false
			for _, l := range s.event {
				if bytes.HasPrefix(l, []byte("data:")) {
					if !wrote {
						s.out.WriteString("data: ")
						s.out.Write(b)
						s.out.WriteByte('\n')
						wrote = true
					}
					continue
				}
				s.out.Write(l)
			}
			return
		}
	}
	for _, l := range s.event {
		s.out.Write(l)
	}
}

func (s *sseRewriter) Close() error { return s.body.Close() }
