package tier

import (
	"slices"
	"testing"

	"github.com/kvtier/kvtier/gpu"
	"github.com/kvtier/kvtier/messages"
)

// A commit at or below the sequence's committed count changes nothing
// (vLLM's cache_blocks is called each step with the running count, and
// Manager.Commit names no fence). Made with no fence after the commit
// naming the pass's fence, it must not make the tier forget that pass:
// freed, the sequence's blocks are still written or read by it, and a
// load into them must wait for its fence.

// TestRepeatCommitKeepsAbortedPassFence: the pass was aborted (its commit
// names 0 tokens), so only the fence kept for the freed sequence orders
// the load after it.
func TestRepeatCommitKeepsAbortedPassFence(t *testing.T) {
	tr := newTier(t, 2, Config{Lower: true})
	if res, _ := allocate(t, tr, 1, prompt(1, 2*bs), []messages.Tier{}); res.Err != nil {
		t.Fatal(res.Err)
	}
	f := gpu.NewHostFence()
	commitOK(t, tr, messages.CommitItem{Seq: 1, Tokens: 0, After: f})
	commitOK(t, tr, messages.CommitItem{Seq: 1, Tokens: 0}) // the repeat
	c, into := loadInto(t, tr, 1, prompt(100, 2*bs))
	if len(into) != 2 {
		t.Fatalf("the load writes %v", into)
	}
	if !slices.ContainsFunc(c.Fences, func(x gpu.Fence) bool { return sameFence(x, f) }) {
		t.Fatalf("the copy up into blocks %v waits on %v, not on the fence of the aborted pass still writing them: the repeat commit with no fence dropped it", into, c.Fences)
	}
}

// TestRepeatCommitKeepsReadingPassFence: as
// TestLoadWaitsForPassReadingFreedBlock, with a repeat of the commit,
// naming no fence, before the free: the pass still reads the prefix's
// block the load takes.
func TestRepeatCommitKeepsReadingPassFence(t *testing.T) {
	read, up, f := loadUnderReadingPass(t, true)
	if !slices.ContainsFunc(up.Fences, func(x gpu.Fence) bool { return sameFence(x, f) }) {
		t.Fatalf("the copy up into block %d waits on %v, not on the fence of the pass still reading it: the repeat commit with no fence dropped it", read, up.Fences)
	}
}

// commitOK commits it and fails t unless the commit is answered without
// error.
func commitOK(t *testing.T, tr *Tier, it messages.CommitItem) {
	t.Helper()
	var cr *messages.CommitBatchResult
	tr.CommitBatch([]messages.CommitItem{it}, func(r *messages.CommitBatchResult) { cr = r })
	drain(t, tr)
	if cr == nil || cr.Errs[0] != nil {
		t.Fatalf("commit %+v: %+v", it, cr)
	}
}
