package tier

import (
	"slices"
	"testing"

	"github.com/kvtier/kvtier/blockpool"
	"github.com/kvtier/kvtier/messages"
)

func journalTier(t *testing.T, blocks int, cfg Config) *Tier {
	t.Helper()
	pool, err := blockpool.New(blockpool.Config{NumBlocks: blocks, BlockSize: bs, Digests: true, Journal: true})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Pool, cfg.BlockBytes, cfg.Lower, cfg.Ingestion = pool, 64, true, IngestEvict
	cfg.DoubleGetMinBlocks = 1
	tr := New(cfg)
	tr.SetNow(t0)
	return tr
}

func changes(r *messages.Residency) (stored, removed []uint64) {
	if r == nil {
		return nil, nil
	}
	for _, c := range r.Changes {
		if c.Stored {
			stored = append(stored, c.Hash)
		} else {
			removed = append(removed, c.Hash)
		}
	}
	return stored, removed
}

// TestResidencyReportsCommitsAndHoldsEvictedWrites: committed blocks are
// reported stored, chained to their parent with their tokens; blocks
// evicted while being written down are reported removed only with the
// copy's end (ResidencyAfter, sent behind the OffloadDone), so the event
// stream never shows a block gone from the GPU before it is stored below.
func TestResidencyReportsCommitsAndHoldsEvictedWrites(t *testing.T) {
	tr := journalTier(t, 2, Config{})
	p := prompt(1, 2*bs)
	if res, _ := allocate(t, tr, 1, p, []messages.Tier{}); res.Err != nil {
		t.Fatal(res.Err)
	}
	if r := drain(t, tr); r.Residency != nil {
		t.Fatalf("an allocation reported %+v: nothing is computed yet", r.Residency)
	}
	tr.CommitBatch([]messages.CommitItem{{Seq: 1, Tokens: 2 * bs}}, func(*messages.CommitBatchResult) {})
	r := drain(t, tr)
	keys := blockpool.ComputeKeys("", p, bs, true)
	want := []uint64{uint64(keys.Hashes[0]), uint64(keys.Hashes[1])}
	if st, rm := changes(r.Residency); !slices.Equal(st, want) || rm != nil {
		t.Fatalf("commit reported stored %x removed %x, want stored %x", st, rm, want)
	}
	c := r.Residency.Changes
	if c[0].HasParent || !c[1].HasParent || c[1].Parent != want[0] || !slices.Equal(c[1].Tokens, p[bs:]) {
		t.Fatalf("chain %+v", c)
	}
	tr.FreeBatch([]uint64{1}, false, func(*messages.FreeBatchResult) {})
	drain(t, tr)

	// Another prompt takes both blocks: evicted, written down first.
	res, r := allocate(t, tr, 2, prompt(100, 2*bs), []messages.Tier{})
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	if _, rm := changes(r.Residency); len(rm) > 0 {
		t.Fatalf("removals %x reported while their write down is in flight", rm)
	}
	var off *messages.OffloadRequest
	for _, m := range r.ToPinned {
		if o, ok := m.(*messages.OffloadRequest); ok {
			off = o
		}
	}
	if off == nil {
		t.Fatal("no OffloadRequest for the evicted blocks")
	}
	tr.OffloadGranted(&messages.OffloadGrant{ID: off.ID, Slots: []int{0, 1}, Bytes: [][]byte{make([]byte, 64), make([]byte, 64)}})
	r = drain(t, tr)
	if _, rm := changes(r.ResidencyAfter); len(rm) > 0 {
		t.Fatal("removals reported before the copy ended")
	}
	tr.CopyDone(r.Copies[0].CopyID, nil)
	r = drain(t, tr)
	if _, rm := changes(r.ResidencyAfter); !slices.Equal(slices.Sorted(slices.Values(rm)), slices.Sorted(slices.Values(want))) {
		t.Fatalf("after the copy: removals %x, want %x", rm, want)
	}
	if !slices.ContainsFunc(r.ToPinned, func(m any) bool { _, ok := m.(*messages.OffloadDone); return ok }) {
		t.Fatal("no OffloadDone beside the removals")
	}
}

// TestResidencyRepublishedBlockNotRemoved: a block evicted while being
// written down, computed again before the write ends, stays reported held.
func TestResidencyRepublishedBlockNotRemoved(t *testing.T) {
	tr := journalTier(t, 3, Config{})
	p := prompt(1, bs)
	allocate(t, tr, 1, p, []messages.Tier{})
	tr.CommitBatch([]messages.CommitItem{{Seq: 1, Tokens: bs}}, func(*messages.CommitBatchResult) {})
	tr.FreeBatch([]uint64{1}, false, func(*messages.FreeBatchResult) {})
	drain(t, tr)
	_, r := allocate(t, tr, 2, prompt(100, 3*bs), []messages.Tier{}) // evicts the block, writing it down
	var off *messages.OffloadRequest
	for _, m := range r.ToPinned {
		if o, ok := m.(*messages.OffloadRequest); ok {
			off = o
		}
	}
	if off == nil {
		t.Fatal("no OffloadRequest")
	}
	tr.FreeBatch([]uint64{2}, false, func(*messages.FreeBatchResult) {})
	drain(t, tr)
	// Computed again into a fresh block while the copy is pending.
	allocate(t, tr, 3, p, []messages.Tier{})
	tr.CommitBatch([]messages.CommitItem{{Seq: 3, Tokens: bs}}, func(*messages.CommitBatchResult) {})
	drain(t, tr)
	tr.OffloadGranted(&messages.OffloadGrant{ID: off.ID, Slots: []int{0}, Bytes: [][]byte{make([]byte, 64)}})
	r = drain(t, tr)
	tr.CopyDone(r.Copies[0].CopyID, nil)
	r = drain(t, tr)
	if _, rm := changes(r.ResidencyAfter); len(rm) > 0 {
		t.Fatalf("removed %x, which the GPU serves again", rm)
	}
}
