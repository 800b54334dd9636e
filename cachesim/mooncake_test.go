package cachesim

import (
	"fmt"
	"testing"

	"github.com/kvtier/kvtier/policy"
)

// TestMooncakeReferenceStatistics reproduces the ideal and LRU hit ratios that
// /work/shared/traces/README.md lists for the Mooncake traces, to two decimals.
// It skips when the files are absent.
func TestMooncakeReferenceStatistics(t *testing.T) {
	if testing.Short() {
		t.Skip("replays the full traces")
	}
	type lru struct {
		capacity         int
		forward, reverse string
	}
	files := []struct {
		name  string
		ideal string
		lru   []lru
	}{
		{"conversation_trace.jsonl", "36.64", []lru{
			{1 << 10, "4.45", "4.48"}, {4 << 10, "8.76", "8.79"}, {16 << 10, "26.56", "26.56"}, {64 << 10, "35.94", "35.94"}}},
		{"synthetic_trace.jsonl", "63.96", []lru{
			{1 << 10, "8.38", "8.50"}, {4 << 10, "23.69", "24.37"}, {16 << 10, "53.11", "53.16"}, {64 << 10, "63.96", "63.96"}}},
	}
	pct := func(r Result) string { return fmt.Sprintf("%.2f", 100*r.HitRatio) }
	for _, f := range files {
		tr := readShared(t, f.name)
		if got := pct(Infinite(tr)); got != f.ideal {
			t.Errorf("%s: ideal %s%%, README %s%%", f.name, got, f.ideal)
		}
		for _, c := range f.lru {
			fw := mustSimulate(t, tr, c.capacity, policy.LRU, Options{})
			rv := mustSimulate(t, tr, c.capacity, policy.LRU, Options{ReverseTouch: true})
			if pct(fw) != c.forward || pct(rv) != c.reverse {
				t.Errorf("%s: LRU %d: %s / %s%%, README %s / %s%%", f.name, c.capacity, pct(fw), pct(rv), c.forward, c.reverse)
			}
		}
	}
}
