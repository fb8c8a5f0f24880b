// Package sse reads Server-Sent Events
// (https://html.spec.whatwg.org/multipage/server-sent-events.html), as
// pegasusd's GET /v1/events/stream sends them. It imports only the
// standard library: package client uses it, and so do both command-line
// programs (through cliconv).
package sse
