package tier

import (
	"errors"
	"slices"
	"testing"

	"github.com/kvtier/kvtier/blockpool"
	"github.com/kvtier/kvtier/messages"
)

// demandIn returns the hashes of the one Demand in r's messages to the
// index, or nil.
func demandIn(t *testing.T, r Ready) []uint64 {
	t.Helper()
	var d *messages.Demand
	for _, m := range r.ToIndex {
		if x, ok := m.(*messages.Demand); ok {
			if d != nil {
				t.Fatalf("two Demand in one Ready: %+v", r.ToIndex)
			}
			d = x
		}
	}
	if d == nil {
		return nil
	}
	return d.Hashes
}

// commitTokens commits tokens of each of seqs and returns the Ready and
// the commit's errors.
func commitTokens(t *testing.T, tr *Tier, tokens int, seqs ...uint64) (Ready, []error) {
	t.Helper()
	items := make([]messages.CommitItem, len(seqs))
	for i, s := range seqs {
		items[i] = messages.CommitItem{Seq: s, Tokens: tokens}
	}
	var res *messages.CommitBatchResult
	tr.CommitBatch(items, func(r *messages.CommitBatchResult) { res = r })
	r := drain(t, tr)
	return r, res.Errs
}

// commit commits all of seqs' tokens and returns the Ready.
func commit(t *testing.T, tr *Tier, seqs ...uint64) Ready {
	t.Helper()
	r, errs := commitTokens(t, tr, blockpool.AllTokens, seqs...)
	for i, err := range errs {
		if err != nil {
			t.Fatalf("commit of sequence %d: %v", seqs[i], err)
		}
	}
	return r
}

// landAll grants and copies up every load r asks for, all of its blocks.
func landAll(t *testing.T, tr *Tier, r Ready) Ready {
	t.Helper()
	var out Ready
	for _, f := range fetchRequests(r) {
		slots := make([]int, len(f.Hashes))
		for i := range slots {
			slots[i] = i + int(f.ID)*8
		}
		tr.FetchGranted(&messages.FetchGrant{ID: f.ID, Slots: slots, Bytes: make([][]byte, len(slots))})
		for _, c := range drain(t, tr).Copies {
			tr.CopyDone(c.CopyID, nil)
			d := drain(t, tr)
			out.ToIndex = append(out.ToIndex, d.ToIndex...)
		}
	}
	return out
}

