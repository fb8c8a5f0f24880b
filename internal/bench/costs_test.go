package bench

import (
	"bytes"
	"context"
	"math/rand"
	"path/filepath"
	"strings"
	"testing"
)

// Every cost store checks expected versions and stores what it is given;
// the cost table names every store and gives ratios to the last.
func TestCostStores(t *testing.T) {
	ctx := context.Background()
	for _, o := range CostOpeners {
		t.Run(o.Name, func(t *testing.T) {
			s, err := o.Open(filepath.Join(t.TempDir(), "db"))
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			rng := rand.New(rand.NewSource(1))
			if err := s.AppendExpect(ctx, "a", 0, costEvents(rng, 3)); err != nil {
				t.Fatal(err)
			}
			if err := s.AppendExpect(ctx, "a", 0, costEvents(rng, 1)); err == nil {
				t.Fatal("stale expected version accepted")
			}
			if err := s.AppendExpect(ctx, "a", 3, costEvents(rng, 2)); err != nil {
				t.Fatal(err)
			}
			if n, err := s.ScanAll(); err != nil || n != 5 {
				t.Fatalf("scan: %d events, %v", n, err)
			}
		})
	}
	rows := []CostRow{{Name: "w", Unit: "events/s", HigherIsBetter: true, Values: [][]float64{{2, 4, 3}, {1, 2, 2}, {1, 1, 1}}}}
	var buf bytes.Buffer
	PrintCosts(&buf, rows, CostOpeners, true)
	if got := buf.String(); !strings.Contains(got, "| w | 3.0 events/s (3.00x) | 2.0 events/s (2.00x) | 1.0 events/s |") {
		t.Fatalf("table:\n%s", got)
	}
}
