package tier

import (
	"testing"

	"github.com/kvtier/kvtier/gpu"
	"github.com/kvtier/kvtier/messages"
)

// TestFenceBooksStayBounded drives many sequences through a shared
// prefix: each allocates (hitting the prefix), commits its new block
// behind a fence of its own and is freed with the pass still running,
// while the engine signals each fence lag rounds later; some sequences
// are never freed. The books the copy up's fences keep (lastFence,
// readFences and their lists) must stay bounded by the blocks and the
// passes in flight, not grow with the rounds.
func TestFenceBooksStayBounded(t *testing.T) {
	const (
		rounds = 20000
		lag    = 8  // passes in flight
		live   = 16 // sequences never freed
		blocks = 64
	)
	tr := newTier(t, blocks, Config{})
	p := prompt(1, 2*bs)
	var fences []*gpu.HostFence
	maxRead, maxList, maxLast := 0, 0, 0
	for r := range rounds {
		seq := uint64(1 + r%(4*lag)) // ids reused
		if r < live {
			seq = uint64(1000 + r)
		}
		q := append(append([]int64(nil), p...), prompt(100+r, bs)...)
		if res, _ := allocate(t, tr, seq, q, []messages.Tier{}); res.Err != nil {
			t.Fatalf("round %d: %v", r, res.Err)
		}
		f := gpu.NewHostFence()
		fences = append(fences, f)
		tr.CommitBatch([]messages.CommitItem{{Seq: seq, Tokens: len(q), After: f}}, func(*messages.CommitBatchResult) {})
		drain(t, tr)
		if r >= live {
			freeSeqs(t, tr, seq)
		}
		if len(fences) > lag {
			fences[0].Signal()
			fences = fences[1:]
		}
		maxLast = max(maxLast, len(tr.lastFence))
		n := 0
		for _, fs := range tr.readFences {
			if len(fs) > 0 {
				n++
			}
			maxList = max(maxList, len(fs))
		}
		maxRead = max(maxRead, n)
	}
	t.Logf("after %d rounds: readFences at most %d blocks, lists at most %d fences, lastFence at most %d sequences", rounds, maxRead, maxList, maxLast)
	if maxRead > blocks || maxList > lag+1 || maxLast > live+1 {
		t.Fatalf("fence books grew: readFences %d blocks (pool %d), a list %d fences (%d in flight), lastFence %d (%d live)", maxRead, blocks, maxList, lag, maxLast, live)
	}
}
