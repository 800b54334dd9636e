package tier

import (
	"testing"

	"github.com/kvtier/kvtier/blockpool"
	"github.com/kvtier/kvtier/messages"
)

// allocateClass allocates tokens for seq with the given class and answers
// its lookup with nothing below.
func allocateClass(t *testing.T, tr *Tier, seq uint64, tokens []int64, class uint8) {
	t.Helper()
	var res *messages.AllocateBatchResult
	tr.AllocateBatch([]messages.AllocRequest{{Seq: seq, Tokens: tokens, Class: class}},
		[]*blockpool.Keys{blockpool.ComputeKeys("", tokens, bs, true)}, func(r *messages.AllocateBatchResult) { res = r })
	r := drain(t, tr)
	if len(r.ToIndex) == 1 {
		lk := r.ToIndex[0].(*messages.Lookup)
		tr.LookupDone(&messages.LookupResult{ID: lk.ID, Tiers: [][]messages.Tier{{}}})
		drain(t, tr)
	}
	if res == nil || res.Results[0].Err != nil {
		t.Fatalf("allocation of sequence %d: %+v", seq, res)
	}
}

// classesOffered returns the Chain.Class of each block offered in r, by
// hash.
func classesOffered(t *testing.T, r Ready) map[uint64]uint8 {
	t.Helper()
	got := map[uint64]uint8{}
	for _, it := range offloadOf(t, r).Items {
		got[it.Hash] = it.Chain.Class
	}
	return got
}

// TestOffloadCarriesClass: a block is written down with the class of the
// sequence whose commit first published it (AllocRequest.Class). A later
// sequence of another class that hits it and commits past it leaves it
// its first class and gives its own to the block it published; a
// sequence of no class gives none.
func TestOffloadCarriesClass(t *testing.T) {
	p := prompt(1, 3*bs)
	k := blockpool.ComputeKeys("", p, bs, true)

	t.Run("evicted", func(t *testing.T) {
		tr := journalTier(t, 4, Config{})
		allocateClass(t, tr, 1, p[:2*bs], 7)
		tr.CommitBatch([]messages.CommitItem{{Seq: 1, Tokens: 2 * bs}}, func(*messages.CommitBatchResult) {})
		allocateClass(t, tr, 2, p, 3) // hits seq 1's two blocks
		tr.CommitBatch([]messages.CommitItem{{Seq: 2, Tokens: 3 * bs}}, func(*messages.CommitBatchResult) {})
		tr.FreeBatch([]uint64{1, 2}, false, func(*messages.FreeBatchResult) {})
		drain(t, tr)
		_, r := allocate(t, tr, 3, prompt(100, 4*bs), []messages.Tier{}) // evicts all three
		o := offloadOf(t, r)
		got := classesOffered(t, r)
		want := map[uint64]uint8{uint64(k.Hashes[0]): 7, uint64(k.Hashes[1]): 7, uint64(k.Hashes[2]): 3}
		if len(got) != len(want) {
			t.Fatalf("offered classes %v, want %v", got, want)
		}
		for h, c := range want {
			if got[h] != c {
				t.Fatalf("offered classes %v, want %v", got, want)
			}
		}

		// The blocks are taken for new contents: seq 3, of no class,
		// publishes them with none.
		tr.OffloadGranted(&messages.OffloadGrant{ID: o.ID, Slots: denied(len(o.Items))})
		drain(t, tr)
		tr.CommitBatch([]messages.CommitItem{{Seq: 3, Tokens: 4 * bs}}, func(*messages.CommitBatchResult) {})
		tr.FreeBatch([]uint64{3}, false, func(*messages.FreeBatchResult) {})
		drain(t, tr)
		_, r = allocate(t, tr, 4, prompt(200, 4*bs), []messages.Tier{})
		for h, c := range classesOffered(t, r) {
			if c != 0 {
				t.Fatalf("block %x of a sequence with no class offered with class %d", h, c)
			}
		}
	})
	t.Run("resident", func(t *testing.T) {
		tr := newTier(t, 4, Config{Lower: true, Ingestion: IngestAll})
		allocateClass(t, tr, 1, p[:bs], 7)
		tr.CommitBatch([]messages.CommitItem{{Seq: 1, Tokens: bs}}, func(*messages.CommitBatchResult) {})
		if got := classesOffered(t, drain(t, tr)); got[uint64(k.Hashes[0])] != 7 {
			t.Fatalf("offered classes %v, want 7 for the committed block", got)
		}
	})
}

// denied is a grant's Slots that deny n items.
func denied(n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = messages.SlotDenied
	}
	return s
}
