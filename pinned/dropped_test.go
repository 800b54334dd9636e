package pinned

import (
	"slices"
	"testing"

	"github.com/kvtier/kvtier/messages"
)

// TestTierDrainRefusedBelowIsDropped: a drained block the tier below did
// not report Written left every tier below with pinned memory, whatever the
// index lists under its hash: its removal says Dropped, so the GPU forgets
// its copy. A drained block written below is not Dropped.
func TestTierDrainRefusedBelowIsDropped(t *testing.T) {
	tr := newTestTier(t, 2, true)
	store(t, tr, 1, 2)
	for _, c := range []struct {
		h           uint64
		written     []uint64
		wantDropped []uint64
	}{{1, nil, []uint64{1}}, {2, []uint64{2}, nil}} {
		tr.Offload(offer(10+c.h), gpuPeer{}) // a full pool: the LRU victim drains
		r := step(t, tr)
		w := r.ToLower[0].(*messages.LowerWrite)
		if len(w.Items) != 1 || w.Items[0].Hash != c.h {
			t.Fatalf("drained %+v, want block %d", w.Items, c.h)
		}
		tr.LowerWritten(&messages.LowerWriteDone{Slots: []int{w.Items[0].Slot}, Written: c.written})
		r = step(t, tr)
		u := r.ToIndex[0]
		if !slices.Equal(u.Remove, []uint64{c.h}) || !slices.Equal(u.Dropped, c.wantDropped) {
			t.Fatalf("block %d written below as %v: index update %+v, want Remove [%d] and Dropped %v", c.h, c.written, u, c.h, c.wantDropped)
		}
		g := r.Sends[0].Msg.(*messages.OffloadGrant)
		tr.OffloadDone(&messages.OffloadDone{Slots: g.Slots, Hashes: []uint64{10 + c.h}})
		step(t, tr)
	}
}
