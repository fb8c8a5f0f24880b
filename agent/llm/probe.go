package llm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// ProbeTimeout bounds one probe of a model endpoint.
const ProbeTimeout = 10 * time.Second

// ProbeResult is what GET {base}/models said about a model endpoint.
type ProbeResult struct {
	OK     bool
	Status int    // the HTTP status, 0 when no answer came
	Error  string // what is wrong, in the operator's terms; "" when OK
	At     time.Time
}

// ProbeHints name, for the messages, where the operator sets the
// endpoint's base URL, key and model: the daemon's variables, or a
// configuration file's keys.
type ProbeHints struct {
	BaseURL, APIKey, Model string
}

// RedactURL hides what a URL may carry of a credential, for logs, answers
// and printed configuration: the password of its user information, and
// the value of each query parameter whose name is a credential's
// (SensitiveName: ?api_key=..., ?token=...), unless that value is a
// ${NAME} reference. The rest is kept as written.
func RedactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return s
	}
	if u.User != nil {
		if _, ok := u.User.Password(); ok {
			at := strings.Index(s, "@")
			scheme := strings.Index(s, "://")
			if at < 0 || scheme < 0 || at < scheme {
				u.User = url.User(u.User.Username())
				s = u.String()
			} else {
				s = s[:scheme+3] + u.User.Username() + ":" + redactedPassword + s[at:]
			}
		}
	}
	q := strings.IndexByte(s, '?')
	if q < 0 || u.RawQuery == "" {
		return s
	}
	query, frag, hasFrag := strings.Cut(s[q+1:], "#")
	params := strings.Split(query, "&")
	changed := false
	for i, p := range params {
		k, v, ok := strings.Cut(p, "=")
		if !ok || v == "" || strings.Contains(v, "${") {
			continue
		}
		if name, err := url.QueryUnescape(k); err == nil && SensitiveName(name) {
			params[i] = k + "=" + redactedPassword
			changed = true
		}
	}
	if !changed {
		return s
	}
	s = s[:q+1] + strings.Join(params, "&")
	if hasFrag {
		s += "#" + frag
	}
	return s
}

// SensitiveName says whether a header, variable or query parameter of
// this name holds a credential.
func SensitiveName(name string) bool {
	n := strings.ToLower(name)
	for _, w := range []string{"auth", "token", "key", "secret", "password", "passwd", "cookie", "credential", "signature", "sig"} {
		if strings.Contains(n, w) {
			return true
		}
	}
	return false
}

const redactedPassword = "<redacted>"

// FlagHints are the hints of pegasusd's --llm-* flags.
var FlagHints = ProbeHints{BaseURL: "PEGASUS_LLM_BASE_URL", APIKey: "PEGASUS_LLM_API_KEY", Model: "PEGASUS_LLM_MODEL"}

// Probe asks the endpoint of o for its models (GET {base}/models, with the
// key), so that a wrong base URL, key or model name shows at start rather
// than when the first task fails. It never returns the key.
func Probe(ctx context.Context, o Options, h ProbeHints) ProbeResult {
	status, problem := probe(ctx, o, h)
	now := time.Now
	if o.Now != nil {
		now = o.Now
	}
	return ProbeResult{OK: problem == "", Status: status, Error: problem, At: now().UTC()}
}

func probe(ctx context.Context, o Options, h ProbeHints) (int, string) {
	ctx, cancel := context.WithTimeout(ctx, ProbeTimeout)
	defer cancel()
	target := strings.TrimRight(o.BaseURL, "/") + "/models"
	u := RedactURL(target) // for the messages
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return 0, fmt.Sprintf("%s %q is not a URL", h.BaseURL, RedactURL(o.BaseURL))
	}
	if o.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+o.APIKey.Reveal())
	}
	hc := o.HTTPClient
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // its text repeats the URL, with its password
		}
		return 0, fmt.Sprintf("GET %s: %v (is the model server running, and is %s right?)", u, err, h.BaseURL)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	switch {
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		return resp.StatusCode, fmt.Sprintf("GET %s answered %s: check %s", u, resp.Status, h.APIKey)
	case resp.StatusCode == http.StatusNotFound:
		return resp.StatusCode, fmt.Sprintf("GET %s answered %s: %s should be the API root, usually ending in /v1", u, resp.Status, h.BaseURL)
	case resp.StatusCode/100 != 2:
		return resp.StatusCode, fmt.Sprintf("GET %s answered %s", u, resp.Status)
	}
	var list struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &list); err != nil {
		return resp.StatusCode, fmt.Sprintf("GET %s did not answer a model list (not an OpenAI-compatible API?)", u)
	}
	if len(list.Data) == 0 {
		return resp.StatusCode, "" // some servers list nothing; the first call will tell
	}
	for _, m := range list.Data {
		if m.ID == o.Model {
			return resp.StatusCode, ""
		}
	}
	names := make([]string, 0, 5)
	for i, m := range list.Data {
		if i == 5 {
			names = append(names, "...")
			break
		}
		names = append(names, m.ID)
	}
	return resp.StatusCode, fmt.Sprintf("the server does not list model %q (%s); it lists %s", o.Model, h.Model, strings.Join(names, ", "))
}
