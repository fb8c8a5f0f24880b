package engine

import (
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// A slow append writes the flight recorder's window to the directory,
// once: a second spike within spikeQuiet writes nothing more, and an
// append under spikeAfter is no spike.
func TestSpikeTrace(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "spikes")
	st := startSpikeTrace(dir, slog.New(slog.DiscardHandler))
	if st == nil {
		t.Fatal("the flight recorder did not start")
	}
	defer st.stop()
	st.later = func(_ time.Duration, f func()) { f() }
	st.spike("append", spikeAfter-time.Millisecond)
	st.spike("append", spikeAfter)
	st.spike("append", time.Second)
	files, _ := filepath.Glob(filepath.Join(dir, "spike-*.trace"))
	if len(files) != 1 {
		t.Fatalf("trace files %v, want one", files)
	}
	fi, err := os.Stat(files[0])
	if err != nil || fi.Size() == 0 {
		t.Fatalf("trace file: %v, %v", fi, err)
	}
	if st.written != 1 {
		t.Errorf("%d traces scheduled, want 1", st.written)
	}
	var nilTracer *spikeTracer
	nilTracer.spike("append", time.Second) // off: nothing, no panic
	nilTracer.stop()
}
