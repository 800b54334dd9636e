package tier

import (
	"testing"
	"time"

	"github.com/kvtier/kvtier/messages"
)

// Review rev8: directed tests of split loads for the paths no TestSplitLoad*
// test fails on when mutated (see the review's mutant list).

// splitLoadOn is splitLoad on a pool of blocks blocks.
func splitLoadOn(t *testing.T, blocks int) (*Tier, messages.AllocResult, *messages.FetchRequest, *messages.FetchRequest) {
	t.Helper()
	tr := newTier(t, blocks, Config{Lower: true, ReadBase: 10 * time.Millisecond, ReadPerToken: time.Millisecond})
	res, r := allocate(t, tr, 1, prompt(1, 4*bs), []messages.Tier{messages.Pinned, messages.Pinned, messages.Disk, messages.Disk})
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	var reqs []*messages.FetchRequest
	for _, m := range r.ToPinned {
		if f, ok := m.(*messages.FetchRequest); ok {
			reqs = append(reqs, f)
		}
	}
	if len(reqs) != 2 {
		t.Fatalf("fetch requests %+v, want two", reqs)
	}
	return tr, res, reqs[0], reqs[1]
}

// TestRev8LaterPartCopyingWhenEarlierShort: the disk part's copy up is
// under way when the pinned part is granted short: Ready must wait for that
// copy (it writes blocks the sequence recomputes into), then complete with
// the disk part given up. (Mutants: settleNext giving up a granted part at
// once; fetchCopied waiting on !prev.full instead of !prev.settled.)
func TestRev8LaterPartCopyingWhenEarlierShort(t *testing.T) {
	tr, res, pin, dsk := splitLoad(t)
	grantAll(t, tr, dsk) // its copy up under way
	land(t, tr, pin, 1, messages.MissEvicted)
	if readyDone(res) {
		t.Fatal("Ready completed while the disk part's copy still writes blocks 2 and 3, which the sequence recomputes into")
	}
	tr.CopyDone(CopyID{ID: dsk.ID, Fetch: true}, nil)
	drain(t, tr)
	if !readyDone(res) {
		t.Fatal("Ready not completed once the disk part's copy ended")
	}
	if out := res.Ready.Outcome(); out.ValidTokens != bs || out.Evicted != 3 {
		t.Fatalf("outcome %+v, want one block valid, three evicted", out)
	}
	if n := cachedOf(tr, res.Blocks[1:]); n != 0 {
		t.Fatalf("%d blocks past the valid run findable", n)
	}
	assertIdle(t, tr, res.Blocks)
}

// TestRev8EarlierPartEmptyGrant: a pinned part granted nothing (its blocks
// evicted below) gives up the disk part at once: Ready does not wait for
// the disk. (Mutant: the empty-grant path ending the waiter without
// settling the next part.)
func TestRev8EarlierPartEmptyGrant(t *testing.T) {
	tr, res, pin, dsk := splitLoad(t)
	land(t, tr, pin, 0, messages.MissEvicted)
	if !readyDone(res) {
		t.Fatal("Ready waits for a disk part that cannot count")
	}
	if out := res.Ready.Outcome(); out.ValidTokens != 0 || out.Evicted != 4 {
		t.Fatalf("outcome %+v, want four evicted", out)
	}
	tr.FetchGranted(&messages.FetchGrant{ID: dsk.ID, Slots: []int{5, 6}, Bytes: make([][]byte, 2)})
	if r := drain(t, tr); len(r.Copies) != 0 {
		t.Fatalf("grant of a given-up part started a copy: %+v", r.Copies)
	}
	assertIdle(t, tr, res.Blocks)
}

// TestRev8FreedSeqEarlierPartLateLaterWaiting: the sequence freed, the
// pinned part late during its copy (no held blocks: no fresh table) while
// the disk part landed and waits: the disk part must be settled too, or
// Ready never completes and the load stays in flight. (Mutant: fetchLate's
// no-held path ending the waiter without settling the next part.)
func TestRev8FreedSeqEarlierPartLateLaterWaiting(t *testing.T) {
	tr, res, pin, dsk := splitLoad(t)
	land(t, tr, dsk, 2, messages.MissNone)
	grantAll(t, tr, pin)
	freeSeqs(t, tr, 1)
	fireDeadline(t, tr, pin)
	fireDeadline(t, tr, dsk)
	if !readyDone(res) {
		t.Fatal("Ready not completed at the deadline")
	}
	if out := res.Ready.Outcome(); out.Late != 4 || out.ValidTokens != 0 {
		t.Fatalf("outcome %+v, want four late", out)
	}
	tr.CopyDone(CopyID{ID: pin.ID, Fetch: true}, nil)
	drain(t, tr)
	if n := cachedOf(tr, res.Blocks); n != 0 {
		t.Fatalf("%d blocks of a late load findable", n)
	}
	assertIdle(t, tr, res.Blocks)
}

