package tier

import (
	"slices"
	"testing"

	"github.com/kvtier/kvtier/messages"
)

// admittedIn returns the one Admitted in r's messages to the index, or nil.
func admittedIn(t *testing.T, r Ready) *messages.Admitted {
	t.Helper()
	var a *messages.Admitted
	for _, m := range r.ToIndex {
		if x, ok := m.(*messages.Admitted); ok {
			if a != nil {
				t.Fatalf("two Admitted in one Ready: %+v", r.ToIndex)
			}
			a = x
		}
	}
	return a
}

// TestAdmittedOnlyForAppliedRequests: the index hears of a looked-up chain
// (messages.Admitted, from which it tells the disk of its misses) only
// once its request got its GPU blocks: not for a request refused for lack
// of them, in either kind of batch, nor for one tried after it in order;
// and not for a chain pinned memory and the disk held all of. The chain is
// the part looked up (after the GPU hits), with the index's answer.
func TestAdmittedOnlyForAppliedRequests(t *testing.T) {
	for _, inOrder := range []bool{false, true} {
		tr := newTier(t, 6, Config{Lower: true})
		a, b, c, d := prompt(100, 2*bs), prompt(200, 2*bs), prompt(300, 5*bs), prompt(400, bs)
		// Sequence 1 (a) and 2 (b) fit, 3 (c) does not; 4 (d) would, but in
		// order it comes after 3.
		reqs, keys := batchOf([]uint64{1, 2, 3, 4}, [][]int64{a, b, c, d})
		res := allocateWith(tr, inOrder, reqs, keys)
		r := drain(t, tr)
		if len(r.ToIndex) != 1 {
			t.Fatalf("in order %v: %d messages to the index before the lookup's answer, want the Lookup", inOrder, len(r.ToIndex))
		}
		lk := r.ToIndex[0].(*messages.Lookup)
		runs := [][]messages.Tier{
			{messages.Disk},                  // a: its first block on disk
			{messages.Pinned, messages.Disk}, // b: all held below
			{messages.Disk},                  // c
			nil,                              // d: nothing below
		}
		tr.LookupDone(&messages.LookupResult{ID: lk.ID, Tiers: runs})
		r = drain(t, tr)
		if *res == nil {
			t.Fatalf("in order %v: the batch was not answered", inOrder)
		}
		var applied []uint64
		for _, o := range (*res).Results {
			if o.Err == nil {
				applied = append(applied, o.Seq)
			}
		}
		wantApplied := []uint64{1, 2, 4}
		if inOrder {
			wantApplied = []uint64{1, 2}
		}
		if !slices.Equal(applied, wantApplied) {
			t.Fatalf("in order %v: sequences %v applied, want %v", inOrder, applied, wantApplied)
		}
		ad := admittedIn(t, r)
		if ad == nil {
			t.Fatalf("in order %v: no Admitted with the batch's answer", inOrder)
		}
		if len(ad.Runs) != len(ad.Chains) {
			t.Fatalf("in order %v: %d chains, %d runs", inOrder, len(ad.Chains), len(ad.Runs))
		}
		var got []uint64
		for _, ch := range ad.Chains {
			got = append(got, ch[0])
		}
		wantFirst := []uint64{lk.Chains[0][0], lk.Chains[3][0]} // a and d; b held all below
		if inOrder {
			wantFirst = wantFirst[:1]
		}
		if !slices.Equal(got, wantFirst) {
			t.Fatalf("in order %v: Admitted names chains starting %v, want %v", inOrder, got, wantFirst)
		}
		if !slices.Equal(ad.Chains[0], lk.Chains[0]) || !slices.Equal(ad.Runs[0], runs[0]) {
			t.Fatalf("in order %v: Admitted chain %v run %v, want the Lookup's %v and the answer %v", inOrder, ad.Chains[0], ad.Runs[0], lk.Chains[0], runs[0])
		}
	}
}

// TestAdmittedWhenParkedRequestIsApplied: a request that parks for blocks
// (and the one held back behind it in order) is named to the index when
// it is applied, in that Ready, once; if its caller withdraws instead, it
// never is.
func TestAdmittedWhenParkedRequestIsApplied(t *testing.T) {
	for _, withdraw := range []bool{false, true} {
		tr := parkSetup(t)
		reqs, keys := batchOf([]uint64{4, 5}, [][]int64{prompt(5000, 4*bs), prompt(6000, bs)})
		call := &messages.Call{}
		tr.SetCall(call)
		answered := false
		tr.AllocateInOrder(reqs, keys, func(*messages.AllocateBatchResult) { answered = true })
		tr.SetCall(nil)
		r := drain(t, tr)
		lk := r.ToIndex[0].(*messages.Lookup)
		if r = answerLookup(t, tr, r); admittedIn(t, r) != nil || len(tr.parked) != 1 {
			t.Fatalf("withdraw %v: Admitted %+v with the request parked (%d parked)", withdraw, admittedIn(t, r), len(tr.parked))
		}
		var ads []*messages.Admitted
		if withdraw {
			call.Withdraw()
			tr.Withdraw()
			if a := admittedIn(t, drain(t, tr)); a != nil {
				ads = append(ads, a)
			}
		}
		for id := range tr.offload { // deny the write-throughs: the parked request retries
			slots := make([]int, len(tr.offload[id].blocks))
			for i := range slots {
				slots[i] = messages.SlotDenied
			}
			tr.OffloadGranted(&messages.OffloadGrant{ID: id, Slots: slots, Bytes: make([][]byte, len(slots))})
			if a := admittedIn(t, drain(t, tr)); a != nil {
				ads = append(ads, a)
			}
		}
		if !answered {
			t.Fatalf("withdraw %v: not answered", withdraw)
		}
		if withdraw {
			if len(ads) != 0 {
				t.Fatalf("withdrawn: Admitted %+v", ads[0])
			}
			continue
		}
		if len(ads) != 1 || len(ads[0].Chains) != 2 || !slices.Equal(ads[0].Chains[0], lk.Chains[0]) || !slices.Equal(ads[0].Chains[1], lk.Chains[1]) {
			t.Fatalf("Admitted %d times (%+v), want once with both chains %v", len(ads), ads, lk.Chains)
		}
	}
}
