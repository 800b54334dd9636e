package pinned

import (
	"slices"
	"testing"
	"time"

	"github.com/kvtier/kvtier/messages"
	"github.com/kvtier/kvtier/policy"
	"github.com/kvtier/kvtier/prefixhash"
)

// The pinned tier's state machine, driven directly: one event, then its
// Ready, with the invariants walked after each.

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

type gpuPeer struct{} // stands for the GPU actor's PID

func newTestTier(t *testing.T, slots int, lower bool) *Tier {
	t.Helper()
	tr := NewTier(TierConfig{Pool: newPool(t, slots, 64, policy.LRU), WriteQuota: 16, Lower: lower,
		LowerIngestion: messages.IngestEvict, HotHits: 2})
	tr.SetNow(t0)
	return tr
}

func step(t *testing.T, tr *Tier) Ready {
	t.Helper()
	r := tr.Ready()
	for _, f := range r.Replies {
		f()
	}
	if err := tr.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
	return r
}

func digest(h uint64) prefixhash.Digest { return prefixhash.Digest{byte(h), byte(h >> 8), 0xAB} }

func offer(hashes ...uint64) *messages.OffloadRequest {
	m := &messages.OffloadRequest{ID: hashes[0]}
	for _, h := range hashes {
		m.Items = append(m.Items, messages.OffloadItem{Hash: h, Digest: digest(h), Tokens: 4})
	}
	return m
}

// store offers hashes and completes their copies: they become resident.
func store(t *testing.T, tr *Tier, hashes ...uint64) {
	t.Helper()
	tr.Offload(offer(hashes...), gpuPeer{})
	r := step(t, tr)
	g := r.Sends[0].Msg.(*messages.OffloadGrant)
	var slots []int
	for _, s := range g.Slots {
		if s < 0 {
			t.Fatalf("grant %v denied a slot", g.Slots)
		}
		slots = append(slots, s)
	}
	tr.OffloadDone(&messages.OffloadDone{Slots: slots, Hashes: hashes})
	step(t, tr)
}

func fetch(hashes ...uint64) *messages.FetchRequest {
	m := &messages.FetchRequest{ID: 7, Hashes: hashes}
	for _, h := range hashes {
		m.Digests = append(m.Digests, digest(h))
	}
	return m
}

// TestTierOffloadThenFetch: granted slots become resident and indexed only
// when the copies are done; a fetch takes read references on the leading run
// with matching digests, and a digest of another prefix ends the run.
func TestTierOffloadThenFetch(t *testing.T) {
	tr := newTestTier(t, 4, false)
	tr.Offload(offer(1, 2), gpuPeer{})
	r := step(t, tr)
	if len(r.Sends) != 1 || len(r.ToIndex) != 0 {
		t.Fatalf("offload: %+v, want one grant and nothing indexed yet", r)
	}
	g := r.Sends[0].Msg.(*messages.OffloadGrant)
	if _, ok := r.Sends[0].To.(gpuPeer); !ok || len(g.Slots) != 2 {
		t.Fatalf("grant %+v to %v", g, r.Sends[0].To)
	}
	tr.OffloadDone(&messages.OffloadDone{Slots: g.Slots, Hashes: []uint64{1, 2}})
	if r = step(t, tr); len(r.ToIndex) != 1 || len(r.ToIndex[0].Added) != 2 {
		t.Fatalf("after the copies: %+v, want both indexed", r.ToIndex)
	}
	tr.Fetch(fetch(1, 2, 3), gpuPeer{})
	fg := step(t, tr).Sends[0].Msg.(*messages.FetchGrant)
	if len(fg.Slots) != 2 || fg.Short != messages.MissEvicted {
		t.Fatalf("fetch: %+v, want 2 slots then a miss", fg)
	}
	tr.Release(fg.Slots)
	step(t, tr)
	bad := fetch(1, 2)
	bad.Digests[1][0] ^= 1 // block 2 of another prefix
	tr.Fetch(bad, gpuPeer{})
	fg = step(t, tr).Sends[0].Msg.(*messages.FetchGrant)
	if len(fg.Slots) != 1 || fg.Short != messages.MissMismatch {
		t.Fatalf("fetch with a foreign digest: %+v, want 1 slot and a mismatch", fg)
	}
	if st := tr.Stats(); st.Mismatches != 1 || st.Offloaded != 0 { // stored here, not written below
		t.Fatalf("stats %+v", st)
	}
}

