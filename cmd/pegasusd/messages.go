package main

// authNote is the start-up line's "auth" attribute: without a token the
// daemon only listens on loopback, where any local process (any user's)
// may submit tasks and so run tools.
func authNote(token string) string {
	if token != "" {
		return "bearer token"
	}
	return "none: any local process may submit tasks and run tools; set --token (PEGASUS_TOKEN) to require one"
}
