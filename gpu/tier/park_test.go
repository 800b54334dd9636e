package tier

import (
	"errors"
	"maps"
	"slices"
	"testing"

	"github.com/kvtier/kvtier/blockpool"
	"github.com/kvtier/kvtier/messages"
)

// parkSetup: 6 blocks; sequences 1 and 2 (2 blocks each) committed under
// IngestAll and freed, their write-throughs offered but not granted (4
// blocks pinned); sequence 3 holds one full block; one block free.
func parkSetup(t *testing.T) *Tier {
	t.Helper()
	tr := newTier(t, 6, Config{Lower: true, Ingestion: IngestAll})
	for seq := uint64(1); seq <= 2; seq++ {
		if res, _ := allocate(t, tr, seq, prompt(int(100*seq), 2*bs), []messages.Tier{}); res.Err != nil {
			t.Fatal(res.Err)
		}
		tr.CommitBatch([]messages.CommitItem{{Seq: seq, Tokens: 2 * bs}}, func(*messages.CommitBatchResult) {})
		drain(t, tr)
	}
	tr.FreeBatch([]uint64{1, 2}, false, func(*messages.FreeBatchResult) {})
	drain(t, tr)
	if res, _ := allocate(t, tr, 3, prompt(900, bs), []messages.Tier{}); res.Err != nil {
		t.Fatal(res.Err)
	}
	return tr
}

// parkedStep applies a Step whose append (sequence 3) and first allocation
// (sequence 4) park for the pinned blocks, the second allocation (5) going
// ahead, and returns it unanswered.
func parkedStep(t *testing.T, tr *Tier) *messages.StepBatch {
	t.Helper()
	p4, p5 := prompt(5000, 4*bs), prompt(6000, bs)
	m := &messages.StepBatch{
		Append:   []messages.AppendItem{{Seq: 3, Tokens: prompt(7000, 2*bs)}},
		Allocate: []messages.AllocRequest{{Seq: 4, Tokens: p4}, {Seq: 5, Tokens: p5}},
		Keys:     []*blockpool.Keys{blockpool.ComputeKeys("", p4, bs, true), blockpool.ComputeKeys("", p5, bs, true)},
		Reply:    make(chan *messages.StepResult, 2),
	}
	tr.SetCall(&m.Call)
	tr.Step(m)
	tr.SetCall(nil)
	if r := drain(t, tr); len(r.ToIndex) == 1 {
		lk := r.ToIndex[0].(*messages.Lookup)
		tr.LookupDone(&messages.LookupResult{ID: lk.ID, Tiers: make([][]messages.Tier, len(lk.Chains))})
		drain(t, tr)
	}
	if len(tr.parked) != 2 || len(m.Reply) != 0 {
		t.Fatalf("parked %d, replies %d: want the append and one allocation parked, no answer", len(tr.parked), len(m.Reply))
	}
	return m
}

// TestWithdrawParkedStep: a Step whose caller withdraws is answered once:
// its parked append and allocation with ErrCanceled, having changed
// nothing, the allocation that went ahead with its blocks.
func TestWithdrawParkedStep(t *testing.T) {
	tr := parkSetup(t)
	m := parkedStep(t, tr)
	m.Withdraw()
	tr.Withdraw()
	drain(t, tr)
	if len(m.Reply) != 1 {
		t.Fatalf("%d answers after Withdraw, want 1", len(m.Reply))
	}
	res := <-m.Reply
	if !errors.Is(res.Append.Errs[0], messages.ErrCanceled) || !errors.Is(res.Allocate.Results[0].Err, messages.ErrCanceled) || res.Allocate.Results[1].Err != nil {
		t.Fatalf("answer: append %v, allocations %v / %v; want the parked two ErrCanceled", res.Append.Errs[0], res.Allocate.Results[0].Err, res.Allocate.Results[1].Err)
	}
	if n, _ := tr.pool.NumTokens(3); n != bs {
		t.Errorf("sequence 3 holds %d tokens after its append was withdrawn, want %d", n, bs)
	}
	if _, err := tr.pool.NumTokens(4); !errors.Is(err, blockpool.ErrUnknownSequence) {
		t.Errorf("sequence 4 exists after its allocation was withdrawn: %v", err)
	}
	if len(tr.parked) != 0 {
		t.Errorf("%d parts still parked", len(tr.parked))
	}
}