// TestDemandAtFirstCommit: the index hears of the looked-up blocks neither
// pinned memory nor the disk held (messages.Demand, which it passes to the
// disk as misses) when the engine computed them — the sequence's first
// commit past what the cache gave it — or, for blocks the shared tier
// served, when they landed; never at the allocation: not for a request
// refused for lack of blocks, in either kind of batch, nor for one tried
// after it in order, nor for one freed before it was committed (a scheduler
// keeping its order frees those); and once.
func TestDemandAtFirstCommit(t *testing.T) {
	for _, inOrder := range []bool{false, true} {
		tr := newTier(t, 8, Config{Lower: true, ReportDemand: true})
		a, b, c, d, e := prompt(100, 2*bs), prompt(200, 2*bs), prompt(300, 5*bs), prompt(400, bs), prompt(500, bs)
		// Sequences 1 (a), 2 (b), 4 (d) and 5 (e) fit, 3 (c) does not; in
		// order 4 and 5 come after 3.
		reqs, keys := batchOf([]uint64{1, 2, 3, 4, 5}, [][]int64{a, b, c, d, e})
		res := allocateWith(tr, inOrder, reqs, keys)
		r := drain(t, tr)
		lk := r.ToIndex[0].(*messages.Lookup)
		runs := [][]messages.Tier{
			{messages.Disk},                  // a: its first block on disk
			{messages.Pinned, messages.Disk}, // b: all held below
			{messages.Disk},                  // c
			nil,                              // d: nothing below
			{messages.Remote},                // e: served by the shared tier, a miss here
		}
		tr.LookupDone(&messages.LookupResult{ID: lk.ID, Tiers: runs})
		if r = drain(t, tr); demandIn(t, r) != nil || *res == nil {
			t.Fatalf("in order %v: Demand %v at the allocation (answered %v)", inOrder, demandIn(t, r), *res != nil)
		}
		var applied []uint64
		for _, o := range (*res).Results {
			if o.Err == nil {
				applied = append(applied, o.Seq)
			}
		}
		if want := []uint64{1, 2, 4, 5}; !inOrder && !slices.Equal(applied, want) || inOrder && !slices.Equal(applied, want[:2]) {
			t.Fatalf("in order %v: sequences %v applied", inOrder, applied)
		}
		landed := demandIn(t, landAll(t, tr, r))
		if want := []uint64{lk.Chains[4][0]}; !inOrder && !slices.Equal(landed, want) || inOrder && landed != nil {
			t.Fatalf("in order %v: Demand %v when the loads landed, want e's block from the shared tier (unordered only)", inOrder, landed)
		}
		if !inOrder {
			freeSeqs(t, tr, 4) // freed unused: tried again later, its misses count then
		}
		if got := demandIn(t, commit(t, tr, 1, 2)); !slices.Equal(got, []uint64{lk.Chains[0][1]}) {
			t.Fatalf("in order %v: Demand %v at the commit of 1 and 2, want a's second block only (its first on disk, b all held below)", inOrder, got)
		}
		if d := demandIn(t, commit(t, tr, 1)); d != nil {
			t.Fatalf("in order %v: a second commit of 1 sent %v", inOrder, d)
		}
		if !inOrder {
			if d := demandIn(t, commit(t, tr, 5)); d != nil {
				t.Fatalf("the commit of 5 sent %v, counted when it landed", d)
			}
		}
	}
}

// TestDemandChainAfterGPUHits: the blocks reported are those looked up
// below, after the blocks the GPU served.
func TestDemandChainAfterGPUHits(t *testing.T) {
	tr := newTier(t, 16, Config{Lower: true, ReportDemand: true})
	p := prompt(100, 4*bs)
	if res, _ := allocate(t, tr, 1, p[:2*bs], []messages.Tier{}); res.Err != nil {
		t.Fatal(res.Err)
	}
	tr.CommitBatch([]messages.CommitItem{{Seq: 1, Tokens: 2 * bs}}, func(*messages.CommitBatchResult) {})
	drain(t, tr)
	reqs, keys := batchOf([]uint64{2}, [][]int64{p})
	allocateWith(tr, false, reqs, keys)
	r := drain(t, tr)
	lk := r.ToIndex[0].(*messages.Lookup)
	if len(lk.Chains[0]) != 2 {
		t.Fatalf("looked up %d blocks, want the 2 after the GPU's hits", len(lk.Chains[0]))
	}
	answerLookup(t, tr, r)
	if got := demandIn(t, commit(t, tr, 2)); !slices.Equal(got, lk.Chains[0]) {
		t.Fatalf("Demand %v, want the looked-up chain %v", got, lk.Chains[0])
	}
}

// TestDemandOnlyWhenReported: without Config.ReportDemand nothing is kept
// or sent.
func TestDemandOnlyWhenReported(t *testing.T) {
	tr := newTier(t, 8, Config{Lower: true})
	if res, _ := allocate(t, tr, 1, prompt(100, 2*bs), []messages.Tier{}); res.Err != nil {
		t.Fatal(res.Err)
	}
	if d := demandIn(t, commit(t, tr, 1)); d != nil || len(tr.demand) != 0 {
		t.Fatalf("Demand %v sent, %d kept, with ReportDemand off", d, len(tr.demand))
	}
}

