package tier

import (
	"errors"
	"testing"
	"time"

	"github.com/kvtier/kvtier/blockpool"
	"github.com/kvtier/kvtier/messages"
)

// splitLoad allocates a 4-block prompt whose first two blocks pinned memory
// holds and the last two the disk, under a 10 ms + 1 ms/token deadline, and
// returns the result and the two fetch requests (pinned part, then disk part).
func splitLoad(t *testing.T) (*Tier, messages.AllocResult, *messages.FetchRequest, *messages.FetchRequest) {
	t.Helper()
	tr := newTier(t, 16, Config{Lower: true, ReadBase: 10 * time.Millisecond, ReadPerToken: time.Millisecond})
	res, r := allocate(t, tr, 1, prompt(1, 4*bs), []messages.Tier{messages.Pinned, messages.Pinned, messages.Disk, messages.Disk})
	if res.Err != nil || res.Tokens.Of(messages.Pinned) != 2*bs || res.Tokens.Of(messages.Disk) != 2*bs {
		t.Fatalf("allocation %+v", res)
	}
	var reqs []*messages.FetchRequest
	for _, m := range r.ToPinned {
		if f, ok := m.(*messages.FetchRequest); ok {
			reqs = append(reqs, f)
		}
	}
	if len(reqs) != 2 || len(reqs[0].Hashes) != 2 || len(reqs[1].Hashes) != 2 || !reqs[0].Deadline.Equal(reqs[1].Deadline) {
		t.Fatalf("fetch requests %+v, want the pinned run and the disk run apart, one deadline", reqs)
	}
	if len(r.Timers) != 2 {
		t.Fatalf("timers %+v, want one a part", r.Timers)
	}
	return tr, res, reqs[0], reqs[1]
}

// land grants a fetch's first n blocks (short: why) and completes its copy.
func land(t *testing.T, tr *Tier, req *messages.FetchRequest, n int, why messages.MissReason) {
	t.Helper()
	slots := make([]int, n)
	for i := range slots {
		slots[i] = int(req.ID)*8 + i
	}
	tr.FetchGranted(&messages.FetchGrant{ID: req.ID, Slots: slots, Bytes: make([][]byte, n), Short: why})
	if r := drain(t, tr); n > 0 && len(r.Copies) != 1 {
		t.Fatalf("grant of %d blocks started %d copies", n, len(r.Copies))
	}
	if n > 0 {
		tr.CopyDone(CopyID{ID: req.ID, Fetch: true}, nil)
		drain(t, tr)
	}
}

// assertIdle checks that no load is in flight and no block of ids is
// pinned for a copy.
func assertIdle(t *testing.T, tr *Tier, ids []blockpool.BlockID) {
	t.Helper()
	for _, id := range ids {
		if n := tr.pool.Pinned(id); n != 0 {
			t.Fatalf("block %d still pinned (%d) with every copy ended", id, n)
		}
	}
	if st := tr.Stats(); st.InFlight != 0 {
		t.Fatalf("%d loads in flight at the end", st.InFlight)
	}
}

// cachedOf counts the blocks of ids the pool holds findable.
func cachedOf(tr *Tier, ids []blockpool.BlockID) int {
	n := 0
	for _, id := range ids {
		if _, ok := tr.pool.BlockHash(id); ok {
			n++
		}
	}
	return n
}

// TestSplitLoadPinnedRunCountsWhenDiskLate: under a deadline a load of a
// pinned run then disk blocks is two loads; when the disk part is late the
// pinned part, landed, still counts (before, the whole load was a miss).
func TestSplitLoadPinnedRunCountsWhenDiskLate(t *testing.T) {
	tr, res, pin, dsk := splitLoad(t)
	land(t, tr, pin, 2, messages.MissNone)
	if readyDone(res) {
		t.Fatal("Ready completed with the disk part still loading")
	}
	fireDeadline(t, tr, dsk)
	if !readyDone(res) {
		t.Fatal("Ready not completed at the deadline")
	}
	out := res.Ready.Outcome()
	if out.ValidTokens != 2*bs || out.Late != 2 || out.Blocks != nil {
		t.Fatalf("outcome %+v, want the pinned run valid and the disk run late", out)
	}
	if n := cachedOf(tr, res.Blocks); n != 2 {
		t.Fatalf("%d blocks findable, want the pinned run's 2", n)
	}
}

