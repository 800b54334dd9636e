package tier

import (
	"slices"
	"testing"
	"time"

	"github.com/kvtier/kvtier/blockpool"
	"github.com/kvtier/kvtier/messages"
)

// Probe tests for the late-load paths (fetchGranted, fetchCopied,
// fetchLate, missFrom, dropEvicted). Each drives the tier directly on its
// injected clock.

// lateDuringCopy allocates seq over p, loading every block from pinned
// memory, grants the load, starts the copy up and fires the deadline while
// the copy runs. It returns the allocation, the request and the Ready of the
// deadline.
func lateDuringCopy(t *testing.T, tr *Tier, seq uint64, p []int64) (messages.AllocResult, *messages.FetchRequest) {
	t.Helper()
	below := make([]messages.Tier, len(p)/bs)
	for i := range below {
		below[i] = messages.Pinned
	}
	res, r := allocate(t, tr, seq, p, below)
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	req := fetchRequest(t, r)
	n := len(req.Hashes)
	slots := make([]int, n)
	for i := range slots {
		slots[i] = i
	}
	tr.FetchGranted(&messages.FetchGrant{ID: req.ID, Slots: slots, Bytes: make([][]byte, n)})
	if r := drain(t, tr); len(r.Copies) != 1 {
		t.Fatalf("copies %+v, want the copy up", r.Copies)
	}
	fireDeadline(t, tr, req)
	if !readyDone(res) {
		t.Fatal("Ready did not complete at the deadline")
	}
	return res, req
}

// landFetch completes req's copy and returns what the tier did next.
func landFetch(t *testing.T, tr *Tier, req *messages.FetchRequest) Ready {
	t.Helper()
	tr.CopyDone(CopyID{ID: req.ID, Fetch: true}, nil)
	return drain(t, tr)
}

// deleteChain deletes the chain of tokens p through a Query and returns
// its result.
func deleteChain(t *testing.T, tr *Tier, p []int64) *messages.QueryResult {
	t.Helper()
	q := &messages.Query{Kind: messages.QueryDelete, Keys: keysOf(p), Tokens: p, Reply: make(chan *messages.QueryResult, 1)}
	tr.Query(q)
	drain(t, tr)
	return <-q.Reply
}

// grantAll grants every block of req, from slots 0, 1, 2, ...
func grantAll(t *testing.T, tr *Tier, req *messages.FetchRequest) {
	t.Helper()
	slots := make([]int, len(req.Hashes))
	for i := range slots {
		slots[i] = i
	}
	tr.FetchGranted(&messages.FetchGrant{ID: req.ID, Slots: slots, Bytes: make([][]byte, len(slots))})
	drain(t, tr)
}

// fireDeadline sets the tier's clock to req's deadline and fires its timer.
func fireDeadline(t *testing.T, tr *Tier, req *messages.FetchRequest) {
	t.Helper()
	tr.SetNow(req.Deadline)
	tr.Deadline(req.ID)
	drain(t, tr)
}

// freeSeqs frees seqs, without a swap.
func freeSeqs(t *testing.T, tr *Tier, seqs ...uint64) {
	t.Helper()
	tr.FreeBatch(seqs, false, func(*messages.FreeBatchResult) {})
	drain(t, tr)
}

func keysOf(p []int64) *blockpool.Keys { return blockpool.ComputeKeys("", p, bs, true) }

// cachedIDs returns the ids of the blocks serving p's leading hits.
func cachedIDs(t *testing.T, tr *Tier, p []int64) []blockpool.BlockID {
	t.Helper()
	ids, _ := tr.pool.CachedChain(nil, p, keysOf(p))
	return ids
}

// noPins checks that no block is pinned and that every block is free.
func allFreeNoPins(t *testing.T, tr *Tier) {
	t.Helper()
	st := tr.pool.Stats()
	if st.Used != 0 || st.Sequences != 0 {
		t.Errorf("pool stats %+v, want nothing used", st)
	}
	for id := range st.NumBlocks {
		if n := tr.pool.Pinned(blockpool.BlockID(id)); n != 0 {
			t.Errorf("block %d pinned %d times after everything", id, n)
		}
	}
	if s := tr.Stats(); s.InFlight != 0 {
		t.Errorf("in flight %d, want 0", s.InFlight)
	}
}

