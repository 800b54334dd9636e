package tier

import (
	"slices"
	"testing"

	"github.com/kvtier/kvtier/blockpool"
	"github.com/kvtier/kvtier/gpu"
	"github.com/kvtier/kvtier/messages"
)

// loadInto frees seq and has seq 9 load the two-block prompt q from pinned
// memory into the blocks the free queue gives up first, returning the copy
// up and the blocks it writes.
func loadInto(t *testing.T, tr *Tier, seq uint64, q []int64) (Copy, []int) {
	t.Helper()
	freeSeqs(t, tr, seq)
	res, r := allocate(t, tr, 9, q, []messages.Tier{messages.Pinned, messages.Pinned})
	if res.Err != nil || res.Tokens.Of(messages.Pinned) != 2*bs {
		t.Fatalf("allocation of the load: %+v", res)
	}
	req := fetchRequest(t, r)
	tr.FetchGranted(&messages.FetchGrant{ID: req.ID, Slots: []int{0, 1}, Bytes: make([][]byte, 2)})
	r = drain(t, tr)
	if len(r.Copies) != 1 || r.Copies[0].Dir != gpu.H2D {
		t.Fatalf("copies %+v, want one copy up", r.Copies)
	}
	var into []int
	for _, op := range r.Copies[0].Ops {
		into = append(into, op.Block)
	}
	return r.Copies[0], into
}

// TestLoadWaitsForFenceOfFreedPartialBlock: an engine commits once its
// kernels are enqueued (CommitBatch naming the pass's fence), here a chunk
// that ends mid-block, then frees the sequence (preempted for recompute)
// while the pass still runs. The partial block, never published, goes back
// to the free queue's head, and a load takes it at once: its copy up runs
// on the copy stream, beside the compute stream that still writes the
// block. Unless the copy waits for the fence, the pass's write can land
// after it, and the block the load publishes (findable, and written down
// under the loaded prefix's digest later) holds the preempted sequence's
// KV.
func TestLoadWaitsForFenceOfFreedPartialBlock(t *testing.T) {
	tr := newTier(t, 3, Config{Lower: true})
	p := prompt(1, 2*bs)
	if res, _ := allocate(t, tr, 1, p, []messages.Tier{}); res.Err != nil {
		t.Fatal(res.Err)
	}
	f := gpu.NewHostFence() // the pass is enqueued, not run
	tr.CommitBatch([]messages.CommitItem{{Seq: 1, Tokens: bs + bs/2, After: f}}, func(*messages.CommitBatchResult) {})
	drain(t, tr)
	partial := seqTable(t, tr, 1)[1]
	c, into := loadInto(t, tr, 1, prompt(100, 2*bs))
	if !slices.Contains(into, int(partial)) {
		t.Fatalf("the load writes blocks %v, not the freed partial block %d: the probe needs it", into, partial)
	}
	if !slices.ContainsFunc(c.Fences, func(x gpu.Fence) bool { return sameFence(x, f) }) {
		t.Fatalf("the copy up into block %d waits on fences %v, not on the fence of the pass still writing it", partial, c.Fences)
	}
}

// TestLoadWaitsForFenceOfFreedDuplicate: two sequences compute one prefix
// at once; the second's commit (behind a fence not yet done) finds the
// first's blocks published, so its own stay unpublished duplicates, and are
// discarded when it is freed. A load taking them at once must wait for the
// fence of the pass still writing them.
func TestLoadWaitsForFenceOfFreedDuplicate(t *testing.T) {
	tr := newTier(t, 4, Config{Lower: true})
	p := prompt(1, 2*bs)
	for _, s := range []uint64{1, 2} {
		if res, _ := allocate(t, tr, s, p, []messages.Tier{}); res.Err != nil {
			t.Fatal(res.Err)
		}
	}
	tr.CommitBatch([]messages.CommitItem{{Seq: 1, Tokens: 2 * bs}}, func(*messages.CommitBatchResult) {})
	drain(t, tr)
	f := gpu.NewHostFence()
	tr.CommitBatch([]messages.CommitItem{{Seq: 2, Tokens: 2 * bs, After: f}}, func(*messages.CommitBatchResult) {})
	drain(t, tr)
	dup := seqTable(t, tr, 2)
	if _, cached := tr.pool.BlockHash(dup[0]); cached {
		t.Fatalf("block %d of the second sequence was published: not a duplicate", dup[0])
	}
	c, into := loadInto(t, tr, 2, prompt(100, 2*bs))
	if !slices.Contains(into, int(dup[0])) && !slices.Contains(into, int(dup[1])) {
		t.Fatalf("the load writes blocks %v, none of the duplicates %v", into, dup)
	}
	if !slices.ContainsFunc(c.Fences, func(x gpu.Fence) bool { return sameFence(x, f) }) {
		t.Fatalf("the copy up into %v waits on fences %v, not on the fence of the pass still writing the duplicates %v", into, c.Fences, dup)
	}
}

// seqTable returns seq's block table.
func seqTable(t *testing.T, tr *Tier, seq uint64) []blockpool.BlockID {
	t.Helper()
	table, err := tr.pool.Table(nil, blockpool.SeqID(seq))
	if err != nil {
		t.Fatal(err)
	}
	return table
}