// TestSplitLoadWithoutDeadlineIsOne: with no deadline nothing is late, and a
// load stays one request.
func TestSplitLoadWithoutDeadlineIsOne(t *testing.T) {
	tr := newTier(t, 16, Config{Lower: true})
	_, r := allocate(t, tr, 1, prompt(1, 4*bs), []messages.Tier{messages.Pinned, messages.Pinned, messages.Disk, messages.Disk})
	if req := fetchRequest(t, r); len(req.Hashes) != 4 || len(r.ToPinned) != 1 {
		t.Fatalf("%d messages, the first for %d blocks: want one load of 4", len(r.ToPinned), len(req.Hashes))
	}
}

// TestSplitLoadLaterPartWaits: the disk part landing first is not published
// (its blocks are not findable, Ready waits) until the pinned part lands;
// then all four are valid.
func TestSplitLoadLaterPartWaits(t *testing.T) {
	tr, res, pin, dsk := splitLoad(t)
	land(t, tr, dsk, 2, messages.MissNone)
	if readyDone(res) || cachedOf(tr, res.Blocks) != 0 {
		t.Fatalf("after the disk part alone: completed %v, %d findable; want neither", readyDone(res), cachedOf(tr, res.Blocks))
	}
	land(t, tr, pin, 2, messages.MissNone)
	if !readyDone(res) {
		t.Fatal("Ready not completed once both parts landed")
	}
	if out := res.Ready.Outcome(); out.ValidTokens != 4*bs || out.Late+out.Failed+out.Evicted+out.Mismatch != 0 {
		t.Fatalf("outcome %+v, want all four valid", out)
	}
	if n := cachedOf(tr, res.Blocks); n != 4 {
		t.Fatalf("%d blocks findable, want 4", n)
	}
}

// TestSplitLoadEarlierPartLate: when the pinned part is late, the disk part
// that landed before it is given up, unpublished: the sequence recomputes
// from the first late block, into blocks nobody else can find.
func TestSplitLoadEarlierPartLate(t *testing.T) {
	tr, res, pin, dsk := splitLoad(t)
	land(t, tr, dsk, 2, messages.MissNone)
	fireDeadline(t, tr, pin)
	if !readyDone(res) {
		t.Fatal("Ready not completed at the deadline")
	}
	if out := res.Ready.Outcome(); out.ValidTokens != 0 || out.Late != 4 {
		t.Fatalf("outcome %+v, want nothing valid, 4 late", out)
	}
	if n := cachedOf(tr, res.Blocks); n != 0 {
		t.Fatalf("%d blocks findable after the load was given up", n)
	}
	// The pinned part's grant, late, goes straight back.
	tr.FetchGranted(&messages.FetchGrant{ID: pin.ID, Slots: []int{1, 2}, Bytes: make([][]byte, 2)})
	if r := drain(t, tr); len(r.Copies) != 0 || len(r.ToPinned) != 1 {
		t.Fatalf("late grant: %+v, want its slots released and no copy", r)
	}
	assertIdle(t, tr, res.Blocks)
}

// TestSplitLoadEarlierPartShort: a pinned part granted short (a block
// evicted since the lookup) ends the valid run there; the disk part, not yet
// granted, is given up at once, so Ready need not wait for the disk, and its
// grant goes back when it comes.
func TestSplitLoadEarlierPartShort(t *testing.T) {
	tr, res, pin, dsk := splitLoad(t)
	land(t, tr, pin, 1, messages.MissEvicted)
	if !readyDone(res) {
		t.Fatal("Ready waits for a disk part that cannot count")
	}
	if out := res.Ready.Outcome(); out.ValidTokens != bs || out.Evicted != 3 {
		t.Fatalf("outcome %+v, want one block valid and three counted evicted", out)
	}
	tr.FetchGranted(&messages.FetchGrant{ID: dsk.ID, Slots: []int{5, 6}, Bytes: make([][]byte, 2)})
	if r := drain(t, tr); len(r.Copies) != 0 {
		t.Fatalf("grant of a given-up part started a copy: %+v", r)
	}
	assertIdle(t, tr, res.Blocks)
}

