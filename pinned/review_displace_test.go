package pinned

import (
	"testing"

	"github.com/kvtier/kvtier/messages"
	"github.com/kvtier/kvtier/policy"
)

// TestTierDeniedOfferDisplacesNothing (review probe of b47399e): an offer
// of another prefix under a resident block's hash that is denied anyway
// (the write quota is full) must leave the resident block in place: it was
// displaced first and the offer denied after, so neither prefix was held
// and the displaced one was dropped for nothing (its GPU copy still
// flagged as below).
func TestTierDeniedOfferDisplacesNothing(t *testing.T) {
	tr := NewTier(TierConfig{Pool: newPool(t, 4, 64, policy.LRU), WriteQuota: 1, LowerIngestion: messages.IngestEvict, HotHits: 2})
	tr.SetNow(t0)
	store(t, tr, 1)
	tr.Offload(offer(2), gpuPeer{}) // fills the quota: its copy is in flight
	if g := step(t, tr).Sends[0].Msg.(*messages.OffloadGrant); g.Slots[0] < 0 {
		t.Fatalf("offer of 2: %+v, want a slot", g)
	}
	forged := offer(1)
	forged.Items[0].Digest[0] ^= 1 // another prefix under hash 1
	forged.ID = 9
	tr.Offload(forged, gpuPeer{})
	r := step(t, tr)
	g := r.Sends[0].Msg.(*messages.OffloadGrant)
	if g.Slots[0] != messages.SlotDenied {
		t.Fatalf("forged offer over the quota: %+v, want denied", g)
	}
	tr.Fetch(fetch(1), gpuPeer{})
	if fg := step(t, tr).Sends[0].Msg.(*messages.FetchGrant); len(fg.Slots) != 1 {
		t.Fatalf("the resident block of hash 1 after an offer of another prefix was denied: fetch %+v, index removals %v, stats %+v: displaced for an offer that stored nothing",
			fg, removals(r), tr.Stats())
	}
}

// TestTierOfferDeniedForNoSlotDisplacesNothing (review probe of b47399e):
// the resident block under the hash is being read (its slot is freed only
// after the reader) and no other slot can be had: the offer of another
// prefix is denied, and it must not have displaced the block first.
func TestTierOfferDeniedForNoSlotDisplacesNothing(t *testing.T) {
	tr := newTestTier(t, 1, false)
	store(t, tr, 1)
	tr.Fetch(fetch(1), gpuPeer{}) // a reader holds the slot
	if fg := step(t, tr).Sends[0].Msg.(*messages.FetchGrant); len(fg.Slots) != 1 {
		t.Fatalf("fetch of 1: %+v", fg)
	}
	forged := offer(1)
	forged.Items[0].Digest[0] ^= 1
	tr.Offload(forged, gpuPeer{})
	r := step(t, tr)
	if g := r.Sends[0].Msg.(*messages.OffloadGrant); g.Slots[0] != messages.SlotDenied {
		t.Fatalf("forged offer with no slot to be had: %+v, want denied", g)
	}
	tr.Fetch(fetch(1), gpuPeer{})
	if fg := step(t, tr).Sends[0].Msg.(*messages.FetchGrant); len(fg.Slots) != 1 {
		t.Fatalf("the resident block of hash 1 after an offer of another prefix was denied: fetch %+v, index removals %v, stats %+v: displaced for an offer that stored nothing",
			fg, removals(r), tr.Stats())
	}
}

// removals lists the hashes r's index updates remove.
func removals(r Ready) []uint64 {
	var out []uint64
	for _, u := range r.ToIndex {
		out = append(out, u.Remove...)
	}
	return out
}
