package main

import "testing"

func TestParseMemoryBudget(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int64
	}{
		{"256MiB", 256 << 20}, {"2GiB", 2 << 30}, {"4096KiB", 4 << 20}, {"1048576", 1 << 20}, {" 64 MiB ", 64 << 20},
		{"", 0}, {"256MB", 0}, {"-1MiB", 0}, {"0", 0}, {"512KiB", 0}, {"abc", 0}, {"9999999999GiB", 0},
	} {
		got, err := parseMemoryBudget(c.in)
		if c.want == 0 {
			if err == nil {
				t.Errorf("parseMemoryBudget(%q) = %d, want an error", c.in, got)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("parseMemoryBudget(%q) = %d, %v; want %d", c.in, got, err, c.want)
		}
	}
}
