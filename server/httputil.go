package server

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// apiError is the body of every error answer:
// {"error": {"code": "...", "message": "..."}}.
type apiError struct {
	status  int
	Code    string `json:"code"`
	Message string `json:"message"`
	// Items: a batch refused for some of its items, each by its index.
	Items []batchItemError `json:"items,omitempty"`
}

func (e *apiError) Error() string { return e.Code + ": " + e.Message }

// The error codes of the API. Clients switch on the code, not the message.
const (
	codeBadRequest     = "bad_request"            // malformed JSON, unknown field, invalid value
	codeUnauthorized   = "unauthorized"           // missing or wrong bearer token
	codeNotFound       = "not_found"              // unknown task or route
	codeConflict       = "conflict"               // illegal transition for the task's state
	codeKeyReused      = "idempotency_key_reused" // an Idempotency-Key sent again with another request
	codeBeyondHead     = "beyond_head"            // a resume position past the log's last event
	codeTooLarge       = "payload_too_large"      // body over --max-body-bytes
	codeUnavailable    = "shutting_down"          // the daemon is stopping
	codeClusterBusy    = "cluster_unavailable"    // --cluster: the stream cannot take the append now; retry
	codeInternal       = "internal"               // a bug or an I/O failure; see the daemon's log
	codeMethodNotAllwd = "method_not_allowed"
)

func errBadRequest(format string, args ...any) *apiError {
	return &apiError{status: http.StatusBadRequest, Code: codeBadRequest, Message: fmt.Sprintf(format, args...)}
}

func errNotFound(format string, args ...any) *apiError {
	return &apiError{status: http.StatusNotFound, Code: codeNotFound, Message: fmt.Sprintf(format, args...)}
}

func errConflict(format string, args ...any) *apiError {
	return &apiError{status: http.StatusConflict, Code: codeConflict, Message: fmt.Sprintf(format, args...)}
}

var errShuttingDown = &apiError{status: http.StatusServiceUnavailable, Code: codeUnavailable, Message: "the daemon is shutting down"}