// TestDemandPastWhatTheCacheGave: a commit of no more than the tokens the
// cache gave the sequence (none, or its loaded prefix) computed nothing and
// reports nothing; a commit refused only because its load is still in
// flight (ErrNotReady: an engine computing without waiting, best effort)
// counts when it goes past them.
func TestDemandPastWhatTheCacheGave(t *testing.T) {
	tr := newTier(t, 16, Config{Lower: true, ReportDemand: true})
	p := prompt(100, 3*bs)
	res, r := allocate(t, tr, 1, p, []messages.Tier{messages.Disk}) // block 0 loading, 1 and 2 missing
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	keys := blockpool.ComputeKeys("", p, bs, true)
	for _, tokens := range []int{0, bs} {
		r, errs := commitTokens(t, tr, tokens, 1)
		if !errors.Is(errs[0], ErrNotReady) || demandIn(t, r) != nil {
			t.Fatalf("commit of %d tokens while loading: %v, Demand %v; want ErrNotReady and nothing", tokens, errs[0], demandIn(t, r))
		}
	}
	if r, errs := commitTokens(t, tr, 4*bs, 1); !errors.Is(errs[0], ErrNotReady) || demandIn(t, r) != nil {
		t.Fatalf("commit past the sequence's end while loading: %v, Demand %v; want ErrNotReady and nothing", errs[0], demandIn(t, r))
	}
	r2, errs := commitTokens(t, tr, 3*bs, 1)
	want := []uint64{uint64(keys.Hashes[1]), uint64(keys.Hashes[2])}
	if !errors.Is(errs[0], ErrNotReady) || !slices.Equal(demandIn(t, r2), want) {
		t.Fatalf("commit of all while loading: %v, Demand %v; want ErrNotReady and %v", errs[0], demandIn(t, r2), want)
	}
	landAll(t, tr, r)
	if d := demandIn(t, commit(t, tr, 1)); d != nil {
		t.Fatalf("Demand %v again at the commit after the load", d)
	}
}

// TestDemandFromSharedTierOnce: blocks the shared tier served count when
// they land; a request freed unused after its load and tried again hits
// them on the GPU and reports nothing more.
func TestDemandFromSharedTierOnce(t *testing.T) {
	tr := newTier(t, 16, Config{Lower: true, ReportDemand: true})
	p := prompt(100, 2*bs)
	res, r := allocate(t, tr, 1, p, onTier(messages.Remote, 2))
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	keys := blockpool.ComputeKeys("", p, bs, true)
	if got := demandIn(t, landAll(t, tr, r)); !slices.Equal(got, []uint64{uint64(keys.Hashes[0]), uint64(keys.Hashes[1])}) {
		t.Fatalf("Demand %v when the shared tier's blocks landed, want both", got)
	}
	freeSeqs(t, tr, 1)
	if res, _ = allocate(t, tr, 1, p, nil); res.Err != nil || res.Tokens.Of(messages.GPU) != 2*bs {
		t.Fatalf("retry %+v, want both blocks GPU hits", res)
	}
	if d := demandIn(t, commit(t, tr, 1)); d != nil || len(tr.demand) != 0 {
		t.Fatalf("Demand %v at the retry's commit, %d kept", d, len(tr.demand))
	}
}

