package tier

import (
	"testing"
	"time"

	"github.com/kvtier/kvtier/messages"
)

// TestLateLoadWaitsForFreeBlocks: a load whose deadline passes while the
// pool has too few free blocks to give its sequence fresh ones is turned
// into a miss as soon as blocks come back, not when the slow load lands
// (before, its Ready waited for the load however late), and it is counted.
func TestLateLoadWaitsForFreeBlocks(t *testing.T) {
	tr := newTier(t, 7, Config{Lower: true, ReadBase: 10 * time.Millisecond})
	// Sequence 2 holds three blocks, so a 3-block load leaves one free.
	if res, _ := allocate(t, tr, 2, prompt(1000, 3*bs), nil); res.Err != nil {
		t.Fatal(res.Err)
	}
	p := prompt(1, 3*bs)
	res, r := allocate(t, tr, 1, p, []messages.Tier{messages.Pinned, messages.Pinned, messages.Pinned})
	if res.Err != nil || res.Tokens.Of(messages.Pinned) != 3*bs {
		t.Fatalf("allocation %+v", res)
	}
	req := fetchRequest(t, r)
	tr.SetNow(t0.Add(10 * time.Millisecond))
	tr.Deadline(req.ID)
	drain(t, tr)
	select {
	case <-res.Ready.Done():
		t.Fatal("Ready completed with no blocks to swap in")
	default:
	}
	if n := tr.Stats().Extra["late_deferred"]; n != 1 {
		t.Fatalf("late_deferred %v, want 1", n)
	}
	// Sequence 2 goes: its blocks come back, and the load is a miss now.
	tr.FreeBatch([]uint64{2}, false, func(*messages.FreeBatchResult) {})
	if !tr.HasReady() {
		t.Fatal("blocks came back, yet the tier has nothing to do")
	}
	drain(t, tr)
	select {
	case <-res.Ready.Done():
	default:
		t.Fatal("Ready did not complete once blocks were free")
	}
	out := res.Ready.Outcome()
	if out.ValidTokens != 0 || out.Late != 3 || len(out.Blocks) != 3 {
		t.Fatalf("outcome %+v, want 3 late blocks and a fresh table", out)
	}
	// The grant that comes later is given straight back.
	tr.FetchGranted(&messages.FetchGrant{ID: req.ID, Slots: []int{4, 5, 6}, Bytes: make([][]byte, 3)})
	r = drain(t, tr)
	if len(r.Copies) != 0 {
		t.Fatalf("a late grant started copies: %+v", r.Copies)
	}
	if st := tr.Stats(); st.Timeouts != 3 || st.InFlight != 0 || st.Extra["late_deferred"] != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// TestLateLoadThatLandsLeavesNoWaiter: a load that waited past its deadline
// for blocks and then landed is served as a hit and leaves nothing waiting.
func TestLateLoadThatLandsLeavesNoWaiter(t *testing.T) {
	tr := newTier(t, 7, Config{Lower: true, ReadBase: 10 * time.Millisecond})
	if res, _ := allocate(t, tr, 2, prompt(1000, 3*bs), nil); res.Err != nil {
		t.Fatal(res.Err)
	}
	res, r := allocate(t, tr, 1, prompt(1, 3*bs), []messages.Tier{messages.Pinned, messages.Pinned, messages.Pinned})
	req := fetchRequest(t, r)
	tr.SetNow(t0.Add(10 * time.Millisecond))
	tr.Deadline(req.ID)
	drain(t, tr)
	tr.FetchGranted(&messages.FetchGrant{ID: req.ID, Slots: []int{4, 5, 6}, Bytes: make([][]byte, 3)})
	r = drain(t, tr)
	if len(r.Copies) != 1 {
		t.Fatalf("copies %+v, want the load's", r.Copies)
	}
	tr.CopyDone(r.Copies[0].CopyID, nil)
	drain(t, tr)
	select {
	case <-res.Ready.Done():
	default:
		t.Fatal("Ready did not complete when the load landed")
	}
	if out := res.Ready.Outcome(); out.ValidTokens != 3*bs || out.Late != 0 {
		t.Fatalf("outcome %+v, want the 3 loaded blocks valid", out)
	}
	if len(tr.lateWaiting) != 0 {
		t.Fatalf("lateWaiting %v after the load landed", tr.lateWaiting)
	}
}