// writeJSON writes v with status, in one write with its Content-Length.
// Encoding errors are the server's bug: logged by nobody, answered 500.
func writeJSON(w http.ResponseWriter, status int, v any) {
	buf := jsonBufs.Get().(*bytes.Buffer)
	defer putJSONBuf(buf)
	var err error
	if a, ok := v.(jsonAppender); ok {
		o := jsonOut{b: buf.AvailableBuffer()}
		a.appendJSON(&o)
		o.b = append(o.b, '\n') // as json.Encoder ends a value
		buf.Write(o.b)
		err = o.err
	} else {
		enc := json.NewEncoder(buf)
		enc.SetEscapeHTML(false)
		err = enc.Encode(v)
	}
	if err != nil {
		buf.Reset()
		status = http.StatusInternalServerError
		buf.WriteString(`{"error":{"code":"internal","message":"internal error: the answer could not be encoded"}}` + "\n")
	}
	h := w.Header()
	h["Content-Type"] = jsonType
	h["Cache-Control"] = noStore
	h["Content-Length"] = []string{strconv.Itoa(buf.Len())}
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// putJSONBuf gives buf back to jsonBufs unless it grew beyond
// maxPooledJSON.
func putJSONBuf(buf *bytes.Buffer) {
	if buf.Cap() <= maxPooledJSON {
		buf.Reset()
		jsonBufs.Put(buf)
	}
}

// maxPooledJSON is the largest answer buffer writeJSON keeps for the next
// answer: room for a batch of a hundred dispatch tasks (about 70 KiB),
// which would otherwise grow a new buffer every time.
const maxPooledJSON = 256 << 10

var (
	jsonBufs = sync.Pool{New: func() any { return new(bytes.Buffer) }}
	jsonType = []string{"application/json"}
	noStore  = []string{"no-store"}
)

func writeError(w http.ResponseWriter, e *apiError) {
	if e.status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="pegasus"`)
	}
	writeJSON(w, e.status, map[string]*apiError{"error": e})
}

// decodeBody reads one JSON object into v, whatever the Content-Type says
// (curl -d sends form encoding by default; the body decides): unknown
// fields, trailing data
// and bodies over the limit (already wrapped by http.MaxBytesReader) are
// refused with the matching API error. Field names match exactly: the
// docs promise that unknown fields are refused, and encoding/json alone
// would take "INPUT" for "input" (and keep the last of two "input"s). An
// empty body is accepted when optional, leaving v as it is.
func decodeBody(r *http.Request, v any, optional bool) *apiError {
	data, err := readBody(r)
	if err != nil {
		return bodyReadError(err)
	}
	if len(bytes.TrimSpace(data)) == 0 {
		if optional {
			return nil
		}
		return errBadRequest("a JSON body is required")
	}
	return decodeJSON(data, v)
}

// readBody reads r's body whole, into one buffer of the size its
// Content-Length announces (io.ReadAll would grow and copy its buffer
// from 512 bytes on). A larger body than announced still reads whole,
// and the announced size counts only up to presizeLimit: the body's
// reader (http.MaxBytesReader) bounds what is read, not the header.
func readBody(r *http.Request) ([]byte, error) {
	n := r.ContentLength
	if n <= 0 || n > presizeLimit {
		return io.ReadAll(r.Body)
	}
	data := make([]byte, 0, n+1) // one more byte: the read that sees EOF
	for {
		m, err := r.Body.Read(data[len(data):cap(data)])
		data = data[:len(data)+m]
		if err == io.EOF {
			return data, nil
		}
		if err != nil {
			return data, err
		}
		if len(data) == cap(data) {
			data = append(data, 0)[:len(data)]
		}
	}
}

// presizeLimit is the largest Content-Length readBody allocates for at
// once: the default body limit.
const presizeLimit = 1 << 20

// decodeJSON is decodeBody's decoding of data, one JSON object, into v.
func decodeJSON(data []byte, v any) *apiError {
	if fd, ok := v.(fastDecoder); ok && json.Valid(data) && fd.decodeFast(data) {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var syn *json.SyntaxError
		var typ *json.UnmarshalTypeError
		switch {
		case errors.As(err, &syn):
			return errBadRequest("malformed JSON at byte %d: %v", syn.Offset, err)
		case errors.As(err, &typ) && typ.Field == "":
			return errBadRequest("the body must be a JSON object")
		case errors.As(err, &typ):
			return errBadRequest("field %q must be %s", typ.Field, jsonKind(typ.Type))
		case errors.As(err, new(*time.ParseError)), strings.Contains(err.Error(), "Time.UnmarshalJSON"):
			// time.Time's own errors name Go functions and layouts.
			return errBadRequest("a time must be an RFC 3339 string, like 2026-01-02T15:04:05Z")
		case strings.HasPrefix(err.Error(), "json: unknown field"):
			return errBadRequest("%s", strings.TrimPrefix(err.Error(), "json: "))
		}
		return errBadRequest("malformed JSON: %v", err)
	}
	if dec.More() {
		return errBadRequest("trailing data after the JSON object")
	}
	if t := reflect.TypeOf(v); t.Kind() == reflect.Pointer && t.Elem().Kind() == reflect.Struct {
		if err := checkFieldNames(data, t.Elem(), ""); err != nil {
			return errBadRequest("%v", err)
		}
	}
	return nil
}

// checkFieldNames walks the JSON object in data, already decoded into a
// value of struct type t (so it is well-formed), and refuses a key that is
// not exactly one of t's JSON field names, or that appears twice. Objects
// in fields of struct type are checked the same way; maps take any key.
func checkFieldNames(data []byte, t reflect.Type, path string) error {
	fields := jsonFields(t)
	var seen []string // objects are small: a list is cheaper than a map
	return eachMember(data, func(key string, raw []byte) error {
		ft, ok := fields[key]
		switch {
		case !ok:
			for name := range fields {
				if strings.EqualFold(name, key) {
					return fmt.Errorf("unknown field %q (field names are case-sensitive: %q)", path+key, path+name)
				}
			}
			return fmt.Errorf("unknown field %q", path+key)
		case slices.Contains(seen, key):
			return fmt.Errorf("field %q appears twice", path+key)
		}
		seen = append(seen, key)
		for ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		if ft.Kind() == reflect.Struct && ft != reflect.TypeFor[time.Time]() {
			return checkFieldNames(raw, ft, path+key+".")
		}
		return nil
	})
}

// eachMember calls fn with the key and the value's bytes of each member
// of the JSON object in data, in order, and stops at fn's first error.
// data is well-formed JSON (decoded already); a value that is not an
// object (null) has no members. It scans the bytes once, without the
// allocations of json.Decoder.Token: it runs on every request body.
func eachMember(data []byte, fn func(key string, raw []byte) error) error {
	i := skipSpace(data, 0)
	if i >= len(data) || data[i] != '{' {
		return nil
	}
	i++
	for {
		i = skipSpace(data, i)
		if i < len(data) && data[i] == ',' {
			i = skipSpace(data, i+1)
		}
		if i >= len(data) || data[i] == '}' {
			return nil
		}
		kend := skipValue(data, i)
		rawKey := data[i:kend]
		var key string
		if bytes.IndexByte(rawKey, '\\') < 0 && len(rawKey) >= 2 {
			key = string(rawKey[1 : len(rawKey)-1])
		} else if err := json.Unmarshal(rawKey, &key); err != nil {
			return err
		}
		i = skipSpace(data, kend)
		if i >= len(data) || data[i] != ':' {
			return errors.New("malformed JSON object")
		}
		i = skipSpace(data, i+1)
		vend := skipValue(data, i)
		if err := fn(key, data[i:vend]); err != nil {
			return err
		}
		i = vend
	}
}

func skipSpace(data []byte, i int) int {
	for i < len(data) && (data[i] == ' ' || data[i] == '\t' || data[i] == '\n' || data[i] == '\r') {
		i++
	}
	return i
}

// skipValue returns the end of the well-formed JSON value at data[i:].
func skipValue(data []byte, i int) int {
	depth := 0
	for i < len(data) {
		switch c := data[i]; c {
		case '"':
			i++
			for i < len(data) && data[i] != '"' {
				if data[i] == '\\' {
					i++
				}
				i++
			}
			i++
		case '{', '[':
			depth++
			i++
		case '}', ']':
			if depth == 0 {
				return i
			}
			depth--
			i++
		case ',', ' ', '\t', '\n', '\r', ':':
			if depth == 0 {
				return i
			}
			i++
		default:
			i++
		}
		if depth == 0 && i <= len(data) && i > 0 && (data[i-1] == '"' || data[i-1] == '}' || data[i-1] == ']') {
			return min(i, len(data))
		}
	}
	return min(i, len(data))
}

// jsonFields maps the JSON names of t's fields (as encoding/json names
// them, embedded structs flattened) to their types.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	if m, ok := fieldCache.Load(t); ok {
		return m.(map[string]reflect.Type)
	}
	m := map[string]reflect.Type{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch {
		case name == "-" || (!f.IsExported() && !f.Anonymous):
			continue
		case f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct:
			maps.Copy(m, jsonFields(f.Type))
			continue
		case name == "":
			name = f.Name
		}
		m[name] = f.Type
	}
	fieldCache.Store(t, m)
	return m
}

var fieldCache sync.Map // reflect.Type -> map[string]reflect.Type

func bodyReadError(err error) *apiError {
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		return &apiError{status: http.StatusRequestEntityTooLarge, Code: codeTooLarge,
			Message: fmt.Sprintf("the body is larger than %d bytes", tooBig.Limit)}
	}
	return errBadRequest("reading the body: %v", err)
}

// tokenCheck compares bearer tokens in constant time. Both sides are hashed
// first so that the comparison does not even leak the token's length.
type tokenCheck [sha256.Size]byte

func newTokenCheck(token string) *tokenCheck {
	if token == "" {
		return nil
	}
	h := tokenCheck(sha256.Sum256([]byte(token)))
	return &h
}

// ok reports whether r carries the token. The scheme is case-insensitive
// (RFC 7235: "bearer" is "Bearer").
func (t *tokenCheck) ok(r *http.Request) bool {
	scheme, got, found := strings.Cut(strings.TrimSpace(r.Header.Get("Authorization")), " ")
	if !found || !strings.EqualFold(scheme, "Bearer") {
		return false
	}
	h := sha256.Sum256([]byte(strings.TrimSpace(got)))
	return subtle.ConstantTimeCompare(h[:], t[:]) == 1
}

func logRequest(l *slog.Logger, r *http.Request, status int) {
	l.Debug("http", "method", r.Method, "path", r.URL.Path, "status", status, "remote", r.RemoteAddr)
}

// jsonKind names what a Go type holds in JSON's terms, for an error that
// speaks the client's language ("an integer", not "int").
func jsonKind(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Bool:
		return "true or false"
	case reflect.String:
		return "a string"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Map, reflect.Struct:
		return "an object"
	case reflect.Pointer:
		return jsonKind(t.Elem())
	}
	return "another JSON type"
}
