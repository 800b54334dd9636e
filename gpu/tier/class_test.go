package tier

import (
	"errors"
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
		freeSeqs(t, tr, 1, 2)
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
		freeSeqs(t, tr, 3)
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

// wantOffered fails unless the blocks offered in r carry exactly want's
// classes, by hash.
func wantOffered(t *testing.T, r Ready, want map[uint64]uint8) {
	t.Helper()
	got := classesOffered(t, r)
	if len(got) != len(want) {
		t.Fatalf("offered classes %v, want %v", got, want)
	}
	for h, c := range want {
		if got[h] != c {
			t.Fatalf("offered classes %v, want %v", got, want)
		}
	}
}

// TestCommitClassReclassifies: a commit's Class (the class an engine knows
// once the request has finished) replaces the allocation's and reaches the
// blocks the sequence's commits published first, under this allocation or
// an earlier one of the same sequence; blocks another sequence published
// keep their class, a refused commit sets nothing, and a block already
// below keeps the class it went down with.
func TestCommitClassReclassifies(t *testing.T) {
	p := prompt(1, 3*bs)
	k := blockpool.ComputeKeys("", p, bs, true)
	h := func(i int) uint64 { return uint64(k.Hashes[i]) }

	t.Run("evicted", func(t *testing.T) {
		tr := journalTier(t, 4, Config{})
		allocateClass(t, tr, 1, p[:bs], 0)
		commitOK(t, tr, messages.CommitItem{Seq: 1, Tokens: bs})
		freeSeqs(t, tr, 1)                   // preempted
		allocateClass(t, tr, 1, p[:2*bs], 0) // readmitted: hits its first block
		commitOK(t, tr, messages.CommitItem{Seq: 1, Tokens: 2 * bs})
		commitOK(t, tr, messages.CommitItem{Seq: 1, Tokens: 2 * bs, Class: 9}) // finished
		allocateClass(t, tr, 2, p, 3)                                          // hits seq 1's two blocks
		commitOK(t, tr, messages.CommitItem{Seq: 2, Tokens: 3 * bs, Class: 5})
		// A refused commit (past the sequence's tokens) sets no class.
		var res *messages.CommitBatchResult
		tr.CommitBatch([]messages.CommitItem{{Seq: 2, Tokens: 9 * bs, Class: 11}}, func(r *messages.CommitBatchResult) { res = r })
		drain(t, tr)
		if res == nil || res.Errs[0] == nil {
			t.Fatal("a commit past the sequence's tokens was accepted")
		}
		freeSeqs(t, tr, 1, 2)
		_, r := allocate(t, tr, 3, prompt(100, 4*bs), []messages.Tier{}) // evicts all three
		wantOffered(t, r, map[uint64]uint8{h(0): 9, h(1): 9, h(2): 5})
	})
	t.Run("below", func(t *testing.T) {
		tr := newTier(t, 4, Config{Lower: true, Ingestion: IngestAll})
		allocateClass(t, tr, 1, p[:bs], 7)
		tr.CommitBatch([]messages.CommitItem{{Seq: 1, Tokens: bs}}, func(*messages.CommitBatchResult) {})
		wantOffered(t, drain(t, tr), map[uint64]uint8{h(0): 7})
		// The copy is on its way down: the finishing commit's class does
		// not reach it, and reaches the block published after it.
		tr.AppendBatch([]messages.AppendItem{{Seq: 1, Tokens: p[bs : 2*bs]}}, func(*messages.AppendBatchResult) {})
		drain(t, tr)
		tr.CommitBatch([]messages.CommitItem{{Seq: 1, Tokens: 2 * bs, Class: 4}}, func(*messages.CommitBatchResult) {})
		wantOffered(t, drain(t, tr), map[uint64]uint8{h(1): 4})
	})
}

// TestCommitClassSeqIDReused: request A (seq 1, class 3) publishes block 0,
// gives its finishing class and is freed. An unrelated request B reuses id
// 1, hits A's block 0 and finishes with class 9: A's block keeps A's class
// (a finished sequence's claims end with its free), B's own block takes 9.
func TestCommitClassSeqIDReused(t *testing.T) {
	p := prompt(1, 2*bs)
	k := blockpool.ComputeKeys("", p, bs, true)
	tr := journalTier(t, 4, Config{})
	allocateClass(t, tr, 1, p[:bs], 3) // request A
	commitOK(t, tr, messages.CommitItem{Seq: 1, Tokens: bs})
	commitOK(t, tr, messages.CommitItem{Seq: 1, Class: 3}) // A's finishing class
	freeSeqs(t, tr, 1)                                     // A finished
	allocateClass(t, tr, 1, p, 0)                          // request B, id 1 reused, shares A's first block
	commitOK(t, tr, messages.CommitItem{Seq: 1, Tokens: 2 * bs})
	commitOK(t, tr, messages.CommitItem{Seq: 1, Class: 9}) // B finished
	freeSeqs(t, tr, 1)
	_, r := allocate(t, tr, 3, prompt(100, 4*bs), []messages.Tier{})
	wantOffered(t, r, map[uint64]uint8{uint64(k.Hashes[0]): 3, uint64(k.Hashes[1]): 9})
}

// TestCommitClassNotReady: a finishing Step (class commit, then free) of a
// readmitted sequence whose loads are still in flight: the commit is
// refused with ErrNotReady and sets no class, the free goes on (what
// schedcache.FreeFinished relies on).
func TestCommitClassNotReady(t *testing.T) {
	tr := newTier(t, 8, Config{Lower: true})
	p := prompt(1, 3*bs)
	allocateClass(t, tr, 1, p[:bs], 0)
	commitOK(t, tr, messages.CommitItem{Seq: 1, Tokens: bs})
	freeSeqs(t, tr, 1)
	_, r := allocate(t, tr, 1, p, []messages.Tier{messages.Pinned, messages.Pinned})
	_ = fetchRequest(t, r) // loads of blocks 1 and 2 stay in flight
	reply := make(chan *messages.StepResult, 1)
	tr.Step(&messages.StepBatch{Commit: []messages.CommitItem{{Seq: 1, Class: 9}}, Free: []uint64{1}, Reply: reply})
	drain(t, tr)
	res := <-reply
	if !errors.Is(res.Commit.Errs[0], ErrNotReady) || res.Free.Errs[0] != nil {
		t.Fatalf("commit %v, free %v: want ErrNotReady and a free", res.Commit.Errs[0], res.Free.Errs[0])
	}
	for id, c := range tr.class {
		if c == 9 {
			t.Fatalf("block %d took class 9 from a refused commit", id)
		}
	}
	if _, ok := tr.seqClass[1]; ok {
		t.Fatal("seqClass kept")
	}
}

// TestCommitClassDuplicates: sequences 1 and 2 compute the same block
// side by side; 1 publishes it first. 2's finishing class does not reach
// it, 1's does.
func TestCommitClassDuplicates(t *testing.T) {
	p := prompt(1, bs)
	k := blockpool.ComputeKeys("", p, bs, true)
	tr := journalTier(t, 4, Config{})
	allocateClass(t, tr, 1, p, 0)
	allocateClass(t, tr, 2, p, 0)
	commitOK(t, tr, messages.CommitItem{Seq: 1, Tokens: bs})
	commitOK(t, tr, messages.CommitItem{Seq: 2, Tokens: bs})
	commitOK(t, tr, messages.CommitItem{Seq: 2, Class: 9})
	commitOK(t, tr, messages.CommitItem{Seq: 1, Class: 4})
	commitOK(t, tr, messages.CommitItem{Seq: 2, Class: 9})
	freeSeqs(t, tr, 1, 2)
	_, r := allocate(t, tr, 3, prompt(100, 4*bs), []messages.Tier{})
	wantOffered(t, r, map[uint64]uint8{uint64(k.Hashes[0]): 4})
}

// TestCommitClassSeqIDReusedBlockLeftTable: request A (seq 1, class 7)
// publishes blocks 0 and 1, is preempted and readmitted with a hit capped
// at block 0 (MaxHitTokens), so block 1 is recomputed into a duplicate and
// A's own block 1 stays cached outside its table; A finishes with class 9
// and is freed: both blocks A published take its finishing class, the one
// it left behind too. An unrelated request B reuses id 1, hits both blocks
// and finishes with class 5: A's claims ended with its free, so neither
// block takes B's class.
func TestCommitClassSeqIDReusedBlockLeftTable(t *testing.T) {
	p := prompt(1, 2*bs)
	k := blockpool.ComputeKeys("", p, bs, true)
	tr := journalTier(t, 4, Config{})
	allocateClass(t, tr, 1, p, 7) // request A
	commitOK(t, tr, messages.CommitItem{Seq: 1, Tokens: 2 * bs})
	freeSeqs(t, tr, 1) // preempted
	var res *messages.AllocateBatchResult
	tr.AllocateBatch([]messages.AllocRequest{{Seq: 1, Tokens: p, MaxHitTokens: 2*bs - 1}}, // readmitted: block 1 recomputed
		[]*blockpool.Keys{k}, func(r *messages.AllocateBatchResult) { res = r })
	if r := drain(t, tr); len(r.ToIndex) == 1 {
		tr.LookupDone(&messages.LookupResult{ID: r.ToIndex[0].(*messages.Lookup).ID, Tiers: [][]messages.Tier{{}}})
		drain(t, tr)
	}
	if res == nil || res.Results[0].Err != nil || res.Results[0].Tokens.Of(messages.GPU) != bs {
		t.Fatalf("readmission: %+v, want one GPU hit", res)
	}
	commitOK(t, tr, messages.CommitItem{Seq: 1, Tokens: 2 * bs})
	commitOK(t, tr, messages.CommitItem{Seq: 1, Class: 9}) // A finished
	freeSeqs(t, tr, 1)                                     // A's claims end
	allocateClass(t, tr, 1, p, 0)                          // request B, id 1 reused: hits both of A's blocks
	commitOK(t, tr, messages.CommitItem{Seq: 1, Tokens: 2 * bs})
	commitOK(t, tr, messages.CommitItem{Seq: 1, Class: 5}) // B finished
	freeSeqs(t, tr, 1)
	_, r := allocate(t, tr, 3, prompt(100, 4*bs), []messages.Tier{})
	wantOffered(t, r, map[uint64]uint8{uint64(k.Hashes[0]): 9, uint64(k.Hashes[1]): 9})
}
