package cachesim

import (
	"math"
	"testing"

	"github.com/kvtier/kvtier/policy"
	"github.com/kvtier/kvtier/trace"
)

// TestHintsReachThePolicy: Simulate hands a Hinted policy each block's
// depth, so a three-block tier evicts the deepest block of a four-block
// prompt and the next prompt hits its whole three-block prefix, as OPT does;
// LRU evicts the root and hits nothing.
func TestHintsReachThePolicy(t *testing.T) {
	tr := reqs(ids(1, 2, 3, 4), ids(1, 2, 3))
	opt := OPT(tr, 3)
	p, err := policy.NewAdaptive(3, policy.AdaptiveConfig{Candidates: []policy.Candidate{{Rank: policy.RankSecondUse, Window: math.Inf(1)}}})
	if err != nil {
		t.Fatal(err)
	}
	got, err := SimulatePolicy(tr, 3, p, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Hits != opt.Hits {
		t.Fatalf("adaptive %v, OPT %v", got, opt)
	}
	if lru := mustSimulate(t, tr, 3, policy.LRU, Options{}); lru.Hits >= got.Hits {
		t.Fatalf("LRU %v not below adaptive %v: the trace does not test hints", lru, got)
	}
}

// TestAdaptiveAtLeastBestClassic guards the default policy's reason to
// exist on traces no constant was tuned on: the embedded conversation sample,
// trace.Synthetic's default workload, one without shared system prompts and
// one of long conversations. At every capacity it gets at least the hits of
// the best of LRU, FIFO, S3-FIFO and ARC.
func TestAdaptiveAtLeastBestClassic(t *testing.T) {
	traces := map[string][]trace.Request{"sample": trace.Sample()}
	for name, mod := range map[string]func(*trace.SyntheticConfig){
		"synthetic":             func(*trace.SyntheticConfig) {},
		"synthetic, no system":  func(c *trace.SyntheticConfig) { c.SystemPrompts = 0 },
		"synthetic, 8-20 turns": func(c *trace.SyntheticConfig) { c.Turns, c.Sessions = trace.IntRange{Min: 8, Max: 20}, 400 },
	} {
		traces[name] = synthetic(t, mod)
	}
	for name, tr := range traces {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			for _, c := range []int{256, 1024, 4096} {
				a := mustSimulate(t, tr, c, policy.Adaptive, Options{})
				if r, k := bestClassic(t, tr, c); r.Hits > a.Hits {
					t.Errorf("%d blocks: %v %v above adaptive %v", c, k, r, a)
				}
			}
		})
	}
}
