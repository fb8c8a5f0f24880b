package randfill

import (
	"math/rand/v2"
	"testing"
)

// Rand returns the random source of a test that fills values: from seed,
// or a new seed when it is 0, logged with the flag that repeats it;
// stream tells the tests that share one seed flag apart.
func Rand(t testing.TB, seed uint64, flag string, stream uint64) *rand.Rand {
	t.Helper()
	if seed == 0 {
		seed = rand.Uint64()
	}
	t.Logf("seed %d (rerun with -%s %d)", seed, flag, seed)
	return rand.New(rand.NewPCG(seed, stream))
}
