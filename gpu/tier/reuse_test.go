package tier

import (
	"testing"

	"github.com/kvtier/kvtier/messages"
)

// swapDown commits seq's tokens and swaps it out: its blocks are written
// down (the copy completes) and stay free cached, marked below.
func swapDown(t *testing.T, tr *Tier, seq uint64, tokens int) {
	t.Helper()
	tr.CommitBatch([]messages.CommitItem{{Seq: seq, Tokens: tokens}}, func(*messages.CommitBatchResult) {})
	drain(t, tr)
	tr.FreeBatch([]uint64{seq}, true, func(*messages.FreeBatchResult) {})
	r := drain(t, tr)
	off := r.ToPinned[0].(*messages.OffloadRequest)
	slots, bytes := make([]int, len(off.Items)), make([][]byte, len(off.Items))
	for i := range slots {
		slots[i], bytes[i] = i, make([]byte, 64)
	}
	tr.OffloadGranted(&messages.OffloadGrant{ID: off.ID, Slots: slots, Bytes: bytes})
	r = drain(t, tr)
	tr.CopyDone(r.Copies[0].CopyID, nil)
	drain(t, tr)
}

// TestCommitAfterFreeDuringLoad: a sequence freed while its load is in
// flight, then allocated again under the same id with nothing to load,
// commits at once: it does not wait for the old allocation's load.
func TestCommitAfterFreeDuringLoad(t *testing.T) {
	tr := newTier(t, 8, Config{Lower: true})
	res, r := allocate(t, tr, 1, prompt(1, 2*bs), []messages.Tier{messages.Pinned, messages.Pinned})
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	fetchRequest(t, r) // the load is in flight
	tr.FreeBatch([]uint64{1}, false, func(*messages.FreeBatchResult) {})
	drain(t, tr)
	res2, _ := allocate(t, tr, 1, prompt(50, 3), nil) // under one block: no load
	if res2.Err != nil {
		t.Fatal(res2.Err)
	}
	select {
	case <-res2.Ready.Done():
	default:
		t.Fatal("the new allocation's Ready did not complete")
	}
	var cr *messages.CommitBatchResult
	tr.CommitBatch([]messages.CommitItem{{Seq: 1, Tokens: 3}}, func(r *messages.CommitBatchResult) { cr = r })
	drain(t, tr)
	if cr.Errs[0] != nil {
		t.Fatalf("commit of a sequence whose Ready completed: %v", cr.Errs[0])
	}
}

// TestTakenBlockAlreadyBelowNotRewritten: a free cached block whose contents
// are already written down is evicted for new contents without being
// offered down again — by an allocation, an append, or a late load's fresh
// blocks alike — and nothing waits for such a copy.
func TestTakenBlockAlreadyBelowNotRewritten(t *testing.T) {
	noOffer := func(t *testing.T, how string, r Ready) {
		t.Helper()
		for _, m := range r.ToPinned {
			if off, ok := m.(*messages.OffloadRequest); ok {
				t.Errorf("%s: a block already below was offered down again: %+v", how, off.Items)
			}
		}
	}
	for _, how := range []string{"allocate", "append"} {
		tr := newTier(t, 2, Config{Lower: true})
		if res, _ := allocate(t, tr, 1, prompt(1, bs), []messages.Tier{}); res.Err != nil {
			t.Fatal(res.Err)
		}
		swapDown(t, tr, 1, bs)
		if res, _ := allocate(t, tr, 2, prompt(100, 1), nil); res.Err != nil {
			t.Fatal(res.Err)
		}
		var r Ready
		if how == "append" {
			answered := false
			tr.AppendBatch([]messages.AppendItem{{Seq: 2, Tokens: prompt(200, bs)}}, func(*messages.AppendBatchResult) { answered = true })
			r = drain(t, tr)
			if !answered {
				t.Errorf("append: the answer waits for a copy of a block already below")
			}
		} else {
			_, r = allocate(t, tr, 3, prompt(300, 1), nil)
		}
		noOffer(t, how, r)
	}

	tr := newTier(t, 4, Config{Lower: true})
	if res, _ := allocate(t, tr, 1, prompt(1, bs), []messages.Tier{}); res.Err != nil {
		t.Fatal(res.Err)
	}
	swapDown(t, tr, 1, bs)
	res, r := allocate(t, tr, 2, prompt(100, 2*bs), []messages.Tier{messages.Pinned, messages.Pinned})
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	req := fetchRequest(t, r)
	tr.Deadline(req.ID) // late: a fresh block takes the one already below
	noOffer(t, "late load", drain(t, tr))
}
