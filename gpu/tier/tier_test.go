package tier

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/kvtier/kvtier/blockpool"
	"github.com/kvtier/kvtier/gpu"
	"github.com/kvtier/kvtier/messages"
)

const bs = 4

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func newTier(t *testing.T, blocks int, cfg Config) *Tier {
	t.Helper()
	pool, err := blockpool.New(blockpool.Config{NumBlocks: blocks, BlockSize: bs, Digests: cfg.Lower})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Pool, cfg.BlockBytes = pool, 64
	if cfg.Ingestion == 0 {
		cfg.Ingestion = IngestEvict
	}
	cfg.DoubleGetMinBlocks = max(cfg.DoubleGetMinBlocks, 1)
	tr := New(cfg)
	tr.SetNow(t0)
	return tr
}

func prompt(base, n int) []int64 {
	p := make([]int64, n)
	for i := range p {
		p[i] = int64(base + i)
	}
	return p
}

// drain takes the Ready, runs its replies and checks the invariants.
func drain(t *testing.T, tr *Tier) Ready {
	t.Helper()
	r := tr.Ready()
	for _, f := range r.Replies {
		f.Reply()
	}
	if err := tr.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
	return r
}

// allocate runs one allocation up to its answer; below, when not nil, is the
// index's answer for the blocks the GPU misses.
func allocate(t *testing.T, tr *Tier, seq uint64, tokens []int64, below []messages.Tier) (messages.AllocResult, Ready) {
	t.Helper()
	var res *messages.AllocateBatchResult
	tr.AllocateBatch([]messages.AllocRequest{{Seq: seq, Tokens: tokens}},
		[]*blockpool.Keys{blockpool.ComputeKeys("", tokens, bs, true)}, func(r *messages.AllocateBatchResult) { res = r })
	r := drain(t, tr)
	if len(r.ToIndex) == 1 {
		lk := r.ToIndex[0].(*messages.Lookup)
		tr.LookupDone(&messages.LookupResult{ID: lk.ID, Tiers: [][]messages.Tier{below}})
		r = drain(t, tr)
	}
	if res == nil {
		t.Fatal("the allocation was not answered")
	}
	return res.Results[0], r
}

func fetchRequest(t *testing.T, r Ready) *messages.FetchRequest {
	t.Helper()
	for _, m := range r.ToPinned {
		if f, ok := m.(*messages.FetchRequest); ok {
			return f
		}
	}
	t.Fatalf("no FetchRequest in %+v", r.ToPinned)
	return nil
}

