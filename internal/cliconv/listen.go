package cliconv

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"syscall"
)

// ListenError explains a failure to listen on addr in the operator's terms:
// an address in use names the flag that changes it.
func ListenError(addr string, err error) error {
	if errors.Is(err, syscall.EADDRINUSE) {
		return fmt.Errorf("address %s is already in use (another pegasusd?): stop it, or listen elsewhere with --addr HOST:PORT (PEGASUS_ADDR)", addr)
	}
	return fmt.Errorf("cannot listen on %s: %w", addr, err)
}

// ServerURL reads a --server value: a URL, or HOST:PORT meaning http. The
// result has no trailing slash.
func ServerURL(s string) (*url.URL, error) {
	raw := s
	if !strings.Contains(s, "://") {
		s = "http://" + s
	}
	u, err := url.Parse(s)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, Usagef("--server %q: want a URL like http://127.0.0.1:7070 (or 127.0.0.1:7070)", raw)
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	return u, nil
}