// TestTierOfferDisplacesAnotherPrefixUnderItsHash: an offer of a block
// whose hash a resident block of another prefix holds (a forged 64-bit
// collision) takes its place, a counted mismatch and eviction; the
// displaced block leaves the index and is never served for the new
// digest, nor the new block for the old one. It used to be denied: the
// first writer kept the hash for as long as it stayed (stress
// TestForgedSquatterBelowTheGPU). An offer of the block held already, same
// digest, is SlotExists.
func TestTierOfferDisplacesAnotherPrefixUnderItsHash(t *testing.T) {
	tr := newTestTier(t, 4, false)
	store(t, tr, 1)
	again := offer(1)
	tr.Offload(again, gpuPeer{})
	if g := step(t, tr).Sends[0].Msg.(*messages.OffloadGrant); g.Slots[0] != messages.SlotExists {
		t.Fatalf("offer of the block held: %+v, want SlotExists", g)
	}

	forged := offer(1)
	forged.Items[0].Digest[0] ^= 1 // another prefix under hash 1
	tr.Offload(forged, gpuPeer{})
	r := step(t, tr)
	g := r.Sends[0].Msg.(*messages.OffloadGrant)
	if g.Slots[0] < 0 {
		t.Fatalf("offer of another prefix under a held hash: %+v, want a slot", g)
	}
	if len(r.ToIndex) != 1 || !slices.Equal(r.ToIndex[0].Remove, []uint64{1}) {
		t.Fatalf("index: %+v, want hash 1 removed while its new block fills", r.ToIndex)
	}
	if st := tr.Stats(); st.Mismatches != 1 || st.Evictions != 1 {
		t.Fatalf("stats %+v, want one mismatch and one eviction", st)
	}
	tr.Fetch(fetch(1), gpuPeer{}) // the old digest: the block is gone
	if fg := step(t, tr).Sends[0].Msg.(*messages.FetchGrant); len(fg.Slots) != 0 {
		t.Fatalf("fetch of the displaced block: %+v, want nothing", fg)
	}
	tr.OffloadDone(&messages.OffloadDone{Slots: g.Slots, Hashes: []uint64{1}})
	step(t, tr)
	tr.Fetch(fetch(1), gpuPeer{})
	if fg := step(t, tr).Sends[0].Msg.(*messages.FetchGrant); len(fg.Slots) != 0 || fg.Short != messages.MissMismatch {
		t.Fatalf("fetch with the old digest after the new block landed: %+v, want a mismatch", fg)
	}
	m := fetch(1)
	m.Digests[0] = forged.Items[0].Digest
	tr.Fetch(m, gpuPeer{})
	if fg := step(t, tr).Sends[0].Msg.(*messages.FetchGrant); len(fg.Slots) != 1 {
		t.Fatalf("fetch with the new digest: %+v, want its slot", fg)
	}
}

// TestTierDrainsBeforeGranting: with a tier below and the pool full, an
// offload waits while the policy's victims drain below; once the tier below
// has them, their slots are freed, they leave the index, and the offload is
// granted.
func TestTierDrainsBeforeGranting(t *testing.T) {
	tr := newTestTier(t, 2, true)
	store(t, tr, 1, 2)
	tr.Offload(offer(3), gpuPeer{})
	r := step(t, tr)
	if len(r.Sends) != 0 || len(r.ToLower) != 1 {
		t.Fatalf("full pool: %+v, want no grant yet and one write below", r)
	}
	w := r.ToLower[0].(*messages.LowerWrite)
	if len(w.Items) != 1 || w.Items[0].Hash != 1 {
		t.Fatalf("drained %+v, want the LRU victim 1", w.Items)
	}
	// Meanwhile the draining block is still served.
	tr.Fetch(fetch(1), gpuPeer{})
	fg := step(t, tr).Sends[0].Msg.(*messages.FetchGrant)
	if len(fg.Slots) != 1 {
		t.Fatalf("a draining block was not served: %+v", fg)
	}
	tr.LowerWritten(&messages.LowerWriteDone{Slots: []int{w.Items[0].Slot}, Written: []uint64{1}})
	r = step(t, tr)
	// Block 1 left pinned memory, but its slot waits for its reader: the
	// offer still has no slot, so the next victim drains.
	if len(r.ToIndex) != 1 || len(r.ToIndex[0].Remove) != 1 || len(r.Sends) != 0 || len(r.ToLower) != 1 {
		t.Fatalf("after the write below: %+v, want 1 removed, no grant, the next victim draining", r)
	}
	w2 := r.ToLower[0].(*messages.LowerWrite)
	tr.Release(fg.Slots) // the last reader frees the drained slot
	step(t, tr)
	if st := tr.Pool().Stats(); st.Draining != 1 {
		t.Fatalf("pool %+v: the drained slot was not freed after its reader", st)
	}
	tr.LowerWritten(&messages.LowerWriteDone{Slots: []int{w2.Items[0].Slot}, Written: []uint64{2}})
	r = step(t, tr)
	if len(r.Sends) != 1 {
		t.Fatalf("after the second write below: %+v, want the grant", r)
	}
	if g := r.Sends[0].Msg.(*messages.OffloadGrant); g.Slots[0] < 0 {
		t.Fatalf("grant %+v", g)
	}
}

