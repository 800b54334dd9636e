package tier

import (
	"testing"

	"github.com/kvtier/kvtier/messages"
)

// TestBelowGoneDuringLoadWins: pinned memory serves a load from a block it
// then drops (a drain the tier below refused), and the index's BelowGone
// for it reaches the GPU while the copy up is under way. The loaded block
// must not be marked held below when it lands: a swap writes it down again
// instead of dropping it as held below, where no tier holds it.
func TestBelowGoneDuringLoadWins(t *testing.T) {
	tr := newTier(t, 8, Config{Lower: true})
	p := prompt(1, 2*bs)
	_, r := allocate(t, tr, 1, p, []messages.Tier{messages.Pinned, messages.Pinned})
	req := fetchRequest(t, r)
	tr.FetchGranted(&messages.FetchGrant{ID: req.ID, Slots: []int{0, 1}, Bytes: [][]byte{nil, nil}})
	r = drain(t, tr)
	tr.BelowGone([]uint64{req.Hashes[1]})
	drain(t, tr)
	tr.CopyDone(r.Copies[0].CopyID, nil)
	drain(t, tr)
	tr.FreeBatch([]uint64{1}, true /* swap */, func(*messages.FreeBatchResult) {})
	r = drain(t, tr)
	var offered []uint64
	for _, m := range r.ToPinned {
		if o, ok := m.(*messages.OffloadRequest); ok {
			for _, it := range o.Items {
				offered = append(offered, it.Hash)
			}
		}
	}
	if len(offered) != 1 || offered[0] != req.Hashes[1] {
		t.Fatalf("the swap offered %v, want the block whose copy below left during its load (%d)", offered, req.Hashes[1])
	}
}
