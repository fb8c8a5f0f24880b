// Package lint holds tests that keep the shape of the module true: the
// import direction between packages and the purity of fsm and projection.
// It has no code of its own; see purity_test.go.
package lint