// TestDemandWhenParkedRequestIsCommitted: a request that parks for blocks
// (and the one held back behind it in order) keeps its blocks when it is
// applied and reports them at its commit, once — also when its run below
// was too short for a double get (loaded nothing, looked up all the same);
// if its caller withdraws instead, it keeps nothing.
func TestDemandWhenParkedRequestIsCommitted(t *testing.T) {
	for _, c := range []struct {
		withdraw bool
		minGet   int
	}{{false, 1}, {true, 1}, {false, 2}} {
		tr := parkSetup(t)
		tr.cfg.ReportDemand = true
		tr.cfg.DoubleGetMinBlocks = c.minGet
		reqs, keys := batchOf([]uint64{4, 5}, [][]int64{prompt(5000, 4*bs), prompt(6000, bs)})
		call := &messages.Call{}
		tr.SetCall(call)
		answered := false
		tr.AllocateInOrder(reqs, keys, func(*messages.AllocateBatchResult) { answered = true })
		tr.SetCall(nil)
		r := drain(t, tr)
		lk := r.ToIndex[0].(*messages.Lookup)
		tr.LookupDone(&messages.LookupResult{ID: lk.ID, Tiers: [][]messages.Tier{{messages.Disk}, nil}})
		if drain(t, tr); len(tr.parked) != 1 {
			t.Fatalf("%+v: %d parked, want sequence 4", c, len(tr.parked))
		}
		if c.withdraw {
			call.Withdraw()
			tr.Withdraw()
			drain(t, tr)
		}
		denyOffloads(t, tr) // the parked request retries
		if !answered {
			t.Fatalf("%+v: not answered", c)
		}
		if c.withdraw {
			if len(tr.demand) != 0 {
				t.Fatalf("withdrawn: %d kept", len(tr.demand))
			}
			continue
		}
		for id := range tr.fetches { // its one block on disk is loading: land it
			tr.FetchGranted(&messages.FetchGrant{ID: id, Slots: []int{7}, Bytes: make([][]byte, 1)})
			for _, cp := range drain(t, tr).Copies {
				tr.CopyDone(cp.CopyID, nil)
				drain(t, tr)
			}
		}
		want := append(slices.Clone(lk.Chains[0][1:]), lk.Chains[1]...) // 4's first block was on disk
		if got := demandIn(t, commit(t, tr, 4, 5)); !slices.Equal(got, want) {
			t.Fatalf("%+v: Demand %v, want %v", c, got, want)
		}
	}
}

// TestDemandNotFromUnansweredLookup: a Lookup nobody answered (the index
// restarted, or the tiers below went away while it waited) says nothing of
// what they hold: the allocation goes on and keeps nothing.
func TestDemandNotFromUnansweredLookup(t *testing.T) {
	for _, lowerGone := range []bool{false, true} {
		tr := newTier(t, 16, Config{Lower: true, ReportDemand: true})
		reqs, keys := batchOf([]uint64{1}, [][]int64{prompt(100, 2*bs)})
		res := allocateWith(tr, false, reqs, keys)
		r := drain(t, tr)
		if lowerGone {
			tr.LowerGone()
		} else {
			lk := r.ToIndex[0].(*messages.Lookup)
			tr.LookupDone(&messages.LookupResult{ID: lk.ID, Tiers: make([][]messages.Tier, 1), Unanswered: true})
		}
		drain(t, tr)
		if *res == nil || (*res).Results[0].Err != nil {
			t.Fatalf("lower gone %v: %+v", lowerGone, *res)
		}
		if d := demandIn(t, commit(t, tr, 1)); d != nil || len(tr.demand) != 0 {
			t.Fatalf("lower gone %v: Demand %v, %d kept", lowerGone, d, len(tr.demand))
		}
	}
}

