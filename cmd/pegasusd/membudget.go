package main

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/pegasus-engine/pegasus/replay"
)

// memoryBudgetFlag is the default of --memory-budget: replay's default.
const memoryBudgetFlag = "256MiB"

// parseMemoryBudget reads --memory-budget: a number of bytes with an
// optional binary suffix (KiB, MiB, GiB), e.g. 256MiB or 1GiB.
func parseMemoryBudget(s string) (int64, error) {
	num, mult := strings.TrimSpace(s), int64(1)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}} {
		if n, ok := strings.CutSuffix(num, u.suffix); ok {
			num, mult = strings.TrimSpace(n), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	switch {
	case err != nil || n <= 0 || n > (1<<62)/mult:
		return 0, fmt.Errorf("--memory-budget %q: want a size such as 256MiB or 2GiB (bytes, KiB, MiB or GiB)", s)
	case n*mult < replay.MinMemoryBudget:
		return 0, fmt.Errorf("--memory-budget %q: the smallest budget is 1MiB", s)
	}
	return n * mult, nil
}
