package tier

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/kvtier/kvtier/blockpool"
	"github.com/kvtier/kvtier/messages"
)

// batchOf builds an allocation batch: prompts[i] for sequence seqs[i].
func batchOf(seqs []uint64, prompts [][]int64) ([]messages.AllocRequest, []*blockpool.Keys) {
	reqs := make([]messages.AllocRequest, len(seqs))
	keys := make([]*blockpool.Keys, len(seqs))
	for i, s := range seqs {
		reqs[i] = messages.AllocRequest{Seq: s, Tokens: prompts[i]}
		keys[i] = blockpool.ComputeKeys("", prompts[i], bs, true)
	}
	return reqs, keys
}

// allocateWith applies a batch with AllocateInOrder or AllocateBatch; the
// answer lands in the result once sent.
func allocateWith(tr *Tier, inOrder bool, reqs []messages.AllocRequest, keys []*blockpool.Keys) **messages.AllocateBatchResult {
	res := new(*messages.AllocateBatchResult)
	send := func(r *messages.AllocateBatchResult) { *res = r }
	if inOrder {
		tr.AllocateInOrder(reqs, keys, send)
	} else {
		tr.AllocateBatch(reqs, keys, send)
	}
	return res
}

// held reports whether the pool knows seq.
func held(tr *Tier, seq uint64) bool {
	_, err := tr.pool.NumTokens(blockpool.SeqID(seq))
	return err == nil
}

// answerLookup answers the one Lookup r sends, every chain missing below.
func answerLookup(t *testing.T, tr *Tier, r Ready) Ready {
	t.Helper()
	if len(r.ToIndex) != 1 {
		t.Fatalf("%d messages to the index, want one Lookup", len(r.ToIndex))
	}
	lk := r.ToIndex[0].(*messages.Lookup)
	tr.LookupDone(&messages.LookupResult{ID: lk.ID, Tiers: make([][]messages.Tier, len(lk.Chains))})
	return drain(t, tr)
}

// TestAllocateInOrderStopsAtNoSpace: in order, a request refused for its
// own arguments does not stop the batch, the first one short of blocks
// does: the ones after it fail with ErrNoSpace and hold nothing, where
// AllocateBatch gives the last, small one its block.
func TestAllocateInOrderStopsAtNoSpace(t *testing.T) {
	for _, inOrder := range []bool{false, true} {
		t.Run(fmt.Sprintf("inOrder=%v", inOrder), func(t *testing.T) {
			tr := newTier(t, 4, Config{})
			reqs, keys := batchOf([]uint64{1, 2, 3, 4}, [][]int64{prompt(0, bs), prompt(100, 2*bs), prompt(200, 8*bs), prompt(300, bs)})
			reqs[1].MaxSeqLen = bs // refused: ErrTooLong
			res := allocateWith(tr, inOrder, reqs, keys)
			drain(t, tr)
			if *res == nil {
				t.Fatal("not answered")
			}
			errs := make([]error, len((*res).Results))
			for i, r := range (*res).Results {
				errs[i] = r.Err
			}
			if errs[0] != nil || !errors.Is(errs[1], ErrTooLong) || !errors.Is(errs[2], blockpool.ErrNoSpace) {
				t.Fatalf("answers %v: want ok, ErrTooLong, ErrNoSpace first", errs)
			}
			if inOrder {
				if r3 := (*res).Results[3]; !errors.Is(errs[3], blockpool.ErrNoSpace) || held(tr, 4) || len(r3.Blocks) != 0 || r3.Ready != nil {
					t.Fatalf("sequence 4 behind a request short of blocks: %+v (held %v), want ErrNoSpace and nothing", r3, held(tr, 4))
				}
				if st := tr.pool.Stats(); st.Used != 1 {
					t.Fatalf("%d blocks in use, want sequence 1's one", st.Used)
				}
			} else if errs[3] != nil || !held(tr, 4) {
				t.Fatalf("unordered: sequence 4 %v (held %v), want its block", errs[3], held(tr, 4))
			}
		})
	}
}

// TestAllocateInOrderWaitsForLookup: a request that needs nothing from the
// index (its prompt is shorter than a block) does not pass one before it
// that waits for the index: in order, nothing is allocated before the
// Lookup is answered, and the first request gets the blocks.
func TestAllocateInOrderWaitsForLookup(t *testing.T) {
	for _, inOrder := range []bool{false, true} {
		t.Run(fmt.Sprintf("inOrder=%v", inOrder), func(t *testing.T) {
			tr := newTier(t, 4, Config{Lower: true})
			reqs, keys := batchOf([]uint64{1, 2}, [][]int64{prompt(0, 4*bs), prompt(100, bs-1)})
			res := allocateWith(tr, inOrder, reqs, keys)
			r := drain(t, tr)
			if held(tr, 2) == inOrder {
				t.Fatalf("sequence 2 held %v before the lookup's answer, want %v", held(tr, 2), !inOrder)
			}
			answerLookup(t, tr, r)
			if *res == nil {
				t.Fatal("not answered")
			}
			first, second := (*res).Results[0].Err, (*res).Results[1].Err
			if inOrder {
				if first != nil || !errors.Is(second, blockpool.ErrNoSpace) || held(tr, 2) {
					t.Fatalf("in order: %v, %v (2 held %v); want the first allocated, the second ErrNoSpace", first, second, held(tr, 2))
				}
			} else if !errors.Is(first, blockpool.ErrNoSpace) || second != nil {
				t.Fatalf("unordered: %v, %v; want the second (allocated at once) to leave the first short", first, second)
			}
		})
	}
}