// TestDemandStepFreeThenReallocate: one Step frees sequence 1 (never
// committed) and allocates a new 1 that looks up below: the old blocks are
// dropped, the new ones kept and reported at its commit, once; a Step that
// commits 1 again (reported already), frees it and allocates it again
// reports nothing and keeps the new allocation's.
func TestDemandStepFreeThenReallocate(t *testing.T) {
	tr := newTier(t, 16, Config{Lower: true, ReportDemand: true})
	a, b := prompt(100, 2*bs), prompt(500, 2*bs)
	if res, _ := allocate(t, tr, 1, a, []messages.Tier{}); res.Err != nil {
		t.Fatal(res.Err)
	}
	// step applies m, answers its Lookup (nothing below) and returns the
	// blocks reported meanwhile.
	step := func(m *messages.StepBatch) []uint64 {
		t.Helper()
		m.Reply = make(chan *messages.StepResult, 1)
		tr.Step(m)
		r := drain(t, tr)
		d := demandIn(t, r)
		lk := r.ToIndex[len(r.ToIndex)-1].(*messages.Lookup)
		tr.LookupDone(&messages.LookupResult{ID: lk.ID, Tiers: [][]messages.Tier{{}}})
		d = append(d, demandIn(t, drain(t, tr))...)
		if sr := <-m.Reply; sr.Allocate.Results[0].Err != nil {
			t.Fatal(sr.Allocate.Results[0].Err)
		}
		return d
	}
	reqs, keys := batchOf([]uint64{1}, [][]int64{b})
	step(&messages.StepBatch{Free: []uint64{1}, Allocate: reqs, Keys: keys})
	kb := blockpool.ComputeKeys("", b, bs, true)
	wantB := []uint64{uint64(kb.Hashes[0]), uint64(kb.Hashes[1])}
	if got := demandIn(t, commit(t, tr, 1)); !slices.Equal(got, wantB) {
		t.Fatalf("Demand %v, want the new sequence's %v only", got, wantB)
	}
	reqs, keys = batchOf([]uint64{1}, [][]int64{a})
	if d := step(&messages.StepBatch{Commit: []messages.CommitItem{{Seq: 1, Tokens: 2 * bs}}, Free: []uint64{1}, Allocate: reqs, Keys: keys}); len(d) != 0 {
		t.Fatalf("Demand %v at a commit of blocks already reported", d)
	}
	if len(tr.demand) != 1 {
		t.Fatalf("%d kept, want the new allocation's", len(tr.demand))
	}
}

// TestDemandKeptThroughRefusedCommit: a commit the pool refuses (more
// tokens than the sequence holds) reports nothing; the next one that
// succeeds reports the blocks.
func TestDemandKeptThroughRefusedCommit(t *testing.T) {
	tr := newTier(t, 16, Config{Lower: true, ReportDemand: true})
	if res, _ := allocate(t, tr, 1, prompt(100, 2*bs), []messages.Tier{}); res.Err != nil {
		t.Fatal(res.Err)
	}
	r, errs := commitTokens(t, tr, 3*bs, 1)
	if errs[0] == nil || demandIn(t, r) != nil {
		t.Fatalf("commit of more tokens than held: %v, Demand %v", errs[0], demandIn(t, r))
	}
	if d := demandIn(t, commit(t, tr, 1)); len(d) != 2 {
		t.Fatalf("Demand %v at the first successful commit, want 2 blocks", d)
	}
}

// TestDoubleGetSkipsOncePerParkedRequest: a request whose run below is too
// short for a double get parks for blocks and is retried: its skipped
// blocks count once, when it is applied.
func TestDoubleGetSkipsOncePerParkedRequest(t *testing.T) {
	tr := parkSetup(t)
	tr.cfg.DoubleGetMinBlocks = 2
	reqs, keys := batchOf([]uint64{4}, [][]int64{prompt(5000, 4*bs)})
	answered := false
	tr.AllocateBatch(reqs, keys, func(*messages.AllocateBatchResult) { answered = true })
	r := drain(t, tr)
	lk := r.ToIndex[0].(*messages.Lookup)
	tr.LookupDone(&messages.LookupResult{ID: lk.ID, Tiers: [][]messages.Tier{{messages.Disk}}})
	if drain(t, tr); len(tr.parked) != 1 {
		t.Fatalf("%d parked, want sequence 4", len(tr.parked))
	}
	if got := tr.Stats().DoubleGetSkips; got != 0 {
		t.Fatalf("DoubleGetSkips %d while parked, want 0", got)
	}
	denyOffloads(t, tr)
	if !answered {
		t.Fatal("not answered")
	}
	if got := tr.Stats().DoubleGetSkips; got != 1 {
		t.Fatalf("DoubleGetSkips %d after the retry, want 1", got)
	}
}

// denyOffloads denies every offload in flight, in id order.
func denyOffloads(t *testing.T, tr *Tier) {
	t.Helper()
	for len(tr.offload) > 0 {
		denyOffload(t, tr)
	}
}