// TestSplitLoadEarlierPartLateWhileCopying: the pinned part late during its
// copy up gets fresh blocks (as any late copy); the disk part, landed and
// waiting, is given up with it, and the old blocks go back when the copy
// ends.
func TestSplitLoadEarlierPartLateWhileCopying(t *testing.T) {
	tr, res, pin, dsk := splitLoad(t)
	land(t, tr, dsk, 2, messages.MissNone)
	grantAll(t, tr, pin) // its copy up under way
	fireDeadline(t, tr, pin)
	if !readyDone(res) {
		t.Fatal("Ready not completed at the deadline")
	}
	out := res.Ready.Outcome()
	if out.ValidTokens != 0 || out.Late != 4 || len(out.Blocks) != 4 || out.Blocks[0] == res.Blocks[0] || out.Blocks[2] != res.Blocks[2] {
		t.Fatalf("outcome %+v (allocated %v), want 4 late, fresh blocks for the pinned part", out, res.Blocks)
	}
	if n := cachedOf(tr, res.Blocks[2:]); n != 0 {
		t.Fatalf("%d blocks of the disk part findable", n)
	}
	tr.CopyDone(CopyID{ID: pin.ID, Fetch: true}, nil)
	drain(t, tr)
	assertIdle(t, tr, res.Blocks)
}

// TestSplitLoadEarlierPartFails: a failed copy of the pinned part gives up
// the disk part that waited for it.
func TestSplitLoadEarlierPartFails(t *testing.T) {
	tr, res, pin, dsk := splitLoad(t)
	land(t, tr, dsk, 2, messages.MissNone)
	grantAll(t, tr, pin) // its copy up under way
	tr.CopyDone(CopyID{ID: pin.ID, Fetch: true}, errTestCopy)
	drain(t, tr)
	if !readyDone(res) {
		t.Fatal("Ready not completed")
	}
	if out := res.Ready.Outcome(); out.ValidTokens != 0 || out.Failed != 4 {
		t.Fatalf("outcome %+v, want 4 failed", out)
	}
	if n := cachedOf(tr, res.Blocks); n != 0 {
		t.Fatalf("%d blocks findable after the load failed", n)
	}
}

// fetchRequests returns the FetchRequests r sends, in order.
func fetchRequests(r Ready) []*messages.FetchRequest {
	var out []*messages.FetchRequest
	for _, m := range r.ToPinned {
		if f, ok := m.(*messages.FetchRequest); ok {
			out = append(out, f)
		}
	}
	return out
}

