package kvtier

import (
	"context"
	"testing"

	"github.com/kvtier/kvtier/policy"
)

// TestClassReachesLowerPolicies: the blocks a request allocated with a
// Class commits reach the policies of pinned memory and of the disk with
// that class as they land there (policy.Adaptive reads hints; class_hints
// counts them); the other requests' blocks, of no class, are not counted.
func TestClassReachesLowerPolicies(t *testing.T) {
	cfg := diskConfig(t, t.TempDir())
	cfg.PinnedPolicy = policy.Adaptive // over a disk it defaults to LRU, which reads none
	m := newManager(t, cfg)
	a := toks(100, 4*bt)
	pushDownReq(t, m, AllocRequest{Seq: 1, Tokens: a, Class: 5})
	st, err := m.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if p, d := st.Tier(Pinned).Extra["class_hints"], st.Tier(Disk).Extra["class_hints"]; p != 4 || d != 4 {
		t.Fatalf("class hints pinned %v disk %v, want 4 each: the classed request's 4 blocks", p, d)
	}
}
