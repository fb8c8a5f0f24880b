// Package yield paces long CPU-bound loops of background goroutines.
package yield

import "runtime"

// Pacer yields the processor (runtime.Gosched) from a long loop once every
// 32 KiB of work or 128 steps. A background loop (encoding or writing a
// projection checkpoint) otherwise keeps the goroutines it competes with
// on two cores, such as the fold that an append readied or the log's
// committer, waiting up to the scheduler's 10 ms preemption tick. The zero
// value is ready to use.
type Pacer struct{ bytes, steps int }

// Step counts one step of n bytes of work and yields when enough was done.
func (p *Pacer) Step(n int) {
	p.bytes += n
	if p.steps++; p.bytes >= 32<<10 || p.steps >= 128 {
		p.bytes, p.steps = 0, 0
		runtime.Gosched()
	}
}
