package eventlog

import (
	"context"
	"slices"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestScanAuxRange: a range of aux keys in either direction, bounds
// inclusive below and exclusive above, nil upper meaning every key from
// lower on.
func TestScanAuxRange(t *testing.T) {
	l := mustOpen(t, "db", testOptions(vfs.NewMem()))
	defer closeLog(t, l)
	if err := l.WriteAux(context.Background(), func(b *AuxBatch) error {
		for _, k := range []string{"j", "k/1", "k/2", "k/3", "k/4", "l"} {
			b.Set([]byte(k), []byte("v"+k))
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	scan := func(lower, upper string, dir Direction) []string {
		var up []byte
		if upper != "" {
			up = []byte(upper)
		}
		it := l.ScanAuxRange([]byte(lower), up, dir)
		var keys []string
		for it.Next() {
			if string(it.Value()) != "v"+string(it.Key()) {
				t.Fatalf("value of %q: %q", it.Key(), it.Value())
			}
			keys = append(keys, string(it.Key()))
		}
		if err := it.Close(); err != nil {
			t.Fatal(err)
		}
		return keys
	}
	for _, c := range []struct {
		lower, upper string
		dir          Direction
		want         []string
	}{
		{"k/2", "k/4", Forward, []string{"k/2", "k/3"}},
		{"k/2", "k/4", Backward, []string{"k/3", "k/2"}},
		{"k/", "", Forward, []string{"k/1", "k/2", "k/3", "k/4", "l"}},
		{"k/", "", Backward, []string{"l", "k/4", "k/3", "k/2", "k/1"}},
		{"k/5", "l", Backward, nil},
	} {
		if got := scan(c.lower, c.upper, c.dir); !slices.Equal(got, c.want) {
			t.Errorf("[%q, %q) %v: %v, want %v", c.lower, c.upper, c.dir, got, c.want)
		}
	}
}