// TestRev8LaterPartCopyFailsWhileWaiting: the disk part's copy fails before
// the pinned part lands: its blocks hold garbage and must never be
// published, even once the pinned part lands in full. (Mutant: a failed
// copy of a part with a prev treated as landed.)
func TestRev8LaterPartCopyFailsWhileWaiting(t *testing.T) {
	tr, res, pin, dsk := splitLoad(t)
	grantAll(t, tr, dsk)
	tr.CopyDone(CopyID{ID: dsk.ID, Fetch: true}, errTestCopy)
	drain(t, tr)
	land(t, tr, pin, 2, messages.MissNone)
	if !readyDone(res) {
		t.Fatal("Ready not completed")
	}
	if out := res.Ready.Outcome(); out.ValidTokens != 2*bs || out.Failed != 2 {
		t.Fatalf("outcome %+v, want the pinned run valid and two failed", out)
	}
	if n := cachedOf(tr, res.Blocks[2:]); n != 0 {
		t.Fatalf("%d blocks of a failed copy findable", n)
	}
	assertIdle(t, tr, res.Blocks)
}

// TestRev8LaterPartLateThenEarlierLate: the disk part's timer fires before
// the pinned part's (same deadline, either order): each part is counted
// once and Ready is answered once. (Mutant: fetchDone not marking the part
// settled: the waiter is answered twice.)
func TestRev8LaterPartLateThenEarlierLate(t *testing.T) {
	tr, res, pin, dsk := splitLoad(t)
	_ = res.Ready.Done() // a waiter's channel: a second Complete panics
	fireDeadline(t, tr, dsk)
	fireDeadline(t, tr, pin)
	if !readyDone(res) {
		t.Fatal("Ready not completed at the deadline")
	}
	if out := res.Ready.Outcome(); out.Late != 4 || out.ValidTokens != 0 {
		t.Fatalf("outcome %+v, want four late", out)
	}
}

// TestRev8StopWithLaterPartWaiting: Stop while the disk part landed and
// waits for the pinned part's copy: the outcome still covers every block
// that was loading (as failed). (Mutant: Stop skipping a waiting part.)
func TestRev8StopWithLaterPartWaiting(t *testing.T) {
	tr, res, pin, dsk := splitLoad(t)
	land(t, tr, dsk, 2, messages.MissNone)
	grantAll(t, tr, pin)
	tr.Stop()
	r := drain(t, tr)
	for _, s := range r.Stopped {
		s.Complete()
	}
	if !readyDone(res) {
		t.Fatal("Ready not answered at Stop")
	}
	if out := res.Ready.Outcome(); out.ValidTokens+out.Failed*bs+out.Late*bs != 4*bs {
		t.Fatalf("outcome %+v does not cover the 4 loading blocks", out)
	}
}

// TestRev8DeleteWhileLaterPartWaits: a Delete of the chain while the
// pinned part copies and the disk part waits: neither publishes. (Mutant:
// publishFetch ignoring deleted/keep; no gpu/tier test fails on it.)
func TestRev8DeleteWhileLaterPartWaits(t *testing.T) {
	tr, res, pin, dsk := splitLoad(t)
	p := prompt(1, 4*bs)
	land(t, tr, dsk, 2, messages.MissNone)
	grantAll(t, tr, pin)
	deleteChain(t, tr, p)
	tr.CopyDone(CopyID{ID: pin.ID, Fetch: true}, nil)
	drain(t, tr)
	if !readyDone(res) {
		t.Fatal("Ready not completed")
	}
	if n := cachedOf(tr, res.Blocks); n != 0 {
		t.Fatalf("%d blocks of a deleted chain findable", n)
	}
	if out := res.Ready.Outcome(); out.ValidTokens != 0 || out.Evicted != 4 {
		t.Fatalf("outcome %+v, want four evicted", out)
	}
	assertIdle(t, tr, res.Blocks)
}

// TestRev8OverdueLaterPartGivenUp: the pinned part is late before its grant
// (a miss in place) while the disk part's copy up is under way with no free
// block to swap in: the disk part is Overdue — Ready waits for its copy —
// and then, its copy landed, given up as Late behind the pinned part: its
// blocks count in TierStats.Overdue (Ready held past the deadline) and in
// Timeouts (a miss), as TierStats.Overdue's doc says, the way a failed
// overdue copy counts in Overdue and Failed.
func TestRev8OverdueLaterPartGivenUp(t *testing.T) {
	tr, res, pin, dsk := splitLoadOn(t, 4)
	grantAll(t, tr, dsk)
	fireDeadline(t, tr, pin) // not granted: late in place
	fireDeadline(t, tr, dsk) // copy under way, no free block: overdue
	if readyDone(res) {
		t.Fatal("Ready completed while the disk part's copy writes blocks the sequence holds")
	}
	tr.CopyDone(CopyID{ID: dsk.ID, Fetch: true}, nil)
	drain(t, tr)
	out := res.Ready.Outcome()
	st := tr.Stats()
	t.Logf("outcome %+v; stats Overdue %d Timeouts %d", out, st.Overdue, st.Timeouts)
	if out.Late != 4 {
		t.Fatalf("outcome %+v, want four late", out)
	}
	if st.Overdue != 2 || st.Timeouts != 4 {
		t.Errorf("Overdue %d, Timeouts %d; want the disk part's 2 overdue and all 4 timed out", st.Overdue, st.Timeouts)
	}
	if n := cachedOf(tr, res.Blocks); n != 0 {
		t.Errorf("%d blocks findable after the load was given up", n)
	}
}