// TestLoadWaitsForPassReadingFreedBlock: a sequence that hit a cached
// prefix commits its new block behind its pass's fence and is freed while
// the pass runs; the pass still reads the prefix's blocks (attention), so
// a load that takes one of them once it is evicted must wait for the
// fence too. Otherwise the copy up overwrites the block before the pass
// reads it, and the new block the pass writes (published, then written
// down when evicted) holds KV computed from another prefix.
func TestLoadWaitsForPassReadingFreedBlock(t *testing.T) {
	read, up, f := loadUnderReadingPass(t, false)
	if !slices.ContainsFunc(up.Fences, func(x gpu.Fence) bool { return sameFence(x, f) }) {
		t.Fatalf("the copy up into block %d waits on %v, not on the fence of the pass still reading it", read, up.Fences)
	}
}

// loadUnderReadingPass runs TestLoadWaitsForPassReadingFreedBlock's world:
// a sequence over a cached prefix commits its new block behind fence f
// (then, with repeat, commits the same count again naming no fence) and is
// freed with its pass running; a load then takes block read, the prefix's
// block the pass reads. It returns that block, the load's copy up and f.
func loadUnderReadingPass(t *testing.T, repeat bool) (blockpool.BlockID, *Copy, gpu.Fence) {
	t.Helper()
	tr := newTier(t, 3, Config{Lower: true})
	if res, _ := allocate(t, tr, 1, prompt(1, 2*bs), []messages.Tier{}); res.Err != nil {
		t.Fatal(res.Err)
	}
	commitOK(t, tr, messages.CommitItem{Seq: 1, Tokens: 2 * bs})
	freeSeqs(t, tr, 1)
	res, _ := allocate(t, tr, 2, prompt(1, 3*bs), []messages.Tier{})
	if res.Err != nil || res.Tokens.Of(messages.GPU) != 2*bs {
		t.Fatalf("allocation over the cached prefix: %+v", res)
	}
	read := res.Blocks[1] // the pass reads it
	f := gpu.NewHostFence()
	commitOK(t, tr, messages.CommitItem{Seq: 2, Tokens: 3 * bs, After: f})
	if repeat {
		commitOK(t, tr, messages.CommitItem{Seq: 2, Tokens: 3 * bs})
	}
	freeSeqs(t, tr, 2) // preempted, its pass running
	// Another allocation takes the new block, the next to be evicted.
	if res, _ := allocate(t, tr, 3, prompt(500, bs), []messages.Tier{}); res.Err != nil {
		t.Fatal(res.Err)
	}
	res, r := allocate(t, tr, 4, prompt(900, bs), []messages.Tier{messages.Pinned})
	if res.Err != nil || len(res.Blocks) != 1 || res.Blocks[0] != read {
		t.Fatalf("the load takes %v, not block %d the pass reads: the probe needs it (%+v)", res.Blocks, read, res)
	}
	return read, grantLoad(t, tr, r), f
}

// TestLoadWaitsForFenceOfAbortedPass: an engine aborts a sequence whose
// pass is enqueued and nothing of it committed. A commit of 0 tokens naming
// the pass's fence changes nothing in the pool, but a load into the freed
// blocks waits for it: that is how the engine frees at once.
func TestLoadWaitsForFenceOfAbortedPass(t *testing.T) {
	tr := newTier(t, 2, Config{Lower: true})
	if res, _ := allocate(t, tr, 1, prompt(1, 2*bs), []messages.Tier{}); res.Err != nil {
		t.Fatal(res.Err)
	}
	f := gpu.NewHostFence()
	var cr *messages.CommitBatchResult
	tr.CommitBatch([]messages.CommitItem{{Seq: 1, Tokens: 0, After: f}}, func(r *messages.CommitBatchResult) { cr = r })
	drain(t, tr)
	if cr == nil || cr.Errs[0] != nil {
		t.Fatalf("commit of 0 tokens: %+v", cr)
	}
	if n, _ := tr.pool.Committed(1); n != 0 {
		t.Fatalf("a commit of 0 tokens committed %d", n)
	}
	c, into := loadInto(t, tr, 1, prompt(100, 2*bs))
	if len(into) != 2 {
		t.Fatalf("the load writes %v", into)
	}
	if !slices.ContainsFunc(c.Fences, func(x gpu.Fence) bool { return sameFence(x, f) }) {
		t.Fatalf("the copy up into the aborted sequence's blocks %v waits on %v, not on its pass's fence", into, c.Fences)
	}
}

// grantLoad grants the load r asks pinned memory for (after denying the
// write downs of evicted blocks it may wait behind) and returns its copy
// up.
func grantLoad(t *testing.T, tr *Tier, r Ready) *Copy {
	t.Helper()
	var req *messages.FetchRequest
	for i := 0; req == nil && i < 4; i++ {
		for _, m := range r.ToPinned {
			switch m := m.(type) {
			case *messages.FetchRequest:
				req = m
			case *messages.OffloadRequest:
				tr.OffloadGranted(&messages.OffloadGrant{ID: m.ID, Slots: []int{messages.SlotDenied}, Bytes: make([][]byte, 1)})
			}
		}
		if req == nil {
			r = drain(t, tr)
		}
	}
	if req == nil {
		t.Fatal("no FetchRequest")
	}
	tr.FetchGranted(&messages.FetchGrant{ID: req.ID, Slots: []int{0}, Bytes: make([][]byte, 1)})
	r = drain(t, tr)
	i := slices.IndexFunc(r.Copies, func(c Copy) bool { return c.Dir == gpu.H2D })
	if i < 0 {
		t.Fatalf("copies %+v, want a copy up", r.Copies)
	}
	return &r.Copies[i]
}
