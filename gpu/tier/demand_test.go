package tier

import (
	"slices"
	"testing"

	"github.com/kvtier/kvtier/messages"
)

// demandIn returns the one Demand in r's messages to the index, or nil.
func demandIn(t *testing.T, r Ready) *messages.Demand {
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
	return d
}

// commit commits seqs' first block each and returns the Ready.
func commit(t *testing.T, tr *Tier, seqs ...uint64) Ready {
	t.Helper()
	items := make([]messages.CommitItem, len(seqs))
	for i, s := range seqs {
		items[i] = messages.CommitItem{Seq: s, Tokens: bs}
	}
	var res *messages.CommitBatchResult
	tr.CommitBatch(items, func(r *messages.CommitBatchResult) { res = r })
	r := drain(t, tr)
	for i, err := range res.Errs {
		if err != nil {
			t.Fatalf("commit of sequence %d: %v", seqs[i], err)
		}
	}
	return r
}

// firsts returns the first hash of each of d's chains.
func firsts(d *messages.Demand) []uint64 {
	if d == nil {
		return nil
	}
	var out []uint64
	for _, c := range d.Chains {
		out = append(out, c[0])
	}
	return out
}

// TestDemandAtFirstCommit: the index hears of a looked-up chain
// (messages.Demand, from which it tells the disk of its misses) at its
// sequence's first commit — the engine computes what it missed — and not
// at the allocation: not for a request refused for lack of blocks, in
// either kind of batch, nor for one tried after it in order, nor for one
// freed before it was committed (a scheduler keeping its order frees
// those); not for a chain pinned memory and the disk held all of; and once.
// The chain is the part looked up, with the index's answer.
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
			t.Fatalf("in order %v: Demand %+v at the allocation (answered %v)", inOrder, demandIn(t, r), *res != nil)
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
		if !inOrder {
			freeSeqs(t, tr, 4) // freed unused: tried again later, its misses count then
		}
		// Loads of 1 and 2 in flight: land them so that they may commit.
		for _, m := range r.ToPinned {
			if f, ok := m.(*messages.FetchRequest); ok {
				slots := make([]int, len(f.Hashes))
				for i := range slots {
					slots[i] = i + int(f.ID)*8
				}
				tr.FetchGranted(&messages.FetchGrant{ID: f.ID, Slots: slots, Bytes: make([][]byte, len(slots))})
				for _, c := range drain(t, tr).Copies {
					tr.CopyDone(c.CopyID, nil)
					drain(t, tr)
				}
			}
		}
		dm := demandIn(t, commit(t, tr, applied[0], applied[1]))
		if got := firsts(dm); !slices.Equal(got, []uint64{lk.Chains[0][0]}) {
			t.Fatalf("in order %v: Demand names chains starting %v at the commit of 1 and 2, want a's %v only (b held all below)", inOrder, got, lk.Chains[0][0])
		}
		if !slices.Equal(dm.Chains[0], lk.Chains[0]) || !slices.Equal(dm.Runs[0], runs[0]) {
			t.Fatalf("in order %v: Demand chain %v run %v, want the Lookup's %v and the answer %v", inOrder, dm.Chains[0], dm.Runs[0], lk.Chains[0], runs[0])
		}
		if d := demandIn(t, commit(t, tr, 1)); d != nil {
			t.Fatalf("in order %v: a second commit of 1 sent %+v", inOrder, d)
		}
		if !inOrder {
			if got := firsts(demandIn(t, commit(t, tr, 5))); !slices.Equal(got, []uint64{lk.Chains[4][0]}) {
				t.Fatalf("Demand names %v at the commit of 5, want its chain served by the shared tier", got)
			}
		}
	}
}

// TestDemandChainAfterGPUHits: the chain kept is the part looked up below,
// after the blocks the GPU served.
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
	dm := demandIn(t, commit(t, tr, 2))
	if dm == nil || len(dm.Chains) != 1 || !slices.Equal(dm.Chains[0], lk.Chains[0]) {
		t.Fatalf("Demand %+v, want the looked-up chain %v", dm, lk.Chains[0])
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
		t.Fatalf("Demand %+v sent, %d kept, with ReportDemand off", d, len(tr.demand))
	}
}

// TestDemandWhenParkedRequestIsCommitted: a request that parks for blocks
// (and the one held back behind it in order) keeps its chain when it is
// applied and sends it at its commit, once — also when its run below was
// too short for a double get (loaded nothing, looked up all the same); if
// its caller withdraws instead, it keeps nothing.
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
				t.Fatalf("withdrawn: %d chains kept", len(tr.demand))
			}
			continue
		}
		if c.minGet == 1 { // its one block below is loading: land it
			for id := range tr.fetches {
				tr.FetchGranted(&messages.FetchGrant{ID: id, Slots: []int{7}, Bytes: make([][]byte, 1)})
				for _, cp := range drain(t, tr).Copies {
					tr.CopyDone(cp.CopyID, nil)
					drain(t, tr)
				}
			}
		}
		dm := demandIn(t, commit(t, tr, 4, 5))
		if dm == nil || len(dm.Chains) != 2 || !slices.Equal(dm.Chains[0], lk.Chains[0]) || !slices.Equal(dm.Chains[1], lk.Chains[1]) {
			t.Fatalf("%+v: Demand %+v, want both chains %v", c, dm, lk.Chains)
		}
	}
}

// denyOffloads denies every offload in flight, in id order.
func denyOffloads(t *testing.T, tr *Tier) {
	t.Helper()
	for len(tr.offload) > 0 {
		ids := make([]uint64, 0, len(tr.offload))
		for id := range tr.offload {
			ids = append(ids, id)
		}
		slices.Sort(ids)
		id := ids[0]
		slots := make([]int, len(tr.offload[id].blocks))
		for i := range slots {
			slots[i] = messages.SlotDenied
		}
		tr.OffloadGranted(&messages.OffloadGrant{ID: id, Slots: slots, Bytes: make([][]byte, len(slots))})
		drain(t, tr)
	}
}
