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
// exist on traces no constant was tuned on: the embedded conversation sample
// and trace.Synthetic's default workload. At every capacity it gets at least
// the hits of the best of LRU, FIFO, S3-FIFO and ARC.
func TestAdaptiveAtLeastBestClassic(t *testing.T) {
	syn, err := trace.Synthetic(trace.DefaultSyntheticConfig())
	if err != nil {
		t.Fatal(err)
	}
	for name, tr := range map[string][]trace.Request{"sample": trace.Sample(), "synthetic": syn} {
		for _, c := range []int{256, 1024, 4096} {
			a := mustSimulate(t, tr, c, policy.Adaptive, Options{})
			for _, k := range []policy.Kind{policy.LRU, policy.FIFO, policy.S3FIFO, policy.ARC} {
				if r := mustSimulate(t, tr, c, k, Options{}); r.Hits > a.Hits {
					t.Errorf("%s at %d blocks: %v %v above adaptive %v", name, c, k, r, a)
				}
			}
		}
	}
}
