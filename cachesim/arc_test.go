package cachesim

import (
	"testing"

	"github.com/kvtier/kvtier/policy"
)

// TestHandMadeARC: prefix 1,2 is reused once, then two one-use prompts pass
// through a four-block tier. ARC keeps the reused prefix in T2 and evicts the
// one-use blocks from T1, matching OPT; LRU evicts the prefix.
func TestHandMadeARC(t *testing.T) {
	tr := reqs(ids(1, 2), ids(1, 2), ids(10, 11, 12), ids(20, 21, 22), ids(1, 2))
	wantResult(t, "arc", mustSimulate(t, tr, 4, policy.ARC, Options{}), 4, 12, 4)
	wantResult(t, "lru", mustSimulate(t, tr, 4, policy.LRU, Options{}), 2, 12, 6)
	wantResult(t, "opt", OPT(tr, 4), 4, 12, 4)
}

// TestARCOnConversationTrace guards the reason ARC exists: on the Mooncake
// conversation trace, where most blocks are used once, it beats LRU and
// S3-FIFO at tiers of 1k and 16k blocks (the report test prints the full
// table). It skips when the trace is absent.
func TestARCOnConversationTrace(t *testing.T) {
	if testing.Short() {
		t.Skip("replays the full trace")
	}
	tr := readShared(t, "conversation_trace.jsonl")
	for _, c := range []int{1 << 10, 16 << 10} {
		arc := mustSimulate(t, tr, c, policy.ARC, Options{})
		for _, k := range []policy.Kind{policy.LRU, policy.S3FIFO} {
			if r := mustSimulate(t, tr, c, k, Options{}); arc.Hits <= r.Hits {
				t.Errorf("capacity %d: ARC %v not above %v %v", c, arc, k, r)
			}
		}
	}
}
