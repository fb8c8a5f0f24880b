package main

import (
	"time"

	"github.com/schollz/progressbar/v3"
)

// progressMin is the number of events from which a fold is "long" and gets a
// progress bar. Smaller folds finish before a bar would be worth drawing.
const progressMin = 100_000

// progress draws a bar on stderr while a long fold runs. It is a no-op
// (including on a nil *progress) unless stderr is a terminal and the fold
// covers at least progressMin events, so redirected output and scripts
// never see it.
type progress struct {
	bar *progressbar.ProgressBar
}

// newProgress returns a bar for a fold of total events, or nil.
func newProgress(std *stdio, total uint64, what string) *progress {
	if !std.errTTY || total < progressMin {
		return nil
	}
	bar := progressbar.NewOptions64(int64(total),
		progressbar.OptionSetWriter(std.err),
		progressbar.OptionSetDescription(what),
		progressbar.OptionShowCount(),
		progressbar.OptionShowIts(),
		progressbar.OptionSetItsString("events"),
		progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionClearOnFinish(),
		progressbar.OptionSetWidth(30),
	)
	return &progress{bar: bar}
}

// set reports that the fold has reached n events.
func (p *progress) set(n uint64) {
	if p == nil {
		return
	}
	_ = p.bar.Set64(int64(n))
}

// phase shows the phase of a multi-phase run (verify) and how far it is;
// total 0 keeps the bar's length.
func (p *progress) phase(name string, done, total uint64) {
	if p == nil {
		return
	}
	p.bar.Describe(name)
	if total > 0 {
		p.bar.ChangeMax64(int64(total))
	}
	_ = p.bar.Set64(int64(done))
}

// done clears the bar.
func (p *progress) done() {
	if p == nil {
		return
	}
	_ = p.bar.Finish()
}