// TestStopAnswersParked: Stop answers parked parts with ErrStopped, so the
// request they belong to is answered (it was not).
func TestStopAnswersParked(t *testing.T) {
	tr := parkSetup(t)
	m := parkedStep(t, tr)
	tr.Stop()
	r := tr.Ready()
	for _, f := range r.Replies {
		f.Reply()
	}
	for _, s := range r.Stopped {
		s.Complete()
	}
	if len(m.Reply) != 1 {
		t.Fatalf("%d answers after Stop, want 1", len(m.Reply))
	}
	res := <-m.Reply
	if !errors.Is(res.Append.Errs[0], ErrStopped) || !errors.Is(res.Allocate.Results[0].Err, ErrStopped) {
		t.Fatalf("answer after Stop: append %v, allocation %v; want ErrStopped", res.Append.Errs[0], res.Allocate.Results[0].Err)
	}
}

// TestParkedRetryAfterLowerGoneLoadsNothing: a request parked for GPU
// blocks with part of its prompt on disk is applied only after the tiers
// below went away: the write-downs it waited on were granted before, and
// their copies end after LowerGone. It must not load from the tiers below —
// nothing would answer, and its load would stay in flight for ever — but
// compute the whole prompt.
func TestParkedRetryAfterLowerGoneLoadsNothing(t *testing.T) {
	tr := parkSetup(t)
	reqs, keys := batchOf([]uint64{4}, [][]int64{prompt(5000, 4*bs)})
	res := allocateWith(tr, false, reqs, keys)
	lk := drain(t, tr).ToIndex[0].(*messages.Lookup)
	tr.LookupDone(&messages.LookupResult{ID: lk.ID, Tiers: [][]messages.Tier{{messages.Disk, messages.Disk}}})
	if drain(t, tr); len(tr.parked) != 1 {
		t.Fatalf("%d parked, want sequence 4", len(tr.parked))
	}
	var copies []Copy
	for _, id := range slices.Sorted(maps.Keys(tr.offload)) {
		slots := make([]int, len(tr.offload[id].blocks))
		for i := range slots {
			slots[i] = 10 + i
		}
		tr.OffloadGranted(&messages.OffloadGrant{ID: id, Slots: slots, Bytes: make([][]byte, len(slots))})
		copies = append(copies, drain(t, tr).Copies...)
	}
	tr.LowerGone()
	drain(t, tr)
	if *res != nil {
		t.Fatal("answered before the write-downs' copies ended")
	}
	var fetches int // load requests (the copies' ends are reported to pinned memory as ever)
	for _, c := range copies {
		tr.CopyDone(c.CopyID, nil)
		for _, m := range drain(t, tr).ToPinned {
			if _, ok := m.(*messages.FetchRequest); ok {
				fetches++
			}
		}
	}
	if *res == nil || (*res).Results[0].Err != nil {
		t.Fatalf("after the copies: %+v", *res)
	}
	got := (*res).Results[0]
	if got.Tokens.Of(messages.Disk) != 0 || fetches != 0 {
		t.Errorf("%d tokens from disk, %d load requests after LowerGone: want none", got.Tokens.Of(messages.Disk), fetches)
	}
	select {
	case <-got.Ready.Done():
	default:
		t.Error("Ready not complete: the allocation waits on a load nobody answers")
	}
	if n := tr.Stats().InFlight; n != 0 || len(tr.fetches) != 0 {
		t.Errorf("%d operations in flight, %d loads, with nothing outstanding", n, len(tr.fetches))
	}
}
