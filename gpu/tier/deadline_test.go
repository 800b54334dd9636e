package tier

import (
	"testing"
	"time"

	"github.com/kvtier/kvtier/blockpool"
	"github.com/kvtier/kvtier/messages"
)

// readyDone reports whether an allocation's Ready has completed.
func readyDone(res messages.AllocResult) bool {
	select {
	case <-res.Ready.Done():
		return true
	default:
		return false
	}
}

// cacheSeq allocates, commits and frees seq over p: its blocks stay free
// and cached, with no copy below.
func cacheSeq(t *testing.T, tr *Tier, seq uint64, p []int64) {
	t.Helper()
	if res, _ := allocate(t, tr, seq, p, nil); res.Err != nil {
		t.Fatal(res.Err)
	}
	tr.CommitBatch([]messages.CommitItem{{Seq: seq, Tokens: len(p)}}, func(*messages.CommitBatchResult) {})
	tr.FreeBatch([]uint64{seq}, false /* swap */, func(*messages.FreeBatchResult) {})
	drain(t, tr)
}

// lateLoad allocates seq 1 over p, loading its blocks from pinned memory
// under a 10 ms deadline, and returns the allocation and its FetchRequest.
func lateLoad(t *testing.T, tr *Tier, p []int64) (messages.AllocResult, *messages.FetchRequest) {
	t.Helper()
	below := make([]messages.Tier, len(p)/bs)
	for i := range below {
		below[i] = messages.Pinned
	}
	res, r := allocate(t, tr, 1, p, below)
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	return res, fetchRequest(t, r)
}

// TestDeadlineBeforeGrantNeedsNoFreeBlocks: a load whose deadline passes
// before the pinned tier's grant completes its Ready at the deadline even
// when no GPU block is free: no copy writes its blocks, so the sequence
// recomputes into them. (It used to wait for the grant — for a read from
// disk, for the whole read — whenever fewer blocks were free than it loads.)
func TestDeadlineBeforeGrantNeedsNoFreeBlocks(t *testing.T) {
	tr := newTier(t, 3, Config{Lower: true, ReadBase: 10 * time.Millisecond})
	p := prompt(1, 3*bs)
	res, req := lateLoad(t, tr, p)
	if tr.pool.NumFree() != 0 {
		t.Fatalf("%d blocks free, want none", tr.pool.NumFree())
	}
	tr.SetNow(req.Deadline)
	tr.Deadline(req.ID)
	drain(t, tr)
	if !readyDone(res) {
		t.Fatal("Ready did not complete at the deadline")
	}
	if out := res.Ready.Outcome(); out.Late != 3 || out.ValidTokens != 0 || out.Blocks != nil {
		t.Fatalf("outcome %+v, want 3 late blocks in the allocated table", out)
	}
	// The sequence computes and commits into its blocks at once.
	var cres *messages.CommitBatchResult
	tr.CommitBatch([]messages.CommitItem{{Seq: 1, Tokens: len(p)}}, func(r *messages.CommitBatchResult) { cres = r })
	drain(t, tr)
	if cres == nil || cres.Errs[0] != nil {
		t.Fatalf("commit after the deadline: %+v", cres)
	}
	// The grant that comes after is given back, and starts no copy.
	tr.FetchGranted(&messages.FetchGrant{ID: req.ID, Slots: []int{0, 1, 2}, Bytes: make([][]byte, 3)})
	r := drain(t, tr)
	if len(r.Copies) != 0 || len(r.ToPinned) != 1 {
		t.Fatalf("the late grant: %+v, want its slots released and no copy", r)
	}
	if st := tr.Stats(); st.Timeouts != 3 || st.InFlight != 0 || st.Overdue != 0 {
		t.Fatalf("stats %+v", st)
	}
	if n, err := tr.pool.CachedBlocks(p, blockpool.ComputeKeys("", p, bs, true)); err != nil || n != 3 {
		t.Fatalf("%d blocks of the recomputed prefix findable (%v), want 3", n, err)
	}
}

