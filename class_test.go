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
	classedPushDown(t, AllocRequest{Seq: 1, Tokens: toks(100, 4*bt), Class: 5}, 0)
}

// TestFinishingClassReachesLowerPolicies: a request allocated with no class
// whose finishing commit gives one (CommitItem.Class: the engine knows the
// output length only then) has its blocks reach pinned memory's and the
// disk's policies with that class, as one allocated with it does.
func TestFinishingClassReachesLowerPolicies(t *testing.T) {
	classedPushDown(t, AllocRequest{Seq: 1, Tokens: toks(100, 4*bt)}, policy.OutputClass(17))
}

// classedPushDown pushes req's 4 blocks down to the disk of a Manager whose
// pinned tier and disk read hints, its finishing commit giving finish (when
// not 0), reads them back from the disk, and fails unless both tiers'
// policies got all 4 with a class.
func classedPushDown(t *testing.T, req AllocRequest, finish uint8) {
	t.Helper()
	cfg := diskConfig(t, t.TempDir())
	cfg.PinnedPolicy = policy.Adaptive // over a disk it defaults to LRU, which reads none
	m := newManager(t, cfg)
	pushDownFinished(t, m, req, finish)
	loadsFromDisk(t, m, req.Tokens)
	st, err := m.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if p, d := st.Tier(Pinned).Extra["class_hints"], st.Tier(Disk).Extra["class_hints"]; p != 4 || d != 4 {
		t.Fatalf("class hints pinned %v disk %v, want 4 each: the classed request's 4 blocks", p, d)
	}
}

// loadsFromDisk allocates a, which only the disk holds, and fails unless
// every token loads (a classed record once failed every read: the header
// check compared the class, which is not recorded).
func loadsFromDisk(t *testing.T, m *Manager, a []int64) {
	t.Helper()
	r, err := m.Allocate(context.Background(), AllocRequest{Seq: 99, Tokens: a})
	if err != nil {
		t.Fatal(err)
	}
	wait(t, r)
	if got, n := r.Ready.Outcome(), r.Tokens.Of(Disk); n < len(a)-1 || got.ValidTokens != n || got.Failed != 0 {
		t.Fatalf("reload of the disk's blocks: tokens %v, outcome %+v", r.Tokens, got)
	}
}
