package tier

import (
	"slices"
	"testing"
	"time"

	"github.com/kvtier/kvtier/blockpool"
	"github.com/kvtier/kvtier/messages"
)

// landWith grants all of f's blocks, copies them up (err: the copy's
// outcome) and returns the blocks reported meanwhile.
func landWith(t *testing.T, tr *Tier, f *messages.FetchRequest, err error) []uint64 {
	t.Helper()
	slots := make([]int, len(f.Hashes))
	for i := range slots {
		slots[i] = i + 100
	}
	tr.FetchGranted(&messages.FetchGrant{ID: f.ID, Slots: slots, Bytes: make([][]byte, len(slots))})
	var out []uint64
	for _, c := range drain(t, tr).Copies {
		tr.CopyDone(c.CopyID, err)
		out = append(out, demandIn(t, drain(t, tr))...)
	}
	return out
}

// TestDemandNotFromFreedOwnersLoad: sequence 1 loads two blocks from the
// shared tier, is freed before they land, and a new sequence 1 (another
// prompt, nothing below) is allocated. The old load landing must not
// report the new sequence's blocks: it neither computed them nor did
// they land.
func TestDemandNotFromFreedOwnersLoad(t *testing.T) {
	tr := newTier(t, 16, Config{Lower: true, ReportDemand: true})
	a, b := prompt(100, 2*bs), prompt(500, 2*bs)
	res, r := allocate(t, tr, 1, a, onTier(messages.Remote, 2))
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	f := fetchRequest(t, r)
	freeSeqs(t, tr, 1)
	if res, _ := allocate(t, tr, 1, b, []messages.Tier{}); res.Err != nil {
		t.Fatal(res.Err)
	}
	ka := keysOf(a)
	if d := landWith(t, tr, f, nil); !slices.Equal(d, []uint64{uint64(ka.Hashes[0]), uint64(ka.Hashes[1])}) {
		t.Errorf("the old sequence 1's load landing reported %v, want its own blocks %v, not the new sequence 1's", d, ka.Hashes)
	}
	if len(tr.demand) != 1 || len(tr.orphans) != 0 {
		t.Errorf("%d kept, %d orphans: want the new sequence's blocks kept, nothing of the old", len(tr.demand), len(tr.orphans))
	}
}

// TestDemandAfterGivenUpLoad: a whole prompt (full blocks) the
// shared tier was to serve; the copy up fails, so the engine computes both
// blocks and commits the prompt — which is exactly held, so nothing is
// reported; freed then (a request that ends at its prefill, or preempted),
// the blocks the engine computed and the disk lacked are never reported.
func TestDemandAfterGivenUpLoad(t *testing.T) {
	tr := newTier(t, 16, Config{Lower: true, ReportDemand: true})
	p := prompt(100, 2*bs)
	res, r := allocate(t, tr, 1, p, onTier(messages.Remote, 2))
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	if d := landWith(t, tr, fetchRequest(t, r), errFailedCopy); d != nil {
		t.Fatalf("Demand %v from a failed copy", d)
	}
	got := demandIn(t, commit(t, tr, 1)) // the engine recomputed blocks 0 and 1
	freeSeqs(t, tr, 1)
	k := keysOf(p)
	if want := []uint64{uint64(k.Hashes[0]), uint64(k.Hashes[1])}; !slices.Equal(got, want) {
		t.Errorf("Demand %v at the commit of the recomputed prompt, want %v: held still counts the load that failed", got, want)
	}
}

// TestDemandFromSharedLoadOfFreedSequence: sequence 1 is freed unused (its
// tensor-parallel peer had no room) while its shared-tier load is in
// flight; the load lands after, its blocks become GPU hits, and the retry
// hits them there: the blocks are never reported — the case demandLanded
// was added for.
func TestDemandFromSharedLoadOfFreedSequence(t *testing.T) {
	tr := newTier(t, 16, Config{Lower: true, ReportDemand: true})
	p := prompt(100, 2*bs)
	res, r := allocate(t, tr, 1, p, onTier(messages.Remote, 2))
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	f := fetchRequest(t, r)
	freeSeqs(t, tr, 1)
	var all []uint64
	all = append(all, landWith(t, tr, f, nil)...)
	res, r2 := allocate(t, tr, 2, p, nil)
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	all = append(all, demandIn(t, r2)...)
	all = append(all, demandIn(t, commit(t, tr, 2))...)
	k := keysOf(p)
	if want := []uint64{uint64(k.Hashes[0]), uint64(k.Hashes[1])}; !slices.Equal(all, want) {
		t.Errorf("reported %v over the freed load and the retry (%d GPU tokens), want the shared tier's blocks %v once", all, res.Tokens.Of(messages.GPU), want)
	}
}