// TestLoadDeadlineOnInjectedClock: the deadline of a load is computed on the
// Tier's clock; when it fires before the grant, the load is a miss in the
// blocks it was given (no copy writes them), and the late grant is given
// straight back.
func TestLoadDeadlineOnInjectedClock(t *testing.T) {
	tr := newTier(t, 8, Config{Lower: true, ReadBase: 10 * time.Millisecond, ReadPerToken: time.Millisecond})
	p := prompt(1, 3*bs)
	res, r := allocate(t, tr, 1, p, []messages.Tier{messages.Pinned, messages.Pinned, messages.Pinned})
	if res.Err != nil || res.Tokens.Of(messages.Pinned) != 3*bs {
		t.Fatalf("allocation %+v", res)
	}
	req := fetchRequest(t, r)
	want := t0.Add(10*time.Millisecond + 3*bs*time.Millisecond)
	if len(r.Timers) != 1 || !r.Timers[0].At.Equal(want) || !req.Deadline.Equal(want) || r.Timers[0].ID != req.ID {
		t.Fatalf("timers %+v, request deadline %v, want one at %v", r.Timers, req.Deadline, want)
	}
	tr.SetNow(want)
	tr.Deadline(req.ID)
	drain(t, tr)
	select {
	case <-res.Ready.Done():
	default:
		t.Fatal("Ready did not complete at the deadline")
	}
	out := res.Ready.Outcome()
	if out.ValidTokens != 0 || out.Late != 3 || out.Blocks != nil {
		t.Fatalf("outcome %+v, want 3 late blocks in the table allocated", out)
	}
	for _, b := range res.Blocks {
		if n := tr.pool.Pinned(b); n != 0 {
			t.Fatalf("block %d of the late load still pinned (%d) for a copy that never starts", b, n)
		}
	}
	tr.FetchGranted(&messages.FetchGrant{ID: req.ID, Slots: []int{5, 6, 7}, Bytes: make([][]byte, 3)})
	r = drain(t, tr)
	if len(r.ToPinned) != 1 || len(r.Copies) != 0 {
		t.Fatalf("a late grant: %+v, want the slots released and no copy", r)
	}
	if rel, ok := r.ToPinned[0].(*messages.FetchRelease); !ok || len(rel.Slots) != 3 {
		t.Fatalf("a late grant: %+v", r.ToPinned[0])
	}
	if st := tr.Stats(); st.Timeouts != 3 || st.InFlight != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// TestLoadCopyFailureIsMiss: a failed copy up turns the load into a miss
// counted as failed; nothing is published.
func TestLoadCopyFailureIsMiss(t *testing.T) {
	tr := newTier(t, 8, Config{Lower: true})
	p := prompt(1, 2*bs)
	res, r := allocate(t, tr, 1, p, []messages.Tier{messages.Pinned, messages.Pinned})
	req := fetchRequest(t, r)
	if len(r.Timers) != 0 {
		t.Fatalf("no deadline configured, yet timers %+v", r.Timers)
	}
	tr.FetchGranted(&messages.FetchGrant{ID: req.ID, Slots: []int{0, 1}, Bytes: [][]byte{nil, nil}})
	r = drain(t, tr)
	if len(r.Copies) != 1 || r.Copies[0].Dir != gpu.H2D || !r.Copies[0].Fetch || len(r.Copies[0].Ops) != 2 {
		t.Fatalf("copies %+v, want one H2D batch of 2", r.Copies)
	}
	tr.CopyDone(r.Copies[0].CopyID, errors.New("injected"))
	r = drain(t, tr)
	out := res.Ready.Outcome()
	if out.ValidTokens != 0 || out.Failed != 2 {
		t.Fatalf("outcome %+v, want 2 failed", out)
	}
	if _, ok := r.ToPinned[0].(*messages.FetchRelease); !ok {
		t.Fatalf("the slots were not released: %+v", r.ToPinned)
	}
	if n, err := tr.pool.CachedBlocks(p, blockpool.ComputeKeys("", p, bs, true)); err != nil || n != 0 {
		t.Fatalf("%d blocks of a failed load are findable (%v)", n, err)
	}
}

// TestCommitBeforeOffloadAndFences: under IngestAll nothing is offered down
// before its commit; the commit offers its blocks, and their copy waits on
// the commit's fence while it is not done.
func TestCommitBeforeOffloadAndFences(t *testing.T) {
	tr := newTier(t, 8, Config{Lower: true, Ingestion: IngestAll})
	p := prompt(1, 2*bs+1)
	res, r := allocate(t, tr, 1, p, []messages.Tier{})
	if res.Err != nil || len(r.ToPinned) != 0 {
		t.Fatalf("allocation %+v, to pinned %+v", res, r.ToPinned)
	}
	f := gpu.NewHostFence()
	tr.CommitBatch([]messages.CommitItem{{Seq: 1, Tokens: 2 * bs, After: f}}, func(*messages.CommitBatchResult) {})
	r = drain(t, tr)
	if len(r.ToPinned) != 1 {
		t.Fatalf("commit sent %+v, want one OffloadRequest", r.ToPinned)
	}
	off := r.ToPinned[0].(*messages.OffloadRequest)
	if len(off.Items) != 2 {
		t.Fatalf("offload of %d blocks, want the 2 committed", len(off.Items))
	}
	tr.OffloadGranted(&messages.OffloadGrant{ID: off.ID, Slots: []int{0, 1}, Bytes: make([][]byte, 2)})
	r = drain(t, tr)
	if len(r.Copies) != 1 || r.Copies[0].Dir != gpu.D2H || len(r.Copies[0].Fences) != 1 {
		t.Fatalf("copies %+v, want one D2H behind the commit's fence", r.Copies)
	}
	tr.CopyDone(r.Copies[0].CopyID, nil)
	r = drain(t, tr)
	if done, ok := r.ToPinned[0].(*messages.OffloadDone); !ok || done.Err != nil || len(done.Slots) != 2 {
		t.Fatalf("after the copy: %+v", r.ToPinned)
	}
	// Free without a further commit: the partial block holds nothing
	// computed and is never offered; the written-down blocks are not again.
	tr.FreeBatch([]uint64{1}, true, func(*messages.FreeBatchResult) {})
	if r = drain(t, tr); len(r.ToPinned) != 0 {
		t.Fatalf("a swap after the write-through offered %+v", r.ToPinned)
	}
}

// TestAbortOffersNothing: a sequence freed (or swapped) before any commit
// leaves nothing findable and offers nothing down.
func TestAbortOffersNothing(t *testing.T) {
	tr := newTier(t, 8, Config{Lower: true, Ingestion: IngestAll})
	p := prompt(1, 3*bs)
	if res, _ := allocate(t, tr, 1, p, []messages.Tier{}); res.Err != nil {
		t.Fatal(res.Err)
	}
	tr.FreeBatch([]uint64{1}, true, func(*messages.FreeBatchResult) {})
	if r := drain(t, tr); len(r.ToPinned) != 0 || len(r.Copies) != 0 {
		t.Fatalf("an aborted sequence offered %+v", r)
	}
	if n, _ := tr.pool.CachedBlocks(p, blockpool.ComputeKeys("", p, bs, true)); n != 0 {
		t.Fatalf("%d blocks of an aborted sequence are hits", n)
	}
}

// TestStopAnswersEveryone: Stop answers a pending lookup with ErrStopped,
// fails loads in flight, answers flushes, and leaves callers whose blocks a
// copy touches to be answered after that copy.
func TestStopAnswersEveryone(t *testing.T) {
	tr := newTier(t, 8, Config{Lower: true})
	p := prompt(1, 2*bs)
	res, r := allocate(t, tr, 1, p, []messages.Tier{messages.Pinned, messages.Pinned})
	req := fetchRequest(t, r)
	tr.FetchGranted(&messages.FetchGrant{ID: req.ID, Slots: []int{0, 1}, Bytes: make([][]byte, 2)})
	drain(t, tr)
	var pending *messages.AllocateBatchResult
	q := prompt(100, 2*bs)
	tr.AllocateBatch([]messages.AllocRequest{{Seq: 2, Tokens: q}}, []*blockpool.Keys{blockpool.ComputeKeys("", q, bs, true)},
		func(r *messages.AllocateBatchResult) { pending = r })
	drain(t, tr) // waits for the index
	flush := make(chan error, 1)
	tr.Flush(flush)
	drain(t, tr)
	tr.Stop()
	r = drain(t, tr)
	if pending == nil || !errors.Is(pending.Results[0].Err, ErrStopped) {
		t.Fatalf("the allocation waiting for the index: %+v", pending)
	}
	if err := <-flush; !errors.Is(err, ErrStopped) {
		t.Fatalf("flush: %v", err)
	}
	if len(r.Stopped) != 1 || len(r.Stopped[0].Copies) != 1 || !r.Stopped[0].Copies[0].Fetch {
		t.Fatalf("stopped waits %+v, want the load's caller behind its copy", r.Stopped)
	}
	select {
	case <-res.Ready.Done():
		t.Fatal("Ready completed while its copy was on the stream")
	default:
	}
	r.Stopped[0].Complete()
	if out := res.Ready.Outcome(); out.Failed != 2 {
		t.Fatalf("outcome after Stop %+v", out)
	}
}

// TestMaxHitTokensCapsEveryTier: a request's MaxHitTokens caps GPU hits and
// loads together; past the cap blocks are fresh, and < 0 serves nothing.
func TestMaxHitTokensCapsEveryTier(t *testing.T) {
	tr := newTier(t, 16, Config{Lower: true})
	p := prompt(1, 4*bs+1)
	if res, _ := allocate(t, tr, 1, p, []messages.Tier{}); res.Err != nil {
		t.Fatal(res.Err)
	}
	tr.CommitBatch([]messages.CommitItem{{Seq: 1, Tokens: 2 * bs}}, func(*messages.CommitBatchResult) {})
	tr.FreeBatch([]uint64{1}, false, func(*messages.FreeBatchResult) {})
	drain(t, tr)
	below := []messages.Tier{messages.Pinned, messages.Pinned}
	for _, c := range []struct{ cap, gpu, pinned int }{
		{0, 2 * bs, 2 * bs},        // no cap: 2 GPU hits, 2 loads
		{3*bs + 2, 2 * bs, 1 * bs}, // rounded down to 3 blocks: 1 load
		{bs, bs, 0},                // 1 GPU hit, the second is recomputed
		{bs - 1, 0, 0},             // under one block: nothing
		{-1, 0, 0},                 // none
	} {
		var res *messages.AllocateBatchResult
		tr.AllocateBatch([]messages.AllocRequest{{Seq: 2, Tokens: p, MaxHitTokens: c.cap}},
			[]*blockpool.Keys{blockpool.ComputeKeys("", p, bs, true)}, func(r *messages.AllocateBatchResult) { res = r })
		r := drain(t, tr)
		if len(r.ToIndex) == 1 {
			tr.LookupDone(&messages.LookupResult{ID: r.ToIndex[0].(*messages.Lookup).ID, Tiers: [][]messages.Tier{below}})
			r = drain(t, tr)
		}
		got := res.Results[0]
		if got.Err != nil || got.Tokens.Of(messages.GPU) != c.gpu || got.Tokens.Of(messages.Pinned) != c.pinned {
			t.Fatalf("cap %d: %d GPU and %d pinned tokens (%v), want %d and %d", c.cap, got.Tokens.Of(messages.GPU), got.Tokens.Of(messages.Pinned), got.Err, c.gpu, c.pinned)
		}
		if c.pinned > 0 {
			req := fetchRequest(t, r)
			tr.FetchGranted(&messages.FetchGrant{ID: req.ID, Short: messages.MissEvicted}) // nothing left below
			drain(t, tr)
		}
		tr.FreeBatch([]uint64{2}, false, func(*messages.FreeBatchResult) {})
		drain(t, tr)
	}
}

// TestBelowGoneWritesAgain: a block written through remembers its copy below
// and is not offered again; once the index says the copy left every lower
// tier (BelowGone), a swap offers it again instead of dropping the only copy.
func TestBelowGoneWritesAgain(t *testing.T) {
	tr := newTier(t, 8, Config{Lower: true, Ingestion: IngestAll})
	p := prompt(1, 2*bs)
	if res, _ := allocate(t, tr, 1, p, []messages.Tier{}); res.Err != nil {
		t.Fatal(res.Err)
	}
	tr.CommitBatch([]messages.CommitItem{{Seq: 1, Tokens: 2 * bs}}, func(*messages.CommitBatchResult) {})
	r := drain(t, tr)
	off := r.ToPinned[0].(*messages.OffloadRequest)
	tr.OffloadGranted(&messages.OffloadGrant{ID: off.ID, Slots: []int{0, 1}, Bytes: make([][]byte, 2)})
	r = drain(t, tr)
	tr.CopyDone(r.Copies[0].CopyID, nil)
	drain(t, tr)
	// The first block's copy is gone from every lower tier.
	tr.BelowGone([]uint64{off.Items[0].Hash})
	drain(t, tr)
	tr.FreeBatch([]uint64{1}, true, func(*messages.FreeBatchResult) {})
	r = drain(t, tr)
	if len(r.ToPinned) != 1 {
		t.Fatalf("swap after BelowGone sent %+v, want one OffloadRequest", r.ToPinned)
	}
	again := r.ToPinned[0].(*messages.OffloadRequest)
	if len(again.Items) != 1 || again.Items[0].Hash != off.Items[0].Hash {
		t.Fatalf("swap offered %+v, want only the block whose copy left", again.Items)
	}
}

// TestGrantAfterDeadlineIsLate: a grant that arrives when the tier's clock is
// past the load's deadline, before its timer fired, makes the load late (the
// slots go straight back) instead of copying.
func TestGrantAfterDeadlineIsLate(t *testing.T) {
	tr := newTier(t, 8, Config{Lower: true, ReadBase: 10 * time.Millisecond})
	p := prompt(1, 2*bs)
	res, r := allocate(t, tr, 1, p, []messages.Tier{messages.Pinned, messages.Pinned})
	req := fetchRequest(t, r)
	tr.SetNow(req.Deadline)
	tr.FetchGranted(&messages.FetchGrant{ID: req.ID, Slots: []int{0, 1}, Bytes: make([][]byte, 2)})
	r = drain(t, tr)
	if len(r.Copies) != 0 {
		t.Fatalf("a late grant was copied: %+v", r.Copies)
	}
	if out := res.Ready.Outcome(); out.Late != 2 || out.ValidTokens != 0 {
		t.Fatalf("outcome %+v, want 2 late", out)
	}
}

// TestLoadDeadlineFromRequest: a request's LoadDeadline replaces the
// configured budget — with the budget disabled too — so the ranks of a
// group that pass one instant time their loads out against it.
func TestLoadDeadlineFromRequest(t *testing.T) {
	for _, cfg := range []Config{{Lower: true}, {Lower: true, ReadBase: time.Hour}} {
		tr := newTier(t, 8, cfg)
		p := prompt(1, 2*bs)
		at := t0.Add(7 * time.Millisecond)
		var res *messages.AllocateBatchResult
		tr.AllocateBatch([]messages.AllocRequest{{Seq: 1, Tokens: p, LoadDeadline: at}},
			[]*blockpool.Keys{blockpool.ComputeKeys("", p, bs, true)}, func(r *messages.AllocateBatchResult) { res = r })
		lk := drain(t, tr).ToIndex[0].(*messages.Lookup)
		tr.LookupDone(&messages.LookupResult{ID: lk.ID, Tiers: [][]messages.Tier{{messages.Pinned, messages.Pinned}}})
		r := drain(t, tr)
		req := fetchRequest(t, r)
		if len(r.Timers) != 1 || !r.Timers[0].At.Equal(at) || !req.Deadline.Equal(at) {
			t.Fatalf("config %+v: timers %+v, request deadline %v, want one at %v", cfg, r.Timers, req.Deadline, at)
		}
		tr.SetNow(at)
		tr.Deadline(req.ID)
		drain(t, tr)
		if out := res.Results[0].Ready.Outcome(); out.Late != 2 || out.ValidTokens != 0 {
			t.Fatalf("config %+v: outcome %+v, want 2 late blocks", cfg, out)
		}
	}
}

// TestOffloadAheadIsAWindow: blocks are written ahead of need only among the
// OffloadAhead free cached blocks next to be evicted. Batch after batch, and
// however many free blocks come behind them, nothing more is written while
// those are below already; when an allocation evicts them, the window moves
// on to the next ones. A block written ahead keeps its place in the free
// queue (blockpool.Pin), and until it is evicted its copy below holds a slot
// that a block the GPU no longer has could use.
func TestOffloadAheadIsAWindow(t *testing.T) {
	tr := newTier(t, 16, Config{Lower: true, OffloadAhead: 2, OffloadThreshold: 0.1})
	// complete grants and copies every offload in r and returns how many
	// blocks they wrote.
	var complete func(r Ready) int
	complete = func(r Ready) int {
		n := 0
		for _, m := range r.ToPinned {
			o, ok := m.(*messages.OffloadRequest)
			if !ok {
				continue
			}
			n += len(o.Items)
			slots := make([]int, len(o.Items))
			for i := range slots {
				slots[i] = i
			}
			tr.OffloadGranted(&messages.OffloadGrant{ID: o.ID, Slots: slots, Bytes: make([][]byte, len(o.Items))})
			for _, c := range drain(t, tr).Copies {
				tr.CopyDone(c.CopyID, nil)
				n += complete(drain(t, tr))
			}
		}
		return n
	}
	cycle := func(seq uint64, blocks int) int { // allocate, commit and free one sequence
		res, r := allocate(t, tr, seq, prompt(int(seq)*1000, blocks*bs), []messages.Tier{})
		if res.Err != nil {
			t.Fatal(res.Err)
		}
		n := complete(r)
		tr.CommitBatch([]messages.CommitItem{{Seq: seq, Tokens: blocks * bs}}, func(*messages.CommitBatchResult) {})
		n += complete(drain(t, tr))
		tr.FreeBatch([]uint64{seq}, false, func(*messages.FreeBatchResult) {})
		return n + complete(drain(t, tr))
	}
	written := cycle(1, 6) // six free cached blocks: the window's two are written
	for range 3 {          // batches that free nothing
		tr.FreeBatch(nil, false, func(*messages.FreeBatchResult) {})
		written += complete(drain(t, tr))
	}
	if written != 2 {
		t.Fatalf("%d blocks written ahead of need, want the window's 2", written)
	}
	if n := cycle(2, 4); n != 0 { // four more free behind them
		t.Fatalf("%d blocks written ahead of need past a window of blocks already below", n)
	}
	// Eight blocks: the six empty ones and the window's two, evicted with no
	// write (they are below). The window moves on to the next two.
	if n := cycle(3, 8); n != 2 {
		t.Fatalf("%d blocks written ahead of need after the window was evicted, want the next 2", n)
	}
}

// TestOffloadAheadAfterLookedUpAllocation: the offload ahead of need runs
// after a batch's allocations, also when they waited for the index's Lookup:
// the blocks an allocation takes can push the GPU past OffloadThreshold, and
// the free cached blocks next to be evicted are written down in the Ready
// that answers the batch, not a batch later. Before the allocation, with the
// GPU under the threshold, nothing is written.
func TestOffloadAheadAfterLookedUpAllocation(t *testing.T) {
	for _, inOrder := range []bool{false, true} {
		tr := newTier(t, 16, Config{Lower: true, OffloadAhead: 2, OffloadThreshold: 0.5})
		if res, _ := allocate(t, tr, 1, prompt(1000, 4*bs), []messages.Tier{}); res.Err != nil {
			t.Fatal(res.Err)
		}
		tr.CommitBatch([]messages.CommitItem{{Seq: 1, Tokens: 4 * bs}}, func(*messages.CommitBatchResult) {})
		drain(t, tr)
		tr.FreeBatch([]uint64{1}, false, func(*messages.FreeBatchResult) {})
		if r := drain(t, tr); len(r.ToPinned) != 0 { // 4 of 16 hold data: under 0.5
			t.Fatalf("in order %v: %+v sent below with the GPU under the threshold", inOrder, r.ToPinned)
		}
		reqs, keys := batchOf([]uint64{2}, [][]int64{prompt(2000, 5*bs)})
		res := allocateWith(tr, inOrder, reqs, keys)
		r := drain(t, tr)
		if len(r.ToPinned) != 0 {
			t.Fatalf("in order %v: %+v sent below before the allocation", inOrder, r.ToPinned)
		}
		r = answerLookup(t, tr, r) // 9 of 16 hold data now
		if *res == nil || (*res).Results[0].Err != nil {
			t.Fatalf("in order %v: allocation answered %+v", inOrder, *res)
		}
		n := 0
		for _, m := range r.ToPinned {
			if o, ok := m.(*messages.OffloadRequest); ok {
				n += len(o.Items)
			}
		}
		if n != 2 {
			t.Fatalf("in order %v: %d blocks offered below with the batch's answer, want the window's 2", inOrder, n)
		}
	}
}

// TestSerialOffloadsOneInFlight: with SerialOffloads a second offload waits
// until the first's copy is done, and goes to the pinned tier right after
// that OffloadDone; without it, both are offered at once.
func TestSerialOffloadsOneInFlight(t *testing.T) {
	for _, serial := range []bool{false, true} {
		tr := newTier(t, 8, Config{Lower: true, Ingestion: IngestAll, SerialOffloads: serial})
		for seq := uint64(1); seq <= 2; seq++ {
			if res, _ := allocate(t, tr, seq, prompt(int(100*seq), 2*bs), []messages.Tier{}); res.Err != nil {
				t.Fatal(res.Err)
			}
		}
		tr.CommitBatch([]messages.CommitItem{{Seq: 1, Tokens: 2 * bs}}, func(*messages.CommitBatchResult) {})
		first := drain(t, tr).ToPinned[0].(*messages.OffloadRequest)
		tr.CommitBatch([]messages.CommitItem{{Seq: 2, Tokens: 2 * bs}}, func(*messages.CommitBatchResult) {})
		r := drain(t, tr)
		if serial != (len(r.ToPinned) == 0) {
			t.Fatalf("serial %v: a commit while an offload is in flight sent %+v", serial, r.ToPinned)
		}
		if !serial {
			continue
		}
		// A Flush now covers the queued offload too.
		flush := make(chan error, 1)
		tr.Flush(flush)
		drain(t, tr)
		tr.OffloadGranted(&messages.OffloadGrant{ID: first.ID, Slots: []int{0, 1}, Bytes: make([][]byte, 2)})
		r = drain(t, tr)
		tr.CopyDone(r.Copies[0].CopyID, nil)
		r = drain(t, tr)
		if len(flush) != 0 {
			t.Fatal("Flush answered while the queued offload had not run")
		}
		if len(r.ToPinned) != 2 {
			t.Fatalf("after the first copy: %+v, want its OffloadDone and the next OffloadRequest", r.ToPinned)
		}
		if _, ok := r.ToPinned[0].(*messages.OffloadDone); !ok {
			t.Fatalf("first message %T, want the OffloadDone", r.ToPinned[0])
		}
		next, ok := r.ToPinned[1].(*messages.OffloadRequest)
		if !ok || len(next.Items) != 2 || next.Items[0].Hash == first.Items[0].Hash {
			t.Fatalf("second message %+v, want the queued offload of sequence 2", r.ToPinned[1])
		}
		tr.OffloadGranted(&messages.OffloadGrant{ID: next.ID, Slots: []int{2, 3}, Bytes: make([][]byte, 2)})
		r = drain(t, tr)
		tr.CopyDone(r.Copies[0].CopyID, nil)
		drain(t, tr)
		if len(flush) != 1 || <-flush != nil {
			t.Fatal("Flush not answered once both offloads were done")
		}
	}
}

// TestSerialOffloadsParkBehindQueuedOffload: an allocation short of blocks
// only because write-throughs pin them parks until those copies end, the
// copies of offloads waiting their turn (SerialOffloads) included.
func TestSerialOffloadsParkBehindQueuedOffload(t *testing.T) {
	for _, serial := range []bool{false, true} {
		tr := newTier(t, 4, Config{Lower: true, Ingestion: IngestAll, SerialOffloads: serial})
		for seq := uint64(1); seq <= 2; seq++ {
			if res, _ := allocate(t, tr, seq, prompt(int(100*seq), 2*bs), []messages.Tier{}); res.Err != nil {
				t.Fatal(res.Err)
			}
			tr.CommitBatch([]messages.CommitItem{{Seq: seq, Tokens: 2 * bs}}, func(*messages.CommitBatchResult) {})
			drain(t, tr)
		}
		tr.FreeBatch([]uint64{1, 2}, false, func(*messages.FreeBatchResult) {})
		drain(t, tr)
		// Every block is free cached but pinned by a write-through.
		var res *messages.AllocateBatchResult
		p := prompt(5000, 4*bs)
		tr.AllocateBatch([]messages.AllocRequest{{Seq: 3, Tokens: p}},
			[]*blockpool.Keys{blockpool.ComputeKeys("", p, bs, true)}, func(r *messages.AllocateBatchResult) { res = r })
		r := drain(t, tr)
		if len(r.ToIndex) == 1 {
			lk := r.ToIndex[0].(*messages.Lookup)
			tr.LookupDone(&messages.LookupResult{ID: lk.ID, Tiers: [][]messages.Tier{{}}})
			drain(t, tr)
		}
		if res != nil {
			var ns *blockpool.NoSpaceError
			t.Fatalf("serial %v: answered at once (NoSpace %v): %+v, want it parked until the write-throughs end",
				serial, errors.As(res.Results[0].Err, &ns), res.Results[0])
		}
	}
}

// TestLowerGoneAnswersWhatWaitedBelow: when the tiers below stop for good,
// an allocation waiting for the index is answered as a miss below, a load
// waiting for its grant misses (MissFailed), offers not yet granted (one
// sent, one queued behind it under SerialOffloads) are denied and their
// blocks released, a flush is answered, and nothing more goes below.
func TestLowerGoneAnswersWhatWaitedBelow(t *testing.T) {
	tr := newTier(t, 16, Config{Lower: true, Ingestion: IngestAll, SerialOffloads: true})
	for seq := uint64(1); seq <= 2; seq++ {
		if res, _ := allocate(t, tr, seq, prompt(int(100*seq), 2*bs), []messages.Tier{}); res.Err != nil {
			t.Fatal(res.Err)
		}
	}
	tr.CommitBatch([]messages.CommitItem{{Seq: 1, Tokens: 2 * bs}}, func(*messages.CommitBatchResult) {})
	sent := drain(t, tr)
	if len(sent.ToPinned) != 1 {
		t.Fatalf("commit of sequence 1 sent %+v, want one offer", sent.ToPinned)
	}
	offer := sent.ToPinned[0].(*messages.OffloadRequest)
	tr.CommitBatch([]messages.CommitItem{{Seq: 2, Tokens: 2 * bs}}, func(*messages.CommitBatchResult) {})
	if r := drain(t, tr); len(r.ToPinned) != 0 {
		t.Fatalf("second offer not queued: %+v", r.ToPinned)
	}
	// A load of a chain pinned memory holds, waiting for its grant.
	load, _ := allocate(t, tr, 3, prompt(500, 2*bs), []messages.Tier{messages.Pinned, messages.Pinned})
	if load.Err != nil {
		t.Fatal(load.Err)
	}
	// An allocation waiting for the index.
	var pending *messages.AllocateBatchResult
	q := prompt(900, 2*bs)
	tr.AllocateBatch([]messages.AllocRequest{{Seq: 4, Tokens: q}}, []*blockpool.Keys{blockpool.ComputeKeys("", q, bs, true)},
		func(r *messages.AllocateBatchResult) { pending = r })
	drain(t, tr)
	flush := make(chan error, 1)
	tr.Flush(flush)
	drain(t, tr)
	if pending != nil || len(flush) != 0 {
		t.Fatal("answered before the tiers below were gone")
	}

	tr.LowerGone()
	r := drain(t, tr)
	if pending == nil || pending.Results[0].Err != nil || pending.Results[0].Tokens.Below() != 0 {
		t.Fatalf("the allocation waiting for the index: %+v, want a miss below", pending)
	}
	select {
	case <-load.Ready.Done():
		if out := load.Ready.Outcome(); out.Failed != 2 {
			t.Errorf("the load waiting for its grant: outcome %+v, want 2 failed", out)
		}
	default:
		t.Error("the load waiting for its grant was not answered")
	}
	if len(flush) != 1 || <-flush != nil {
		t.Error("the flush was not answered")
	}
	for _, m := range r.ToPinned {
		if _, ok := m.(*messages.OffloadRequest); ok {
			t.Errorf("the queued offer was sent after LowerGone: %+v", m)
		}
	}
	if st := tr.Stats(); st.Denied != 4 {
		t.Errorf("denied %d blocks, want the 4 of the two offers", st.Denied)
	}
	// The pinned tier, still running (the index stopped), grants the offer
	// given up: its slots go back at once, aborted.
	tr.OffloadGranted(&messages.OffloadGrant{ID: offer.ID, Slots: []int{5, messages.SlotDenied}, Bytes: make([][]byte, 2)})
	r = drain(t, tr)
	if len(r.ToPinned) != 1 || len(r.Copies) != 0 {
		t.Fatalf("a grant after LowerGone: %+v, copies %d; want its slot handed back and no copy", r.ToPinned, len(r.Copies))
	}
	if d, ok := r.ToPinned[0].(*messages.OffloadDone); !ok || !slices.Equal(d.Slots, []int{5}) || !errors.Is(d.Err, ErrLowerGone) {
		t.Fatalf("a grant after LowerGone answered %+v, want slot 5 back with ErrLowerGone", r.ToPinned[0])
	}
	// Later work stays on the GPU.
	tr.CommitBatch([]messages.CommitItem{{Seq: 4, Tokens: 2 * bs}}, func(*messages.CommitBatchResult) {})
	q2 := prompt(1300, 2*bs)
	tr.AllocateBatch([]messages.AllocRequest{{Seq: 5, Tokens: q2}}, []*blockpool.Keys{blockpool.ComputeKeys("", q2, bs, true)},
		func(*messages.AllocateBatchResult) {})
	if r := drain(t, tr); len(r.ToPinned) != 0 || len(r.ToIndex) != 0 {
		t.Errorf("after LowerGone: to pinned %+v, to index %+v", r.ToPinned, r.ToIndex)
	}
}

// TestBatchNamesEachSequenceOnce: a batch's items do not all run in order
// (allocations wait for the index, appends park for blocks, while later
// items go ahead), so a second item for the same sequence is refused with
// ErrBadArgument and changes nothing; the first runs as alone. Before, two
// appends to one sequence could apply out of order and publish a block
// under tokens its KV was not written for, and a later duplicate
// allocation could win over an earlier one.
func TestBatchNamesEachSequenceOnce(t *testing.T) {
	tr := newTier(t, 16, Config{Lower: true})
	p, q := prompt(1, 2*bs), prompt(100, bs)
	var res *messages.AllocateBatchResult
	tr.AllocateBatch([]messages.AllocRequest{{Seq: 5, Tokens: p}, {Seq: 5, Tokens: q}},
		[]*blockpool.Keys{blockpool.ComputeKeys("", p, bs, true), blockpool.ComputeKeys("", q, bs, true)},
		func(r *messages.AllocateBatchResult) { res = r })
	r := drain(t, tr)
	if len(r.ToIndex) == 1 {
		lk := r.ToIndex[0].(*messages.Lookup)
		tr.LookupDone(&messages.LookupResult{ID: lk.ID, Tiers: make([][]messages.Tier, len(lk.Chains))})
		drain(t, tr)
	}
	if res == nil || res.Results[0].Err != nil || !errors.Is(res.Results[1].Err, blockpool.ErrBadArgument) {
		t.Fatalf("allocations %+v, want the first applied and the second refused", res)
	}
	if n, _ := tr.pool.NumTokens(5); n != len(p) {
		t.Fatalf("sequence 5 holds %d tokens, want the first item's %d", n, len(p))
	}
	var app *messages.AppendBatchResult
	tr.AppendBatch([]messages.AppendItem{{Seq: 5, Tokens: []int64{7}}, {Seq: 5, Tokens: []int64{8, 9}}},
		func(r *messages.AppendBatchResult) { app = r })
	drain(t, tr)
	if app == nil || app.Errs[0] != nil || !errors.Is(app.Errs[1], blockpool.ErrBadArgument) || len(app.Blocks[1]) != 0 {
		t.Fatalf("appends %+v, want the first applied and the second refused", app)
	}
	if n, _ := tr.pool.NumTokens(5); n != len(p)+1 {
		t.Fatalf("sequence 5 holds %d tokens after the appends, want %d", n, len(p)+1)
	}
}