// TestDeadlineDuringCopyDropsEvicted: a load late while its copy up runs
// gives the sequence fresh blocks and completes Ready at the deadline, also
// when the fresh blocks held cached contents nowhere below: those are
// dropped, not written down first (their copy down would queue behind the
// late copy on the stream, holding Ready past the deadline).
func TestDeadlineDuringCopyDropsEvicted(t *testing.T) {
	tr := newTier(t, 8, Config{Lower: true, ReadBase: 10 * time.Millisecond})
	cacheSeq(t, tr, 2, prompt(1000, 4*bs)) // 4 free cached blocks, 4 free empty
	p := prompt(1, 3*bs)
	res, req := lateLoad(t, tr, p) // takes 3 of the empty ones
	tr.FetchGranted(&messages.FetchGrant{ID: req.ID, Slots: []int{0, 1, 2}, Bytes: make([][]byte, 3)})
	r := drain(t, tr)
	if len(r.Copies) != 1 {
		t.Fatalf("copies %+v, want the copy up", r.Copies)
	}
	tr.SetNow(req.Deadline)
	tr.Deadline(req.ID) // the fresh blocks evict 2 cached ones
	r = drain(t, tr)
	if !readyDone(res) {
		t.Fatalf("Ready did not complete at the deadline; the tier asked %+v", r.ToPinned)
	}
	out := res.Ready.Outcome()
	if out.Late != 3 || out.ValidTokens != 0 || len(out.Blocks) != 3 {
		t.Fatalf("outcome %+v, want 3 late blocks and a fresh table", out)
	}
	for i, b := range out.Blocks {
		if b == res.Blocks[i] {
			t.Fatalf("block %d of the table is the one the copy still writes", i)
		}
	}
	if len(r.ToPinned) != 0 || len(r.Copies) != 0 {
		t.Fatalf("the deadline wrote down %+v, copies %+v; want nothing", r.ToPinned, r.Copies)
	}
	if st := tr.Stats(); st.Evictions != 2 || st.Timeouts != 3 {
		t.Fatalf("stats %+v, want 2 evictions and 3 timeouts", st)
	}
	// The copy ends into the old blocks, which go back to the pool.
	tr.CopyDone(CopyID{ID: req.ID, Fetch: true}, nil)
	drain(t, tr)
	if st := tr.Stats(); st.InFlight != 0 || st.Onboarded != 0 {
		t.Fatalf("after the late copy: %+v", st)
	}
}

// TestDeadlineDuringCopyWithoutFreeBlocksIsOverdue: with the copy up under
// way and too few free blocks to swap in, the load finishes late, as hits,
// and Stats counts its blocks as overdue.
func TestDeadlineDuringCopyWithoutFreeBlocksIsOverdue(t *testing.T) {
	tr := newTier(t, 4, Config{Lower: true, ReadBase: 10 * time.Millisecond})
	p := prompt(1, 3*bs)
	res, req := lateLoad(t, tr, p) // one block left free
	tr.FetchGranted(&messages.FetchGrant{ID: req.ID, Slots: []int{0, 1, 2}, Bytes: make([][]byte, 3)})
	drain(t, tr)
	tr.SetNow(req.Deadline)
	tr.Deadline(req.ID)
	drain(t, tr)
	if readyDone(res) {
		t.Fatal("Ready completed while the copy still writes the blocks")
	}
	if st := tr.Stats(); st.Overdue != 3 || st.Timeouts != 0 {
		t.Fatalf("stats %+v, want 3 overdue blocks and no timeouts", st)
	}
	tr.CopyDone(CopyID{ID: req.ID, Fetch: true}, nil)
	drain(t, tr)
	if !readyDone(res) {
		t.Fatal("Ready did not complete with the copy")
	}
	if out := res.Ready.Outcome(); out.ValidTokens != len(p) || out.Late != 0 {
		t.Fatalf("outcome %+v, want every token valid", out)
	}
}

// TestPastLoadDeadlineAsksNothingBelow: an allocation whose LoadDeadline
// has passed already (a tensor-parallel group's reallocation after the
// group's deadline) serves its GPU hits and misses the rest at once: no
// load is asked of the tiers below, none is waited for, and no block is
// pinned for a copy that would surely be cut.
func TestPastLoadDeadlineAsksNothingBelow(t *testing.T) {
	tr := newTier(t, 8, Config{Lower: true})
	p := prompt(1, 3*bs)
	cacheSeq(t, tr, 1, p[:bs])
	var res *messages.AllocateBatchResult
	tr.AllocateBatch([]messages.AllocRequest{{Seq: 2, Tokens: p, LoadDeadline: t0.Add(-time.Millisecond)}},
		[]*blockpool.Keys{blockpool.ComputeKeys("", p, bs, true)}, func(r *messages.AllocateBatchResult) { res = r })
	lk := drain(t, tr).ToIndex[0].(*messages.Lookup)
	tr.LookupDone(&messages.LookupResult{ID: lk.ID, Tiers: [][]messages.Tier{{messages.Pinned, messages.Disk}}})
	r := drain(t, tr)
	for _, m := range r.ToPinned {
		if _, ok := m.(*messages.FetchRequest); ok {
			t.Fatalf("a load past its deadline was asked below: %+v", m)
		}
	}
	if !readyDone(res.Results[0]) {
		t.Fatal("the allocation waits for loads past their deadline")
	}
	if out := res.Results[0].Ready.Outcome(); out.ValidTokens != bs || out.Late != 2 {
		t.Fatalf("outcome %+v, want the GPU hit valid and 2 late blocks", out)
	}
}
