//go:build race

package replay

// raceEnabled reports a build with the race detector, where a test that
// folds tens of thousands of events for a figure, not for concurrency,
// takes too long.
const raceEnabled = true
