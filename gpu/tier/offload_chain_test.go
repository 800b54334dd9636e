package tier

import (
	"slices"
	"testing"

	"github.com/kvtier/kvtier/blockpool"
	"github.com/kvtier/kvtier/messages"
	"github.com/kvtier/kvtier/prefixhash"
)

// offloadOf returns the OffloadRequest in r.
func offloadOf(t *testing.T, r Ready) *messages.OffloadRequest {
	t.Helper()
	for _, m := range r.ToPinned {
		if o, ok := m.(*messages.OffloadRequest); ok {
			return o
		}
	}
	t.Fatal("no OffloadRequest")
	return nil
}

// checkChains checks that items describe the blocks of tokens in
// namespace ns (keys k): parent, a copy of the token ids, namespace id and
// adapter.
func checkChains(t *testing.T, items []messages.OffloadItem, tokens []int64, ns string, k *blockpool.Keys) {
	t.Helper()
	if len(items) != len(k.Hashes) {
		t.Fatalf("%d items for %d blocks", len(items), len(k.Hashes))
	}
	id, _ := prefixhash.Seed(ns)
	for _, it := range items {
		i := slices.Index(k.Hashes, prefixhash.Hash(it.Hash))
		if i < 0 {
			t.Fatalf("item %x is no block of the prompt", it.Hash)
		}
		c := it.Chain
		if it.Namespace != uint64(id) || c.LoRA != "adapter" || c.HasParent != (i > 0) || !slices.Equal(c.Tokens, tokens[i*bs:(i+1)*bs]) ||
			(i > 0 && c.Parent != uint64(k.Hashes[i-1])) {
			t.Fatalf("block %d offered as %+v", i, it)
		}
	}
}

// allocateNS allocates tokens in namespace ns and answers its lookup
// with nothing below.
func allocateNS(t *testing.T, tr *Tier, seq uint64, tokens []int64, k *blockpool.Keys) Ready {
	t.Helper()
	tr.AllocateBatch([]messages.AllocRequest{{Seq: seq, Tokens: tokens}}, []*blockpool.Keys{k}, func(*messages.AllocateBatchResult) {})
	r := drain(t, tr)
	if len(r.ToIndex) == 1 {
		lk := r.ToIndex[0].(*messages.Lookup)
		tr.LookupDone(&messages.LookupResult{ID: lk.ID, Tiers: [][]messages.Tier{{}}})
		r = drain(t, tr)
	}
	return r
}

// TestOffloadItemsCarryChains: a block written down, whether still resident
// (a write-through at commit) or evicted, is offered with its chain, for
// the tiers below to record: a reopened disk announces it from there.
func TestOffloadItemsCarryChains(t *testing.T) {
	ns := prefixhash.Namespace{LoRA: "adapter"}.Key()
	p := prompt(1, 2*bs)
	k := blockpool.ComputeKeys(ns, p, bs, true)

	t.Run("resident", func(t *testing.T) {
		tr := newTier(t, 4, Config{Lower: true, Ingestion: IngestAll})
		allocateNS(t, tr, 1, p, k)
		tr.CommitBatch([]messages.CommitItem{{Seq: 1, Tokens: 2 * bs}}, func(*messages.CommitBatchResult) {})
		checkChains(t, offloadOf(t, drain(t, tr)).Items, p, ns, k)
	})
	t.Run("evicted", func(t *testing.T) {
		tr := journalTier(t, 2, Config{})
		allocateNS(t, tr, 1, p, k)
		tr.CommitBatch([]messages.CommitItem{{Seq: 1, Tokens: 2 * bs}}, func(*messages.CommitBatchResult) {})
		tr.FreeBatch([]uint64{1}, false, func(*messages.FreeBatchResult) {})
		drain(t, tr)
		_, r := allocate(t, tr, 2, prompt(100, 2*bs), []messages.Tier{})
		checkChains(t, offloadOf(t, r).Items, p, ns, k)
	})
}
