// Package lint holds tests that keep the shape of the module true: the
// import direction between packages, the purity of fsm and projection, and
// one msgpack codec (internal/codec) for everything the module persists.
// It has no code of its own; see purity_test.go and codec_test.go.
package lint
