package scheduler

import (
	"context"
	"errors"
	"testing"

	"github.com/kvtier/kvtier/trace"
)

// negativeCache answers one outcome of each Allocate with a negative prefix,
// a broken contract, after allocating it as the others.
type negativeCache struct {
	*fakeCache
	bad int // the outcome made negative
}

func (c *negativeCache) Allocate(ctx context.Context, reqs []AllocReq) ([]AllocOutcome, error) {
	outs, err := c.fakeCache.Allocate(ctx, reqs)
	if err == nil && c.bad < len(outs) {
		outs[c.bad].DiskTokens = -16
	}
	return outs, err
}

// TestNegativePrefixFreesAllocated: an Allocate whose outcome breaks the
// contract with a negative prefix ends the step with ErrCacheContract, and
// every sequence the call allocated, before the bad outcome, after it and
// the bad one itself, is freed again: nothing stays allocated. The
// scheduler returned at once, and the three sequences held their blocks for
// ever.
func TestNegativePrefixFreesAllocated(t *testing.T) {
	f := newFakeCache(fakeConfig{gpuBlocks: 64, blockSize: 4})
	c := &negativeCache{fakeCache: f, bad: 1}
	reqs := []trace.Request{req(0, 16, 1, 0), req(0, 16, 1, 100), req(0, 16, 1, 200)}
	s := mustNew(t, c, reqs, Config{CostModel: simpleCost()})
	if _, err := s.Step(context.Background()); !errors.Is(err, ErrCacheContract) {
		t.Fatalf("step: %v, want ErrCacheContract", err)
	}
	if f.allocCalls != 1 {
		t.Fatalf("%d Allocate calls, want the 1 that failed", f.allocCalls)
	}
	for seq := range SeqID(3) {
		if n := f.freed[seq+1]; n != 1 {
			t.Errorf("sequence %d freed %d times, want once", seq+1, n)
		}
	}
	if st := f.pool.Stats(); st.Used != 0 || st.Sequences != 0 {
		t.Fatalf("blocks still allocated after the failed Allocate: %+v", st)
	}
}