// TestLowerDeadlineLeavesTimeForCopyUp: once a copy up has been timed, a
// load's disk part asks the tiers below to answer earlier than its own
// deadline by the copy up of its blocks (at the measured time a block) and
// by how late such answers have come (at most half of the time left in
// all); the pinned run keeps the deadline. The
// leading blocks the disk read by then are copied up before the load's
// deadline and count; the rest are late.
func TestLowerDeadlineLeavesTimeForCopyUp(t *testing.T) {
	tr, _, pin, dsk := splitLoad(t) // no copy timed yet: one deadline
	// The pinned part's copy of 2 blocks takes 6 ms, 3 ms a block; the
	// disk part's, none: the average moves a quarter of the way to 0.
	tr.FetchGranted(&messages.FetchGrant{ID: pin.ID, Slots: []int{0, 1}, Bytes: make([][]byte, 2)})
	drain(t, tr)
	copyDoneAt(t, tr, 6*time.Millisecond, CopyID{ID: pin.ID, Fetch: true}, nil)
	if got := tr.Stats().Extra["copy_up_us_per_block"]; got != 3000 {
		t.Fatalf("copy up measured at %v µs a block, want 3000", got)
	}
	land(t, tr, dsk, 2, messages.MissNone)
	if got := tr.Stats().Extra["copy_up_us_per_block"]; got != 2250 {
		t.Fatalf("copy up measured at %v µs a block, want 2250", got)
	}

	now := tr.now
	res, r := allocate(t, tr, 2, prompt(100, 4*bs), []messages.Tier{messages.Pinned, messages.Disk, messages.Disk, messages.Disk})
	due := now.Add(10*time.Millisecond + 4*bs*time.Millisecond) // 26 ms
	reqs := fetchRequests(r)
	if len(reqs) != 2 || !reqs[0].Deadline.Equal(due) || !reqs[1].Deadline.Equal(due.Add(-6750*time.Microsecond)) {
		t.Fatalf("fetch deadlines %v, want the pinned run's at %v and the disk part's 6.75 ms (3 blocks x 2.25 ms) earlier", deadlines(reqs), due)
	}
	land(t, tr, reqs[0], 1, messages.MissNone)
	// At its deadline the disk has read one of the three blocks: the grant
	// comes 1 ms later, and its copy ends before the load's deadline.
	tr.SetNow(reqs[1].Deadline.Add(time.Millisecond))
	land(t, tr, reqs[1], 1, messages.MissLate)
	if got := tr.Stats().Extra["answer_lag_us"]; got != 3000 {
		t.Fatalf("answer lag measured at %v µs, want 3000 (a first sample of 1 ms, its deviation taken as half of it, x4)", got)
	}
	if !readyDone(res) {
		t.Fatal("Ready not completed once the disk part's answer was copied up")
	}
	if out := res.Ready.Outcome(); out.ValidTokens != 2*bs || out.Late != 2 {
		t.Fatalf("outcome %+v, want the pinned block and the disk's first valid, 2 late", out)
	}
	if n := cachedOf(tr, res.Blocks); n != 2 {
		t.Fatalf("%d blocks findable, want 2", n)
	}

	// The next disk part leaves time for the answer's lag too.
	now = tr.now
	_, r = allocate(t, tr, 3, prompt(300, 2*bs), []messages.Tier{messages.Disk, messages.Disk})
	copyUp := time.Duration(tr.Stats().Extra["copy_up_us_per_block"] * float64(time.Microsecond))
	want := now.Add(10*time.Millisecond + 2*bs*time.Millisecond - 3*time.Millisecond - 2*copyUp)
	if reqs = fetchRequests(r); len(reqs) != 1 || !reqs[0].Deadline.Equal(want) {
		t.Fatalf("fetch deadlines %v, want %v: 3 ms for the lag and 2 x %v of copy up before the 18 ms budget", deadlines(reqs), want, copyUp)
	}

	// A copy up measured slower than the budget: the tiers below still get
	// half the time left.
	setCopyUp(tr, time.Second)
	now = tr.now
	_, r = allocate(t, tr, 4, prompt(200, 4*bs), []messages.Tier{messages.Disk, messages.Disk, messages.Disk, messages.Disk})
	reqs = fetchRequests(r)
	if len(reqs) != 1 || !reqs[0].Deadline.Equal(now.Add(13*time.Millisecond)) {
		t.Fatalf("fetch deadlines %v, want one at half of the 26 ms budget", deadlines(reqs))
	}
}

func deadlines(reqs []*messages.FetchRequest) []time.Time {
	var out []time.Time
	for _, r := range reqs {
		out = append(out, r.Deadline)
	}
	return out
}

// TestAnswerLagNotFromQueuedFetch: under SerialOffloads a load's request
// waits in the GPU tier's serial queue behind an offload; sent only after
// its askBy, the tiers below answer it at once, MissLate (the disk refuses
// a read whose deadline has passed on arrival). That answer is not the lag
// of a read cut at askBy and is not sampled (Karn's rule): the next disk
// load still asks for its whole budget.
func TestAnswerLagNotFromQueuedFetch(t *testing.T) {
	tr, first, op := queuedBehindOffload(t, time.Second) // the reserve capped at half the time left
	// The offload's copy ends after the load's askBy, before its deadline.
	tr.SetNow(op.askBy.Add(op.deadline.Sub(op.askBy) * 8 / 10))
	tr.OffloadGranted(&messages.OffloadGrant{ID: first.ID, Slots: []int{0, 1}, Bytes: make([][]byte, 2)})
	tr.CopyDone(drain(t, tr).Copies[0].CopyID, nil)
	reqs := fetchRequests(drain(t, tr))
	if len(reqs) != 1 {
		t.Fatal("the queued fetch was not sent after the offload")
	}
	tr.FetchGranted(&messages.FetchGrant{ID: reqs[0].ID, Short: messages.MissLate})
	drain(t, tr)
	if tr.answerLagTimed {
		t.Fatalf("answer lag %v learned from an answer to a request sent %v after its askBy", tr.answerLag(), tr.now.Sub(op.askBy))
	}
	setCopyUp(tr, 0)
	now := tr.now
	_, r := allocate(t, tr, 3, prompt(900, 2*bs), onTier(messages.Disk, 2))
	budget := 10*time.Millisecond + 2*bs*time.Millisecond
	if reqs = fetchRequests(r); len(reqs) != 1 || !reqs[0].Deadline.Equal(now.Add(budget)) {
		t.Fatalf("next load asks by %v, want its whole budget %v", deadlines(reqs), now.Add(budget))
	}
}

