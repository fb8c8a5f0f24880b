//go:build !linux

package mcp

// pinSelf cannot pin a process outside Linux.
func pinSelf(int) (func(), bool) { return nil, false }