// TestTierReadDeadlineOnInjectedClock: a read from below that fails is Late
// when the tier's clock is past its deadline, Failed before it.
func TestTierReadDeadlineOnInjectedClock(t *testing.T) {
	for _, c := range []struct {
		now  time.Time
		want messages.MissReason
	}{{t0.Add(time.Second), messages.MissLate}, {t0, messages.MissFailed}} {
		tr := newTestTier(t, 4, true)
		m := fetch(5)
		m.Deadline = t0.Add(100 * time.Millisecond)
		tr.Fetch(m, gpuPeer{})
		r := step(t, tr)
		rd := r.ToLower[0].(*messages.LowerRead)
		if !rd.Deadline.Equal(m.Deadline) || len(rd.Items) != 1 {
			t.Fatalf("read below: %+v", rd)
		}
		tr.SetNow(c.now)
		tr.LowerRead(&messages.LowerReadDone{ID: rd.ID, OK: []bool{false}})
		fg := step(t, tr).Sends[0].Msg.(*messages.FetchGrant)
		if len(fg.Slots) != 0 || fg.Short != c.want {
			t.Fatalf("at %v: %+v, want %v", c.now.Sub(t0), fg, c.want)
		}
	}
}

// TestTierReadSaysWhyBelowMissed: the grant of a read from below says why
// the tier below missed its first block (LowerReadDone.Why): a block it
// did not hold is Evicted and one of another prefix a Mismatch, not
// Failed (which the GPU counts as a fault); with no Why, Failed.
func TestTierReadSaysWhyBelowMissed(t *testing.T) {
	for _, c := range []struct {
		why  []messages.MissReason
		want messages.MissReason
	}{
		{[]messages.MissReason{messages.MissNone, messages.MissEvicted}, messages.MissEvicted},
		{[]messages.MissReason{messages.MissNone, messages.MissMismatch}, messages.MissMismatch},
		{[]messages.MissReason{messages.MissNone, messages.MissFailed}, messages.MissFailed},
		{nil, messages.MissFailed},
	} {
		tr := newTestTier(t, 4, true)
		tr.Fetch(fetch(5, 6), gpuPeer{})
		rd := step(t, tr).ToLower[0].(*messages.LowerRead)
		tr.LowerRead(&messages.LowerReadDone{ID: rd.ID, OK: []bool{true, false}, Why: c.why})
		fg := fetchGrantOf(t, step(t, tr))
		if len(fg.Slots) != 1 || fg.Short != c.want {
			t.Fatalf("below said %v: grant %+v, want one slot, Short %v", c.why, fg, c.want)
		}
	}
	// Past the read's deadline, a block the tier below did not hold is
	// still Evicted (it was not cut by the deadline); a failure is Late.
	for _, c := range []struct {
		why, want messages.MissReason
	}{{messages.MissEvicted, messages.MissEvicted}, {messages.MissMismatch, messages.MissMismatch},
		{messages.MissFailed, messages.MissLate}, {messages.MissLate, messages.MissLate}} {
		tr := newTestTier(t, 4, true)
		m := fetch(5)
		m.Deadline = t0.Add(100 * time.Millisecond)
		tr.Fetch(m, gpuPeer{})
		rd := step(t, tr).ToLower[0].(*messages.LowerRead)
		tr.SetNow(m.Deadline.Add(time.Millisecond))
		tr.LowerRead(&messages.LowerReadDone{ID: rd.ID, OK: []bool{false}, Why: []messages.MissReason{c.why}})
		if fg := fetchGrantOf(t, step(t, tr)); fg.Short != c.want {
			t.Fatalf("past the deadline, below said %v: grant %+v, want Short %v", c.why, fg, c.want)
		}
	}
}

// TestTierReadDeadlineGrantsWhatLanded: a read from below answered at its
// deadline with its leading blocks read (the disk tier's answer then) is
// granted for those, Short MissLate; the rest are not granted.
func TestTierReadDeadlineGrantsWhatLanded(t *testing.T) {
	tr := newTestTier(t, 4, true)
	m := fetch(5, 6, 7)
	m.Deadline = t0.Add(100 * time.Millisecond)
	tr.Fetch(m, gpuPeer{})
	rd := step(t, tr).ToLower[0].(*messages.LowerRead)
	tr.SetNow(m.Deadline)
	tr.LowerRead(&messages.LowerReadDone{ID: rd.ID, OK: []bool{true, false, false}})
	fg := fetchGrantOf(t, step(t, tr))
	if len(fg.Slots) != 1 || fg.Slots[0] != rd.Items[0].Slot || fg.Short != messages.MissLate || fg.StartedLate {
		t.Fatalf("grant %+v, want block 5's slot %d, Short MissLate, a read cut (not StartedLate)", fg, rd.Items[0].Slot)
	}
}