// TestAnswerLagEstimate: the first answer of a cut read comes after the
// load's own timer made it late (askBy is the deadline while nothing is
// measured) and is sampled all the same; later samples move the mean by
// 1/8 and the mean deviation by 1/4 of their difference (RFC 6298), and
// the lag kept is the mean plus four deviations. Failed reads and reads the
// pinned tier began only after their deadline are no samples.
func TestAnswerLagEstimate(t *testing.T) {
	tr := newTier(t, 16, Config{Lower: true, ReadBase: 10 * time.Millisecond, ReadPerToken: time.Millisecond})
	late := func(seq uint64, after time.Duration) {
		t.Helper()
		_, r := allocate(t, tr, seq, prompt(int(seq)*100, 2*bs), []messages.Tier{messages.Disk, messages.Disk})
		req := fetchRequest(t, r)
		tr.SetNow(req.Deadline)
		tr.Deadline(req.ID)
		drain(t, tr)
		tr.SetNow(req.Deadline.Add(after))
		tr.FetchGranted(&messages.FetchGrant{ID: req.ID, Short: messages.MissLate})
		drain(t, tr)
	}
	late(1, 2*time.Millisecond)
	if tr.answerLag() != 6*time.Millisecond {
		t.Fatalf("answer lag %v after a first sample of 2 ms, want 6 ms (2 + 4 x 1)", tr.answerLag())
	}
	// A MissFailed answer is no sample.
	_, r := allocate(t, tr, 2, prompt(5000, 2*bs), []messages.Tier{messages.Disk, messages.Disk})
	req := fetchRequest(t, r)
	tr.SetNow(req.Deadline.Add(-time.Millisecond))
	tr.FetchGranted(&messages.FetchGrant{ID: req.ID, Short: messages.MissFailed})
	drain(t, tr)
	if tr.answerLag() != 6*time.Millisecond {
		t.Fatalf("answer lag %v after a failed read, want it unchanged", tr.answerLag())
	}
	// Nor is a read the pinned tier began only after its deadline.
	_, r = allocate(t, tr, 4, prompt(6000, 2*bs), []messages.Tier{messages.Disk, messages.Disk})
	req = fetchRequest(t, r)
	tr.SetNow(req.Deadline.Add(5 * time.Millisecond))
	tr.FetchGranted(&messages.FetchGrant{ID: req.ID, Short: messages.MissLate, StartedLate: true})
	drain(t, tr)
	if tr.answerLag() != 6*time.Millisecond {
		t.Fatalf("answer lag %v after a read that started late, want it unchanged", tr.answerLag())
	}
	// 10 ms: deviation 1 + (8 - 1)/4 = 2.75, mean 2 + 8/8 = 3, lag 14 ms.
	// A sample before askBy counts as 0: deviation 2.75 + (3 - 2.75)/4,
	// mean 3 - 3/8.
	late(3, 10*time.Millisecond)
	if tr.answerLag() != 14*time.Millisecond {
		t.Fatalf("answer lag %v after samples of 2 and 10 ms, want 14 ms", tr.answerLag())
	}
	tr.noteAnswerLag(-time.Millisecond)
	if want := 2625*time.Microsecond + 4*2812500*time.Nanosecond; tr.answerLag() != want {
		t.Fatalf("answer lag %v after a negative sample, want %v", tr.answerLag(), want)
	}
}