// errFailedCopy fails a copy.
var errFailedCopy = blockpool.ErrBadArgument

// TestDemandShortSharedGrant: the shared tier grants the
// first of three blocks only; the one that landed is reported then, the two
// cut short (computed by the engine) at its commit past held. Kills the
// mutant that reports op.want blocks as landed (or reports before a
// Delete's truncation), which the package's tests let survive.
func TestDemandShortSharedGrant(t *testing.T) {
	tr, p, f := sharedLoad(t)
	tr.FetchGranted(&messages.FetchGrant{ID: f.ID, Slots: []int{0}, Bytes: make([][]byte, 1), Short: messages.MissEvicted})
	var landed []uint64
	for _, c := range drain(t, tr).Copies {
		tr.CopyDone(c.CopyID, nil)
		landed = append(landed, demandIn(t, drain(t, tr))...)
	}
	k := keysOf(p)
	if want := []uint64{uint64(k.Hashes[0])}; !slices.Equal(landed, want) {
		t.Fatalf("Demand %v when the short grant landed, want %v", landed, want)
	}
	if got, want := demandIn(t, commit(t, tr, 1)), []uint64{uint64(k.Hashes[1]), uint64(k.Hashes[2])}; !slices.Equal(got, want) {
		t.Fatalf("Demand %v at the commit, want %v", got, want)
	}
}

// TestDemandDeleteDuringSharedLoad: a Delete of the chain's
// first two blocks while the shared tier's three blocks load: none
// publishes and all are reported at the commit. Kills the
// mutant that reports before the Delete's truncation.
func TestDemandDeleteDuringSharedLoad(t *testing.T) {
	tr, p, f := sharedLoad(t)
	// Delete the chain p[:2*bs]: its digests match blocks 0 and 1 of the load.
	tr.Query(&messages.Query{Kind: messages.QueryDelete, Keys: keysOf(p[:2*bs]), Tokens: p[:2*bs], Reply: make(chan *messages.QueryResult, 1)})
	drain(t, tr)
	landed := landWith(t, tr, f, nil)
	got := demandIn(t, commit(t, tr, 1))
	if len(landed)+len(got) != 3 || len(landed) != 0 {
		t.Fatalf("landed %v, at commit %v: want nothing landed (the Delete keeps none) and all 3 at the commit", landed, got)
	}
}

// sharedLoad allocates sequence 1, three blocks and a token, its blocks
// served by the shared tier, and returns its prompt and its load's request.
func sharedLoad(t *testing.T) (*Tier, []int64, *messages.FetchRequest) {
	t.Helper()
	tr := newTier(t, 16, Config{Lower: true, ReportDemand: true})
	p := prompt(100, 3*bs+1)
	res, r := allocate(t, tr, 1, p, onTier(messages.Remote, 3))
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	return tr, p, fetchRequest(t, r)
}

// TestDemandAfterLoadGivenUpAtOnce: a request whose LoadDeadline has already
// passed gives its load up inside its own allocation (before any request
// below); the blocks it was to load from the shared tier are computed by
// the engine, so its commit reports them — what the cache gave it must be
// lowered before the loads start, not after.
func TestDemandAfterLoadGivenUpAtOnce(t *testing.T) {
	tr := newTier(t, 16, Config{Lower: true, ReportDemand: true})
	p := prompt(100, 2*bs)
	k := blockpool.ComputeKeys("", p, bs, true)
	var res *messages.AllocateBatchResult
	tr.AllocateBatch([]messages.AllocRequest{{Seq: 1, Tokens: p, LoadDeadline: t0.Add(-time.Millisecond)}},
		[]*blockpool.Keys{k}, func(r *messages.AllocateBatchResult) { res = r })
	lk := drain(t, tr).ToIndex[0].(*messages.Lookup)
	tr.LookupDone(&messages.LookupResult{ID: lk.ID, Tiers: [][]messages.Tier{onTier(messages.Remote, 2)}})
	drain(t, tr)
	if res == nil || res.Results[0].Err != nil {
		t.Fatalf("allocation %+v", res)
	}
	if out := res.Results[0].Ready.Outcome(); out.ValidTokens != 0 || out.Late != 2 {
		t.Fatalf("outcome %+v, want both blocks late", out)
	}
	got := demandIn(t, commit(t, tr, 1))
	if want := []uint64{uint64(k.Hashes[0]), uint64(k.Hashes[1])}; !slices.Equal(got, want) {
		t.Errorf("Demand %v at the commit of the recomputed prompt, want %v", got, want)
	}
}