// TestProbeLateCopyOldBlocksNeverServed: after a late load's sequence got
// fresh blocks, another sequence allocating the same prefix while the old
// copy still lands hits nothing on the GPU; once the late sequence commits
// its recomputed KV the fresh blocks are the hits, and the old blocks, their
// copy landed, are neither findable nor pinned.
func TestProbeLateCopyOldBlocksNeverServed(t *testing.T) {
	tr := newTier(t, 16, Config{Lower: true, ReadBase: 10 * time.Millisecond})
	p := prompt(1, 3*bs)
	res, req := lateDuringCopy(t, tr, 1, p)
	old := res.Blocks
	fresh := res.Ready.Outcome().Blocks
	// Seq 2 allocates the same prefix while the old copy is still landing.
	res2, r := allocate(t, tr, 2, p, []messages.Tier{})
	if res2.Err != nil || res2.Tokens.Of(messages.GPU) != 0 {
		t.Fatalf("second allocation over the prefix while the late copy lands: %+v", res2)
	}
	for _, b := range res2.Blocks {
		if slices.Contains(old, b) || slices.Contains(fresh, b) {
			t.Fatalf("second allocation got block %d of the late load (old %v fresh %v)", b, old, fresh)
		}
	}
	_ = r
	// The late sequence commits its recomputed blocks: they are the hits.
	var cr *messages.CommitBatchResult
	tr.CommitBatch([]messages.CommitItem{{Seq: 1, Tokens: len(p)}}, func(r *messages.CommitBatchResult) { cr = r })
	drain(t, tr)
	if cr.Errs[0] != nil {
		t.Fatal(cr.Errs[0])
	}
	if got := cachedIDs(t, tr, p); !slices.Equal(got, fresh) {
		t.Fatalf("hits %v, want the fresh blocks %v", got, fresh)
	}
	// The old copy lands late: nothing of it is published.
	r = landFetch(t, tr, req)
	if len(r.ToPinned) != 1 {
		t.Fatalf("after the late copy: %+v, want its slots released", r.ToPinned)
	}
	if rel, ok := r.ToPinned[0].(*messages.FetchRelease); !ok || len(rel.Slots) != 3 {
		t.Fatalf("release %+v", r.ToPinned[0])
	}
	for _, b := range old {
		if _, cached := tr.pool.BlockHash(b); cached {
			t.Fatalf("old block %d cached after its late copy", b)
		}
	}
	if got := cachedIDs(t, tr, p); !slices.Equal(got, fresh) {
		t.Fatalf("hits %v after the late copy, want the fresh blocks %v", got, fresh)
	}
	// Seq 3 now hits all three.
	res3, _ := allocate(t, tr, 3, p, nil)
	if res3.Err != nil || res3.Tokens.Of(messages.GPU) != len(p) || !slices.Equal(res3.Blocks, fresh) {
		t.Fatalf("third allocation %+v, want the fresh blocks as hits", res3)
	}
	tr.FreeBatch([]uint64{1, 2, 3}, false, func(*messages.FreeBatchResult) {})
	drain(t, tr)
	allFreeNoPins(t, tr)
	if st := tr.Stats(); st.Timeouts != 3 || st.Overdue != 0 || st.Onboarded != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// TestProbeLateCopyAbortThenLand: the late sequence is freed uncommitted
// (an abort) before its old copy lands; the copy then lands. Nothing is
// published and every block comes back free.
func TestProbeLateCopyAbortThenLand(t *testing.T) {
	tr := newTier(t, 8, Config{Lower: true, ReadBase: 10 * time.Millisecond})
	p := prompt(1, 3*bs)
	_, req := lateDuringCopy(t, tr, 1, p)
	freeSeqs(t, tr, 1)
	landFetch(t, tr, req)
	if got := cachedIDs(t, tr, p); len(got) != 0 {
		t.Fatalf("aborted late load: %v findable", got)
	}
	allFreeNoPins(t, tr)
}

// TestProbeLateCopyCommitThenSwap: the late sequence commits into its fresh
// blocks and is swapped out before the old copy lands; the swap writes the
// fresh blocks down, never the old ones, and the late copy landing after it
// changes nothing.
func TestProbeLateCopyCommitThenSwap(t *testing.T) {
	tr := newTier(t, 8, Config{Lower: true, ReadBase: 10 * time.Millisecond})
	p := prompt(1, 3*bs)
	res, req := lateDuringCopy(t, tr, 1, p)
	fresh := res.Ready.Outcome().Blocks
	tr.CommitBatch([]messages.CommitItem{{Seq: 1, Tokens: len(p)}}, func(*messages.CommitBatchResult) {})
	drain(t, tr)
	tr.FreeBatch([]uint64{1}, true /* swap */, func(*messages.FreeBatchResult) {})
	r := drain(t, tr)
	var off *messages.OffloadRequest
	for _, m := range r.ToPinned {
		if o, ok := m.(*messages.OffloadRequest); ok {
			off = o
		}
	}
	if off == nil || len(off.Items) != 3 {
		t.Fatalf("swap sent %+v, want the 3 fresh blocks offered", r.ToPinned)
	}
	landFetch(t, tr, req) // the late copy lands before the offload grant
	tr.OffloadGranted(&messages.OffloadGrant{ID: off.ID, Slots: []int{10, 11, 12}, Bytes: make([][]byte, 3)})
	r = drain(t, tr)
	if len(r.Copies) != 1 {
		t.Fatalf("copies %+v", r.Copies)
	}
	for _, op := range r.Copies[0].Ops {
		if !slices.Contains(fresh, blockpool.BlockID(op.Block)) {
			t.Fatalf("swap copies block %d, not one of the fresh %v", op.Block, fresh)
		}
	}
	tr.CopyDone(r.Copies[0].CopyID, nil)
	drain(t, tr)
	allFreeNoPins(t, tr)
}

// TestProbeDeleteDuringLateCopy: a Delete of the chain after the late
// sequence committed its fresh blocks drops them; the late copy landing
// after it publishes nothing.
func TestProbeDeleteDuringLateCopy(t *testing.T) {
	tr := newTier(t, 8, Config{Lower: true, ReadBase: 10 * time.Millisecond})
	p := prompt(1, 3*bs)
	_, req := lateDuringCopy(t, tr, 1, p)
	tr.CommitBatch([]messages.CommitItem{{Seq: 1, Tokens: len(p)}}, func(*messages.CommitBatchResult) {})
	drain(t, tr)
	if qr := deleteChain(t, tr, p); qr.Err != nil || qr.Deleted != 3 {
		t.Fatalf("delete %+v", qr)
	}
	landFetch(t, tr, req)
	if got := cachedIDs(t, tr, p); len(got) != 0 {
		t.Fatalf("deleted chain findable after the late copy landed: %v", got)
	}
	freeSeqs(t, tr, 1)
	allFreeNoPins(t, tr)
}

// TestProbeDeleteBeforeDeadlineDuringCopy: a Delete during the copy, then
// the deadline: the outcome accounts every loading block once.
func TestProbeDeleteBeforeDeadlineDuringCopy(t *testing.T) {
	tr := newTier(t, 8, Config{Lower: true, ReadBase: 10 * time.Millisecond})
	p := prompt(1, 3*bs)
	res, r := allocate(t, tr, 1, p, []messages.Tier{messages.Pinned, messages.Pinned, messages.Pinned})
	req := fetchRequest(t, r)
	grantAll(t, tr, req)
	deleteChain(t, tr, p[:2*bs])
	fireDeadline(t, tr, req)
	out := res.Ready.Outcome()
	if out.ValidTokens+(out.Late+out.Evicted+out.Failed+out.Mismatch)*bs != len(p) {
		t.Fatalf("outcome %+v does not cover the %d loading tokens", out, len(p))
	}
	landFetch(t, tr, req)
	if got := cachedIDs(t, tr, p); len(got) != 0 {
		t.Fatalf("late copy published %v", got)
	}
	freeSeqs(t, tr, 1)
	allFreeNoPins(t, tr)
}

// TestProbeStopDuringLateCopy: Stop while a late copy is still on the
// stream: the late allocation's Ready completed at the deadline and stays
// as it was; nothing waits for it among the Stopped.
func TestProbeStopDuringLateCopy(t *testing.T) {
	tr := newTier(t, 8, Config{Lower: true, ReadBase: 10 * time.Millisecond})
	p := prompt(1, 3*bs)
	res, _ := lateDuringCopy(t, tr, 1, p)
	before := res.Ready.Outcome()
	tr.Stop()
	r := drain(t, tr)
	for _, s := range r.Stopped {
		s.Complete()
	}
	if after := res.Ready.Outcome(); after.Late != before.Late || after.Failed != 0 {
		t.Fatalf("outcome changed by Stop: %+v -> %+v", before, after)
	}
}

// TestProbeOverdueThenStop: an overdue load (copy under way, no free blocks
// to swap in) waits for its copy; Stop then answers it after the copy, as
// failed, and its blocks were counted Overdue and never Late.
func TestProbeOverdueThenStop(t *testing.T) {
	tr := newTier(t, 4, Config{Lower: true, ReadBase: 10 * time.Millisecond})
	p := prompt(1, 3*bs)
	res, req := lateLoad(t, tr, p)
	grantAll(t, tr, req)
	fireDeadline(t, tr, req)
	tr.Stop()
	r := drain(t, tr)
	if readyDone(res) {
		t.Fatal("Ready completed at Stop while its copy still runs")
	}
	if len(r.Stopped) != 1 || len(r.Stopped[0].Copies) != 1 || r.Stopped[0].Copies[0].ID != req.ID {
		t.Fatalf("stopped %+v, want the overdue load behind its copy", r.Stopped)
	}
	r.Stopped[0].Complete()
	if out := res.Ready.Outcome(); out.Failed != 3 || out.Late != 0 || out.ValidTokens != 0 {
		t.Fatalf("outcome %+v", out)
	}
}

// TestProbePartialGrantThenLate: a grant short of one block (evicted below),
// then the deadline during the copy of the two granted: two fresh blocks,
// the third kept as it was; Late 2, Evicted 1.
func TestProbePartialGrantThenLate(t *testing.T) {
	tr := newTier(t, 8, Config{Lower: true, ReadBase: 10 * time.Millisecond})
	p := prompt(1, 3*bs)
	res, r := allocate(t, tr, 1, p, []messages.Tier{messages.Pinned, messages.Pinned, messages.Pinned})
	req := fetchRequest(t, r)
	tr.FetchGranted(&messages.FetchGrant{ID: req.ID, Slots: []int{0, 1}, Bytes: make([][]byte, 2), Short: messages.MissEvicted})
	drain(t, tr)
	fireDeadline(t, tr, req)
	out := res.Ready.Outcome()
	if out.Late != 2 || out.Evicted != 1 || out.ValidTokens != 0 || len(out.Blocks) != 3 {
		t.Fatalf("outcome %+v", out)
	}
	if out.Blocks[0] == res.Blocks[0] || out.Blocks[1] == res.Blocks[1] || out.Blocks[2] != res.Blocks[2] {
		t.Fatalf("table %v from %v: want the first two swapped, the third kept", out.Blocks, res.Blocks)
	}
	if st := tr.Stats(); st.Timeouts != 2 {
		t.Fatalf("timeouts %d, want 2", st.Timeouts)
	}
	tr.CommitBatch([]messages.CommitItem{{Seq: 1, Tokens: len(p)}}, func(*messages.CommitBatchResult) {})
	drain(t, tr)
	landFetch(t, tr, req)
	if got := cachedIDs(t, tr, p); !slices.Equal(got, out.Blocks) {
		t.Fatalf("hits %v, want %v", got, out.Blocks)
	}
	freeSeqs(t, tr, 1)
	allFreeNoPins(t, tr)
}

// TestProbeLateAfterGPUHits: two GPU hits, then two loading blocks late
// during their copy: ValidTokens is the hits; after the commit the whole
// chain hits, linked through the fresh blocks, also once the old blocks
// are reused for other contents.
func TestProbeLateAfterGPUHits(t *testing.T) {
	tr := newTier(t, 8, Config{Lower: true, ReadBase: 10 * time.Millisecond})
	p := prompt(1, 4*bs)
	cacheSeq(t, tr, 9, p[:2*bs])
	res, r := allocate(t, tr, 1, p, []messages.Tier{messages.Pinned, messages.Pinned})
	if res.Tokens.Of(messages.GPU) != 2*bs || res.Tokens.Of(messages.Pinned) != 2*bs {
		t.Fatalf("allocation %+v", res)
	}
	req := fetchRequest(t, r)
	tr.FetchGranted(&messages.FetchGrant{ID: req.ID, Slots: []int{0, 1}, Bytes: make([][]byte, 2)})
	drain(t, tr)
	fireDeadline(t, tr, req)
	out := res.Ready.Outcome()
	if out.ValidTokens != 2*bs || out.Late != 2 {
		t.Fatalf("outcome %+v", out)
	}
	tr.CommitBatch([]messages.CommitItem{{Seq: 1, Tokens: len(p)}}, func(*messages.CommitBatchResult) {})
	drain(t, tr)
	landFetch(t, tr, req)
	freeSeqs(t, tr, 1)
	// Reuse the two free empty blocks (the old ones among them) for other contents.
	if res, _ := allocate(t, tr, 5, prompt(500, 4*bs), []messages.Tier{}); res.Err != nil {
		t.Fatal(res.Err)
	}
	if got := cachedIDs(t, tr, p); len(got) != 4 || !slices.Equal(got[2:], out.Blocks[2:]) {
		t.Fatalf("hits %v, want the GPU hits then the fresh %v", got, out.Blocks[2:])
	}
}

// TestProbeMaxHitTokensLate: a cap of three blocks with one GPU hit and
// three below loads two; late during their copy, only those two count Late
// and are swapped.
func TestProbeMaxHitTokensLate(t *testing.T) {
	tr := newTier(t, 16, Config{Lower: true, ReadBase: 10 * time.Millisecond})
	p := prompt(1, 4*bs+1)
	cacheSeq(t, tr, 9, p[:bs])
	var res *messages.AllocateBatchResult
	tr.AllocateBatch([]messages.AllocRequest{{Seq: 1, Tokens: p, MaxHitTokens: 3 * bs}}, []*blockpool.Keys{keysOf(p)},
		func(r *messages.AllocateBatchResult) { res = r })
	lk := drain(t, tr).ToIndex[0].(*messages.Lookup)
	tr.LookupDone(&messages.LookupResult{ID: lk.ID, Tiers: [][]messages.Tier{{messages.Pinned, messages.Pinned, messages.Pinned}}})
	r := drain(t, tr)
	got := res.Results[0]
	if got.Tokens.Of(messages.GPU) != bs || got.Tokens.Of(messages.Pinned) != 2*bs {
		t.Fatalf("allocation %+v", got)
	}
	req := fetchRequest(t, r)
	if len(req.Hashes) != 2 {
		t.Fatalf("fetch of %d blocks, want 2", len(req.Hashes))
	}
	tr.FetchGranted(&messages.FetchGrant{ID: req.ID, Slots: []int{0, 1}, Bytes: make([][]byte, 2)})
	drain(t, tr)
	fireDeadline(t, tr, req)
	out := got.Ready.Outcome()
	if out.Late != 2 || out.ValidTokens != bs || len(out.Blocks) != 5 {
		t.Fatalf("outcome %+v", out)
	}
	for i, b := range out.Blocks {
		swapped := b != got.Blocks[i]
		if swapped != (i == 1 || i == 2) {
			t.Fatalf("table %v from %v: want only blocks 1 and 2 swapped", out.Blocks, got.Blocks)
		}
	}
}

// TestProbeFreedSeqLateNotOverdue: the sequence is freed while its copy
// runs; at the deadline no block needs swapping in (the sequence is gone),
// so the load should not count as Overdue blocks served late as hits.
func TestProbeFreedSeqLateNotOverdue(t *testing.T) {
	tr := newTier(t, 4, Config{Lower: true, ReadBase: 10 * time.Millisecond})
	p := prompt(1, 3*bs)
	_, req := lateLoad(t, tr, p)
	grantAll(t, tr, req)
	freeSeqs(t, tr, 1)
	fireDeadline(t, tr, req)
	st := tr.Stats()
	landFetch(t, tr, req)
	if st.Overdue != 0 {
		t.Errorf("stats %+v: a freed sequence's load counted %d Overdue blocks (no block was served late as a hit to anyone)", st, st.Overdue)
	}
}

// TestProbeLateBeforeEvictOffloadSendsNoFetch: a load whose blocks wait
// for the write down of what they evicted times out before that write is
// granted; its FetchRequest, queued behind the write, is then useless (a
// grant for it is given straight back) and should not go to the pinned tier
// (which would pin slots and maybe read from disk for nothing).
func TestProbeLateBeforeEvictOffloadSendsNoFetch(t *testing.T) {
	tr := newTier(t, 3, Config{Lower: true, ReadBase: 10 * time.Millisecond})
	cacheSeq(t, tr, 9, prompt(1000, 3*bs)) // 3 free cached, nothing below
	p := prompt(1, 3*bs)
	res, r := allocate(t, tr, 1, p, []messages.Tier{messages.Pinned, messages.Pinned, messages.Pinned})
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	var off *messages.OffloadRequest
	var deadline time.Time
	var id uint64
	for _, m := range r.ToPinned {
		switch m := m.(type) {
		case *messages.OffloadRequest:
			off = m
		case *messages.FetchRequest:
			t.Fatalf("fetch sent before the evicted blocks' write down: %+v", m)
		}
	}
	if off == nil || len(r.Timers) != 1 {
		t.Fatalf("ToPinned %+v timers %+v", r.ToPinned, r.Timers)
	}
	id, deadline = r.Timers[0].ID, r.Timers[0].At
	tr.SetNow(deadline)
	tr.Deadline(id)
	drain(t, tr)
	tr.OffloadGranted(&messages.OffloadGrant{ID: off.ID, Slots: []int{0, 1, 2}, Bytes: make([][]byte, 3)})
	r = drain(t, tr)
	for _, m := range r.ToPinned {
		if f, ok := m.(*messages.FetchRequest); ok {
			t.Errorf("FetchRequest %d sent for a load already past its deadline", f.ID)
		}
	}
	tr.CopyDone(r.Copies[0].CopyID, nil)
	drain(t, tr)
	if !readyDone(res) {
		t.Fatal("Ready not done after the write down")
	}
	if out := res.Ready.Outcome(); out.Late != 3 {
		t.Fatalf("outcome %+v", out)
	}
	// Whatever was sent, the grant (if any) goes straight back and the
	// tier ends with nothing in flight.
	tr.FetchGranted(&messages.FetchGrant{ID: id, Slots: []int{7, 8, 9}, Bytes: make([][]byte, 3)})
	drain(t, tr)
	if st := tr.Stats(); st.InFlight != 0 {
		t.Errorf("in flight %d after everything", st.InFlight)
	}
}

// TestProbeDeadlineEventBeforeClockReachesIt: the executor's timer fires in
// wall time; on a clock that runs slower (Config.Clock of a simulator) the
// Deadline event can come while the Tier's clock is short of the deadline.
// The load is not past its deadline on the Tier's clock, which the package
// says deadlines are judged by (pastDeadline), so it should not turn late:
// the tier could re-arm the timer for what is left.
func TestProbeDeadlineEventBeforeClockReachesIt(t *testing.T) {
	tr := newTier(t, 8, Config{Lower: true, ReadBase: 10 * time.Millisecond})
	p := prompt(1, 3*bs)
	res, req := lateLoad(t, tr, p)
	grantAll(t, tr, req)
	tr.SetNow(req.Deadline.Add(-time.Millisecond)) // short of the deadline
	tr.Deadline(req.ID)
	r := drain(t, tr)
	if readyDone(res) {
		t.Errorf("load turned late (%+v) 1 ms before its deadline on the tier's clock; timers re-armed: %+v", res.Ready.Outcome(), r.Timers)
	}
}

// TestProbeLoadDeadlineAlreadyPast: a request whose LoadDeadline has
// passed when it is allocated can only end late (a grant judged past it
// starts no copy), yet its FetchRequest still goes below, pinning slots
// and maybe reading disk for nothing.
func TestProbeLoadDeadlineAlreadyPast(t *testing.T) {
	tr := newTier(t, 8, Config{Lower: true})
	p := prompt(1, 2*bs)
	var res *messages.AllocateBatchResult
	tr.AllocateBatch([]messages.AllocRequest{{Seq: 1, Tokens: p, LoadDeadline: t0.Add(-time.Millisecond)}},
		[]*blockpool.Keys{keysOf(p)}, func(r *messages.AllocateBatchResult) { res = r })
	lk := drain(t, tr).ToIndex[0].(*messages.Lookup)
	tr.LookupDone(&messages.LookupResult{ID: lk.ID, Tiers: [][]messages.Tier{{messages.Pinned, messages.Pinned}}})
	r := drain(t, tr)
	for _, m := range r.ToPinned {
		if f, ok := m.(*messages.FetchRequest); ok {
			t.Errorf("FetchRequest %d sent with a deadline %v already past (now %v)", f.ID, f.Deadline, t0)
		}
	}
	_ = res
}

// TestProbeOverdueCopyFails: an overdue load is counted Overdue at its
// deadline; when its copy then fails its blocks are Failed too, as
// TierStats.Overdue's doc says.
func TestProbeOverdueCopyFails(t *testing.T) {
	tr := newTier(t, 4, Config{Lower: true, ReadBase: 10 * time.Millisecond})
	p := prompt(1, 3*bs)
	res, req := lateLoad(t, tr, p)
	grantAll(t, tr, req)
	fireDeadline(t, tr, req)
	tr.CopyDone(CopyID{ID: req.ID, Fetch: true}, errTestCopy)
	drain(t, tr)
	out := res.Ready.Outcome()
	st := tr.Stats()
	if out.Failed != 3 {
		t.Fatalf("outcome %+v", out)
	}
	if st.Overdue != 3 || st.Failed != 3 {
		t.Errorf("stats: overdue %d, failed %d, want 3 and 3", st.Overdue, st.Failed)
	}
}

var errTestCopy = errorString("probe: copy failed")

type errorString string

func (e errorString) Error() string { return string(e) }

// TestProbeLateAfterSeqIDReused: sequence 1 is freed while its copy runs and
// allocated again under the same id; the old load's deadline then fires. The
// old allocation's outcome should not carry the new allocation's table as a
// replacement for its own (OnboardOutcome.Blocks "replaces the block table
// of the AllocResult").
func TestProbeLateAfterSeqIDReused(t *testing.T) {
	tr := newTier(t, 16, Config{Lower: true, ReadBase: 10 * time.Millisecond})
	p := prompt(1, 3*bs)
	res, req := lateLoad(t, tr, p)
	grantAll(t, tr, req)
	freeSeqs(t, tr, 1)
	res2, _ := allocate(t, tr, 1, prompt(500, 2*bs), []messages.Tier{})
	if res2.Err != nil {
		t.Fatal(res2.Err)
	}
	fireDeadline(t, tr, req)
	if out := res.Ready.Outcome(); out.Blocks != nil {
		t.Errorf("the freed allocation's outcome replaces its table with %v (the new sequence 1's table is %v)", out.Blocks, res2.Blocks)
	}
	landFetch(t, tr, req)
	freeSeqs(t, tr, 1)
	allFreeNoPins(t, tr)
}
