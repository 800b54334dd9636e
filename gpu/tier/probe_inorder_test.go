package tier

import (
	"errors"
	"slices"
	"testing"

	"github.com/kvtier/kvtier/blockpool"
	"github.com/kvtier/kvtier/messages"
)

// Review probes for the ordered batch.

// TestProbeInOrderPoolErrorsDoNotStop: errors AllocateRequest returns for a
// request's own arguments (ErrSequenceExists, ErrEmptySequence) do not
// stop the ordered batch: the request after them still gets its block.
func TestProbeInOrderPoolErrorsDoNotStop(t *testing.T) {
	for _, lower := range []bool{false, true} {
		tr := newTier(t, 4, Config{Lower: lower})
		if res, _ := allocate(t, tr, 1, prompt(0, bs), []messages.Tier{}); res.Err != nil {
			t.Fatal(res.Err)
		}
		reqs, keys := batchOf([]uint64{1, 2, 3}, [][]int64{prompt(0, bs), nil, prompt(300, bs)})
		res := allocateWith(tr, true, reqs, keys)
		if r := drain(t, tr); len(r.ToIndex) == 1 {
			answerLookup(t, tr, r)
		}
		if *res == nil {
			t.Fatal("not answered")
		}
		rs := (*res).Results
		if !errors.Is(rs[0].Err, blockpool.ErrSequenceExists) || !errors.Is(rs[1].Err, blockpool.ErrEmptySequence) || rs[2].Err != nil || !held(tr, 3) {
			t.Fatalf("lower %v: %v / %v / %v (3 held %v): want ErrSequenceExists, ErrEmptySequence, then sequence 3 allocated",
				lower, rs[0].Err, rs[1].Err, rs[2].Err, held(tr, 3))
		}
	}
}

// parkSetup3: 8 blocks; sequences 1, 2 and 3 (2 blocks each) committed
// under IngestAll and freed, their write-throughs offered but not granted
// (6 blocks pinned, one offload each); 2 blocks free.
func parkSetup3(t *testing.T) *Tier {
	t.Helper()
	tr := newTier(t, 8, Config{Lower: true, Ingestion: IngestAll})
	for seq := uint64(1); seq <= 3; seq++ {
		if res, _ := allocate(t, tr, seq, prompt(int(100*seq), 2*bs), []messages.Tier{}); res.Err != nil {
			t.Fatal(res.Err)
		}
		tr.CommitBatch([]messages.CommitItem{{Seq: seq, Tokens: 2 * bs}}, func(*messages.CommitBatchResult) {})
		drain(t, tr)
	}
	tr.FreeBatch([]uint64{1, 2, 3}, false, func(*messages.FreeBatchResult) {})
	drain(t, tr)
	if n := tr.pool.NumFree(); n != 2 || len(tr.offload) != 3 {
		t.Fatalf("%d free, %d offloads: want 2 and 3", n, len(tr.offload))
	}
	return tr
}

func denyOffload(t *testing.T, tr *Tier) {
	t.Helper()
	ids := slices.Sorted(func(yield func(uint64) bool) {
		for id := range tr.offload {
			if !yield(id) {
				return
			}
		}
	})
	id := ids[0]
	slots := make([]int, len(tr.offload[id].blocks))
	for i := range slots {
		slots[i] = messages.SlotDenied
	}
	tr.OffloadGranted(&messages.OffloadGrant{ID: id, Slots: slots, Bytes: make([][]byte, len(slots))})
	drain(t, tr)
}

