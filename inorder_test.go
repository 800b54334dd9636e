package kvtier

import (
	"context"
	"errors"
	"testing"

	"github.com/kvtier/kvtier/blockpool"
)

// TestAllocateInOrder: through AllocateInOrder and through Step with
// AllocateInOrder, a request that needs nothing from the index (shorter than
// a block) does not pass the one before it, which waits for the index, and
// is not tried once that one found no room; through AllocateBatch and a plain
// Step it goes first and takes the block the first one needed.
func TestAllocateInOrder(t *testing.T) {
	ctx := context.Background()
	for _, how := range []string{"AllocateBatch", "AllocateInOrder", "Step", "StepInOrder"} {
		t.Run(how, func(t *testing.T) {
			m := newManager(t, Config{GPUBlocks: 4, PinnedBytes: 1 << 20})
			reqs := []AllocRequest{{Seq: 1, Tokens: toks(0, 4*bt)}, {Seq: 2, Tokens: toks(100, bt-1)}}
			var res []AllocResult
			var err error
			switch how {
			case "AllocateBatch":
				res, err = m.AllocateBatch(ctx, reqs)
			case "AllocateInOrder":
				res, err = m.AllocateInOrder(ctx, reqs)
			default:
				var st StepResult
				st, err = m.Step(ctx, StepRequest{Allocate: reqs, AllocateInOrder: how == "StepInOrder"})
				res = st.Allocs
			}
			if err != nil || len(res) != 2 {
				t.Fatalf("%d results, %v", len(res), err)
			}
			inOrder := how == "AllocateInOrder" || how == "StepInOrder"
			first, second := res[0].Err, res[1].Err
			if inOrder && (first != nil || !errors.Is(second, ErrNoSpace) || res[1].Blocks != nil || res[1].Ready != nil) {
				t.Fatalf("in order: %v, %+v; want the first allocated, the second ErrNoSpace and nothing", first, res[1])
			}
			if !inOrder && (!errors.Is(first, ErrNoSpace) || second != nil) {
				t.Fatalf("unordered: %v, %v; want the second first", first, second)
			}
			freed := 2
			if !inOrder {
				freed = 1
			}
			if err := m.Free(ctx, uint64(freed)); !errors.Is(err, blockpool.ErrUnknownSequence) {
				t.Fatalf("sequence %d held after failing (free: %v)", freed, err)
			}
		})
	}
}