// TestCopyUpNotInflatedByQueueing: two loads granted together, 8 blocks
// then 1, copied up one after the other on the stream at 1 ms a block: the
// 1-block copy's time starts when the one before it ended, and the
// estimate stays at the stream's 1 ms a block.
func TestCopyUpNotInflatedByQueueing(t *testing.T) {
	tr := newTier(t, 32, Config{Lower: true})
	_, r1 := allocate(t, tr, 1, prompt(100, 8*bs), onTier(messages.Pinned, 8))
	_, r2 := allocate(t, tr, 2, prompt(900, bs), onTier(messages.Pinned, 1))
	f1, f2 := fetchRequest(t, r1), fetchRequest(t, r2)
	tr.FetchGranted(&messages.FetchGrant{ID: f1.ID, Slots: []int{0, 1, 2, 3, 4, 5, 6, 7}, Bytes: make([][]byte, 8)})
	tr.FetchGranted(&messages.FetchGrant{ID: f2.ID, Slots: []int{8}, Bytes: make([][]byte, 1)})
	drain(t, tr)
	copyDoneAt(t, tr, 8*time.Millisecond, CopyID{ID: f1.ID, Fetch: true}, nil)
	copyDoneAt(t, tr, 9*time.Millisecond, CopyID{ID: f2.ID, Fetch: true}, nil)
	if tr.copyUpPerBlock() != time.Millisecond {
		t.Fatalf("copy up measured at %v a block; the stream copied 9 blocks in 9 ms", tr.copyUpPerBlock())
	}
}

// TestCopyUpRatioOfAverages: the copy-up estimate is a ratio of moving
// averages (time over blocks), not a moving average of per-block times:
// 8 blocks in 16 ms, then 1 block in 10 ms on an idle stream, give
// (16 + (10-16)/4) / (8 + (1-8)/4) = 14.5 / 6.25 ms a block, where the
// mean of per-block times would be 2 + (10-2)/4 = 4 ms.
func TestCopyUpRatioOfAverages(t *testing.T) {
	tr := newTier(t, 32, Config{Lower: true})
	_, r1 := allocate(t, tr, 1, prompt(100, 8*bs), onTier(messages.Pinned, 8))
	f1 := fetchRequest(t, r1)
	tr.FetchGranted(&messages.FetchGrant{ID: f1.ID, Slots: []int{0, 1, 2, 3, 4, 5, 6, 7}, Bytes: make([][]byte, 8)})
	drain(t, tr)
	copyDoneAt(t, tr, 16*time.Millisecond, CopyID{ID: f1.ID, Fetch: true}, nil)
	tr.SetNow(t0.Add(100 * time.Millisecond)) // the stream idle since
	_, r2 := allocate(t, tr, 2, prompt(900, bs), onTier(messages.Pinned, 1))
	f2 := fetchRequest(t, r2)
	tr.FetchGranted(&messages.FetchGrant{ID: f2.ID, Slots: []int{8}, Bytes: make([][]byte, 1)})
	drain(t, tr)
	copyDoneAt(t, tr, 110*time.Millisecond, CopyID{ID: f2.ID, Fetch: true}, nil)
	if want := time.Duration(14.5e6 / 6.25); tr.copyUpPerBlock() != want {
		t.Fatalf("copy up %v a block, want %v", tr.copyUpPerBlock(), want)
	}
}

// TestCopyUpAfterWriteDown: a write-down ends on the same stream; a copy up
// enqueued before it ended is timed from its end (2 blocks enqueued at t0
// behind a write-down that ends at 5 ms, done at 7 ms: 1 ms a block). A
// copy that failed to enqueue ends at once, out of the stream's order, and
// does not move that mark.
func TestCopyUpAfterWriteDown(t *testing.T) {
	tr := newTier(t, 16, Config{Lower: true, Ingestion: IngestAll})
	if res, _ := allocate(t, tr, 1, prompt(100, 2*bs), []messages.Tier{}); res.Err != nil {
		t.Fatal(res.Err)
	}
	tr.CommitBatch([]messages.CommitItem{{Seq: 1, Tokens: 2 * bs}}, func(*messages.CommitBatchResult) {})
	off := drain(t, tr).ToPinned[0].(*messages.OffloadRequest)
	tr.OffloadGranted(&messages.OffloadGrant{ID: off.ID, Slots: []int{0, 1}, Bytes: make([][]byte, 2)})
	offCopy := drain(t, tr).Copies[0].CopyID
	_, r := allocate(t, tr, 2, prompt(900, 2*bs), []messages.Tier{messages.Pinned, messages.Pinned})
	f := fetchRequest(t, r)
	tr.FetchGranted(&messages.FetchGrant{ID: f.ID, Slots: []int{4, 5}, Bytes: make([][]byte, 2)})
	drain(t, tr)
	_, r = allocate(t, tr, 3, prompt(500, bs), []messages.Tier{messages.Pinned})
	failed := fetchRequest(t, r)
	tr.FetchGranted(&messages.FetchGrant{ID: failed.ID, Slots: []int{6}, Bytes: make([][]byte, 1)})
	drain(t, tr)
	copyDoneAt(t, tr, 5*time.Millisecond, offCopy, nil)
	copyDoneAt(t, tr, 6*time.Millisecond, CopyID{ID: failed.ID, Fetch: true}, errors.New("enqueue failed"))
	copyDoneAt(t, tr, 7*time.Millisecond, CopyID{ID: f.ID, Fetch: true}, nil)
	if tr.copyUpPerBlock() != time.Millisecond {
		t.Fatalf("copy up %v a block, want 1 ms: timed from the write-down's end", tr.copyUpPerBlock())
	}
}