// inOrderParked applies, in order, sequence 4 (4 blocks, which park behind
// parkSetup's write-throughs) then 5 (one block, which would fit now), and
// checks that nothing is answered and 5 is not allocated past 4.
func inOrderParked(t *testing.T, tr *Tier) (*messages.AllocateBatchResult, *messages.Call, *bool) {
	t.Helper()
	reqs, keys := batchOf([]uint64{4, 5}, [][]int64{prompt(5000, 4*bs), prompt(6000, bs)})
	var res messages.AllocateBatchResult
	answered := false
	call := &messages.Call{}
	tr.SetCall(call)
	tr.AllocateInOrder(reqs, keys, func(r *messages.AllocateBatchResult) { res, answered = *r, true })
	tr.SetCall(nil)
	answerLookup(t, tr, drain(t, tr))
	if answered || len(tr.parked) != 1 || held(tr, 4) || held(tr, 5) {
		t.Fatalf("answered %v, parked %d, held 4 %v, 5 %v: want 4 parked and 5 waiting behind it", answered, len(tr.parked), held(tr, 4), held(tr, 5))
	}
	return &res, call, &answered
}

// TestAllocateInOrderParked: a request that parks for blocks holds back the
// ones after it; when the write-throughs end, both are allocated, in order.
func TestAllocateInOrderParked(t *testing.T) {
	tr := parkSetup(t)
	res, _, answered := inOrderParked(t, tr)
	// Deny the write-throughs: their blocks come free and the parked request retries.
	ids := slices.Sorted(func(yield func(uint64) bool) {
		for id := range tr.offload {
			if !yield(id) {
				return
			}
		}
	})
	for _, id := range ids {
		slots := make([]int, len(tr.offload[id].blocks))
		for i := range slots {
			slots[i] = messages.SlotDenied
		}
		tr.OffloadGranted(&messages.OffloadGrant{ID: id, Slots: slots, Bytes: make([][]byte, len(slots))})
		drain(t, tr)
	}
	if !*answered {
		t.Fatalf("not answered once the write-throughs ended (parked %d)", len(tr.parked))
	}
	if res.Results[0].Err != nil || res.Results[1].Err != nil || !held(tr, 4) || !held(tr, 5) {
		t.Fatalf("answers %v / %v: want both allocated", res.Results[0].Err, res.Results[1].Err)
	}
}

// TestAllocateInOrderWithdrawn: when the caller gives up (or the tier
// stops) while a request waits for blocks, it and the ones after it are
// answered ErrCanceled (ErrStopped) and none of them is applied.
func TestAllocateInOrderWithdrawn(t *testing.T) {
	for _, stop := range []bool{false, true} {
		t.Run(fmt.Sprintf("stop=%v", stop), func(t *testing.T) {
			tr := parkSetup(t)
			res, call, answered := inOrderParked(t, tr)
			want := messages.ErrCanceled
			if stop {
				want = ErrStopped
				tr.Stop()
			} else {
				call.Withdraw()
				tr.Withdraw()
			}
			for _, f := range tr.Ready().Replies {
				f.Reply()
			}
			if !*answered {
				t.Fatal("not answered")
			}
			for i, r := range res.Results {
				if !errors.Is(r.Err, want) {
					t.Errorf("request %d: %v, want %v", i, r.Err, want)
				}
			}
			if held(tr, 4) || held(tr, 5) {
				t.Fatalf("held 4 %v, 5 %v after the caller withdrew", held(tr, 4), held(tr, 5))
			}
		})
	}
}

// TestAllocateInOrderStopped: Stop answers every request of an ordered
// batch, those waiting for the index and those queued behind them alike.
func TestAllocateInOrderStopped(t *testing.T) {
	tr := newTier(t, 8, Config{Lower: true})
	reqs, keys := batchOf([]uint64{1, 2, 3}, [][]int64{prompt(0, 2*bs), prompt(100, bs-1), prompt(200, 2*bs)})
	reqs[2].MaxSeqLen = bs // refused up front: keeps ErrTooLong
	var res *messages.AllocateBatchResult
	tr.AllocateInOrder(reqs, keys, func(r *messages.AllocateBatchResult) { res = r })
	drain(t, tr)
	tr.Stop()
	drain(t, tr)
	if res == nil {
		t.Fatal("not answered after Stop")
	}
	for i, r := range res.Results[:2] {
		if !errors.Is(r.Err, ErrStopped) {
			t.Errorf("request %d: %v, want ErrStopped", i, r.Err)
		}
	}
	if err := res.Results[2].Err; !errors.Is(err, ErrTooLong) {
		t.Errorf("request refused up front: %v after Stop, want its ErrTooLong", err)
	}
}
