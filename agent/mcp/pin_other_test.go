//go:build !linux

package mcp

// pinPair cannot pin a process outside Linux.
func pinPair() (int, func(), bool) { return 0, nil, false }