// TestAnswerLagFromFetchSentBeforeAskBy: a load's request held in the
// serial queue but sent before its askBy is cut there like any other: its
// late answer is a lag sample.
func TestAnswerLagFromFetchSentBeforeAskBy(t *testing.T) {
	tr, first, op := queuedBehindOffload(t, time.Millisecond)
	tr.SetNow(op.askBy.Add(-time.Millisecond)) // the offload ends before askBy
	tr.OffloadGranted(&messages.OffloadGrant{ID: first.ID, Slots: []int{0, 1}, Bytes: make([][]byte, 2)})
	tr.CopyDone(drain(t, tr).Copies[0].CopyID, nil)
	reqs := fetchRequests(drain(t, tr))
	if len(reqs) != 1 {
		t.Fatal("the queued fetch was not sent after the offload")
	}
	tr.SetNow(op.askBy.Add(2 * time.Millisecond))
	tr.FetchGranted(&messages.FetchGrant{ID: reqs[0].ID, Short: messages.MissLate})
	drain(t, tr)
	if !tr.answerLagTimed || tr.lagMean != 2*time.Millisecond {
		t.Fatalf("answer lag timed %v, mean %v; want a 2 ms sample from a request sent before its askBy", tr.answerLagTimed, tr.lagMean)
	}
}

// onTier is n blocks' run below, all on tier x.
func onTier(x messages.Tier, n int) []messages.Tier {
	out := make([]messages.Tier, n)
	for i := range out {
		out[i] = x
	}
	return out
}

// copyDoneAt ends copy id with err at t0 + at on the tier's clock.
func copyDoneAt(t *testing.T, tr *Tier, at time.Duration, id CopyID, err error) {
	t.Helper()
	tr.SetNow(t0.Add(at))
	tr.CopyDone(id, err)
	drain(t, tr)
}

// queuedBehindOffload is a tier under SerialOffloads and a 10 ms + 1 ms a
// token read deadline, with copy up measured at copyUp a block, where a
// 2-block disk load (sequence 2) waits in the serial queue behind the
// offload of sequence 1's committed blocks (first, not yet granted).
func queuedBehindOffload(t *testing.T, copyUp time.Duration) (*Tier, *messages.OffloadRequest, *fetchOp) {
	t.Helper()
	tr := newTier(t, 16, Config{Lower: true, Ingestion: IngestAll, SerialOffloads: true, ReadBase: 10 * time.Millisecond, ReadPerToken: time.Millisecond})
	if res, _ := allocate(t, tr, 1, prompt(100, 2*bs), []messages.Tier{}); res.Err != nil {
		t.Fatal(res.Err)
	}
	tr.CommitBatch([]messages.CommitItem{{Seq: 1, Tokens: 2 * bs}}, func(*messages.CommitBatchResult) {})
	first := drain(t, tr).ToPinned[0].(*messages.OffloadRequest)
	setCopyUp(tr, copyUp)
	res, r := allocate(t, tr, 2, prompt(500, 2*bs), onTier(messages.Disk, 2))
	if res.Err != nil || len(fetchRequests(r)) != 0 || len(tr.fetches) != 1 {
		t.Fatalf("allocation %+v, ToPinned %+v: want the fetch queued behind the offload", res, r.ToPinned)
	}
	var op *fetchOp
	for _, o := range tr.fetches {
		op = o
	}
	return tr, first, op
}

// setCopyUp sets the copy-up estimate to d a block.
func setCopyUp(tr *Tier, d time.Duration) { tr.copyUpTime, tr.copyUpBlocks = float64(d), 1 }