// TestTierReadStartedLate: a read that waited for a slot (the pool full,
// its victim draining below) past its deadline is refused whole below; its
// grant says so (StartedLate), so that the GPU tier takes no measure of a
// cut read's lag from it.
func TestTierReadStartedLate(t *testing.T) {
	tr := newTestTier(t, 1, true)
	store(t, tr, 1)
	m := fetch(5)
	m.Deadline = t0.Add(100 * time.Millisecond)
	tr.Fetch(m, gpuPeer{})
	r := step(t, tr)
	w, ok := r.ToLower[0].(*messages.LowerWrite)
	if !ok || len(r.ToLower) != 1 {
		t.Fatalf("full pool: %+v, want the victim draining, no read yet", r.ToLower)
	}
	tr.SetNow(m.Deadline.Add(time.Millisecond))
	tr.LowerWritten(&messages.LowerWriteDone{Slots: []int{w.Items[0].Slot}, Written: []uint64{1}})
	rd := step(t, tr).ToLower[0].(*messages.LowerRead)
	tr.LowerRead(&messages.LowerReadDone{ID: rd.ID, OK: []bool{false}})
	if fg := fetchGrantOf(t, step(t, tr)); fg.Short != messages.MissLate || !fg.StartedLate {
		t.Fatalf("grant %+v, want MissLate, StartedLate", fg)
	}
}

// TestTierFlushWaitsForItsWork: a Flush is answered once the offloads before
// it are done, not before; Stop answers a waiting Flush with ErrTierStopped.
func TestTierFlushWaitsForItsWork(t *testing.T) {
	tr := newTestTier(t, 4, false)
	tr.Offload(offer(1), gpuPeer{})
	g := step(t, tr).Sends[0].Msg.(*messages.OffloadGrant)
	done := make(chan error, 1)
	tr.Flush(done)
	step(t, tr)
	select {
	case err := <-done:
		t.Fatalf("Flush answered (%v) with a copy in flight", err)
	default:
	}
	tr.OffloadDone(&messages.OffloadDone{Slots: g.Slots, Hashes: []uint64{1}})
	step(t, tr)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	tr.Offload(offer(2), gpuPeer{})
	step(t, tr)
	tr.Flush(done)
	step(t, tr)
	tr.Stop()
	step(t, tr)
	if err := <-done; err != ErrTierStopped {
		t.Fatalf("Flush at Stop: %v", err)
	}
}

// TestTierDeleteDuringFill: a chain deleted while its slot fills is never
// stored: the fill is aborted when its copy completes.
func TestTierDeleteDuringFill(t *testing.T) {
	tr := newTestTier(t, 4, false)
	tr.Offload(offer(9), gpuPeer{})
	g := step(t, tr).Sends[0].Msg.(*messages.OffloadGrant)
	reply := make(chan *messages.QueryResult, 1)
	tr.Query(&messages.PinnedQuery{Kind: messages.QueryDelete, Hashes: []uint64{9}, Digests: []prefixhash.Digest{digest(9)}, Reply: reply})
	step(t, tr)
	<-reply
	tr.OffloadDone(&messages.OffloadDone{Slots: g.Slots, Hashes: []uint64{9}})
	if r := step(t, tr); len(r.ToIndex) != 0 {
		t.Fatalf("a deleted chain was indexed: %+v", r.ToIndex)
	}
	if _, ok := tr.Pool().Lookup(9); ok {
		t.Fatal("a deleted chain became resident")
	}
}

// TestTierReadKeptBelowOnlyWhereSaid: a block read from below is marked
// held below (dropped, not drained, when it leaves) unless the answer's Kept
// says the tier it came from does not keep it on this node (the remote
// tier, behind the fan-out): that one is drained to the disk.
func TestTierReadKeptBelowOnlyWhereSaid(t *testing.T) {
	tr := newTestTier(t, 4, true)
	tr.Fetch(fetch(5, 6), gpuPeer{})
	rd := step(t, tr).ToLower[0].(*messages.LowerRead)
	tr.LowerRead(&messages.LowerReadDone{ID: rd.ID, OK: []bool{true, true}, Kept: []bool{true, false}})
	step(t, tr)
	if !tr.pool.Below(rd.Items[0].Slot) || tr.pool.Below(rd.Items[1].Slot) {
		t.Fatalf("below: %t, %t; want block 5 held below, block 6 (read from the remote tier) not",
			tr.pool.Below(rd.Items[0].Slot), tr.pool.Below(rd.Items[1].Slot))
	}
}