// TestProbeInOrderParksAgainInContinuation: the first request parks; once
// it is allocated, the second parks in the continuation (run by an
// OffloadGranted event, which names no Call); when the caller withdraws,
// the second and third are answered ErrCanceled and hold nothing, the
// first stands.
func TestProbeInOrderParksAgainInContinuation(t *testing.T) {
	tr := parkSetup3(t)
	reqs, keys := batchOf([]uint64{10, 11, 12}, [][]int64{prompt(5000, 3*bs), prompt(6000, 2*bs), prompt(7000, bs)})
	var res *messages.AllocateBatchResult
	call := &messages.Call{}
	tr.SetCall(call)
	tr.AllocateInOrder(reqs, keys, func(r *messages.AllocateBatchResult) { res = r })
	tr.SetCall(nil)
	answerLookup(t, tr, drain(t, tr))
	if res != nil || len(tr.parked) != 1 || held(tr, 10) {
		t.Fatalf("answered %v, parked %d, 10 held %v: want 10 parked", res != nil, len(tr.parked), held(tr, 10))
	}
	denyOffload(t, tr) // 4 free: 10 takes 3, 11 (2 blocks) parks
	if res != nil || len(tr.parked) != 1 || !held(tr, 10) || held(tr, 11) || held(tr, 12) {
		t.Fatalf("answered %v, parked %d, held 10 %v 11 %v 12 %v: want 10 allocated, 11 parked", res != nil, len(tr.parked), held(tr, 10), held(tr, 11), held(tr, 12))
	}
	call.Withdraw()
	tr.Withdraw()
	drain(t, tr)
	if res == nil {
		t.Fatal("not answered after the caller withdrew: the part parked in the continuation is not its Call's")
	}
	rs := res.Results
	if rs[0].Err != nil || !errors.Is(rs[1].Err, messages.ErrCanceled) || !errors.Is(rs[2].Err, messages.ErrCanceled) || held(tr, 11) || held(tr, 12) {
		t.Fatalf("%v / %v / %v: want ok, ErrCanceled, ErrCanceled", rs[0].Err, rs[1].Err, rs[2].Err)
	}
}

// TestProbeInOrderLowerGone: an ordered batch waiting for the index when
// the tiers below go is allocated, in order, from the GPU alone.
func TestProbeInOrderLowerGone(t *testing.T) {
	tr := newTier(t, 4, Config{Lower: true})
	reqs, keys := batchOf([]uint64{1, 2, 3}, [][]int64{prompt(0, 3*bs), prompt(100, 2*bs), prompt(200, bs-1)})
	res := allocateWith(tr, true, reqs, keys)
	drain(t, tr)
	tr.LowerGone()
	drain(t, tr)
	if *res == nil {
		t.Fatal("not answered")
	}
	rs := (*res).Results
	if rs[0].Err != nil || !errors.Is(rs[1].Err, blockpool.ErrNoSpace) || !errors.Is(rs[2].Err, blockpool.ErrNoSpace) || held(tr, 3) {
		t.Fatalf("%v / %v / %v (3 held %v): want ok, ErrNoSpace, ErrNoSpace", rs[0].Err, rs[1].Err, rs[2].Err, held(tr, 3))
	}
}

// TestProbeInOrderGPUHitWaits: a request all of whose blocks the GPU holds
// does not pass one before it that waits for the index.
func TestProbeInOrderGPUHitWaits(t *testing.T) {
	tr := newTier(t, 4, Config{Lower: true})
	if res, _ := allocate(t, tr, 1, prompt(0, bs), []messages.Tier{}); res.Err != nil {
		t.Fatal(res.Err)
	}
	tr.CommitBatch([]messages.CommitItem{{Seq: 1, Tokens: bs}}, func(*messages.CommitBatchResult) {})
	drain(t, tr)
	reqs, keys := batchOf([]uint64{2, 3}, [][]int64{prompt(100, 4*bs), prompt(0, bs)})
	res := allocateWith(tr, true, reqs, keys)
	r := drain(t, tr)
	if held(tr, 3) {
		t.Fatal("sequence 3 (a GPU hit) allocated before sequence 2's lookup was answered")
	}
	answerLookup(t, tr, r)
	if *res == nil {
		t.Fatal("not answered")
	}
}

// TestProbeInOrderLoadAfterGPUHit: an ordered request with a GPU hit and
// two blocks below loads both (gpuAt carried to allocate).
func TestProbeInOrderLoadAfterGPUHit(t *testing.T) {
	tr := newTier(t, 8, Config{Lower: true})
	if res, _ := allocate(t, tr, 1, prompt(0, bs), []messages.Tier{}); res.Err != nil {
		t.Fatal(res.Err)
	}
	tr.CommitBatch([]messages.CommitItem{{Seq: 1, Tokens: bs}}, func(*messages.CommitBatchResult) {})
	drain(t, tr)
	reqs, keys := batchOf([]uint64{2}, [][]int64{prompt(0, 3*bs)})
	res := allocateWith(tr, true, reqs, keys)
	r := drain(t, tr)
	lk := r.ToIndex[0].(*messages.Lookup)
	tr.LookupDone(&messages.LookupResult{ID: lk.ID, Tiers: [][]messages.Tier{{messages.Pinned, messages.Pinned}}})
	drain(t, tr)
	if *res == nil {
		t.Fatal("not answered")
	}
	if got := (*res).Results[0].Tokens[messages.Pinned.Index()]; got != 2*bs {
		t.Fatalf("%d tokens from pinned, want %d", got, 2*bs)
	}
}
