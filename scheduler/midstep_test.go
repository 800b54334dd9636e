package scheduler

import (
	"context"
	"errors"
	"testing"

	"github.com/kvtier/kvtier/trace"
)

// midStepCache is a cache whose one load (sequence 2's) ends while a step
// is under way: between the step's look at the loads and its idle wait, as
// a Manager closing Ready on its own goroutine does.
type midStepCache struct {
	ready  chan struct{}
	held   map[SeqID]bool
	closed bool
}

func (c *midStepCache) Allocate(_ context.Context, reqs []AllocReq) ([]AllocOutcome, error) {
	outs := make([]AllocOutcome, len(reqs))
	for i, r := range reqs {
		switch r.Seq {
		case 2: // a prefix in pinned memory, its load in flight
			outs[i] = AllocOutcome{PinnedTokens: 16, Ready: c.ready}
			c.held[r.Seq] = true
		case 3: // no room while 2 holds its blocks
			if c.held[2] {
				outs[i].Err = ErrNoBlocks
				if !c.held[1] && !c.closed {
					close(c.ready) // the copy ends now, mid-step
					c.closed = true
				}
				continue
			}
			c.held[r.Seq] = true
		default:
			c.held[r.Seq] = true
		}
	}
	return outs, nil
}

func (c *midStepCache) Append(_ context.Context, seqs []SeqID, _ []int64) ([]error, error) {
	return make([]error, len(seqs)), nil
}

func (c *midStepCache) Commit(_ context.Context, seqs []SeqID, _ []int) ([]error, error) {
	return make([]error, len(seqs)), nil
}

func (c *midStepCache) Free(_ context.Context, seqs []SeqID) error {
	for _, s := range seqs {
		delete(c.held, s)
	}
	return nil
}

func (c *midStepCache) Swap(context.Context, []SeqID) error { return ErrUnsupported }
func (c *midStepCache) Flush(context.Context) error         { return nil }

// TestLoadEndingMidStep: a load that ends between a step's look at the
// loads and its idle wait is run by the next step, not reported as a stall
// (its modelled end is already past, so there is nothing to wait for).
func TestLoadEndingMidStep(t *testing.T) {
	c := &midStepCache{ready: make(chan struct{}), held: map[SeqID]bool{}}
	reqs := []trace.Request{req(0, 32, 3, 100), req(0, 32, 2, 200), req(0, 32, 2, 300)}
	res, err := Run(context.Background(), c, reqs, Config{CostModel: simpleCost(), Onboard: Wait})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if res.Requests != 3 {
		t.Fatalf("%d requests finished, want 3", res.Requests)
	}
}

// TestNewRejectsShortHashIDs: the prompt is built from the hash ids, one
// block of tokens each, so a request with too few for its input length is
// bad input for New, not a shorter run counted as the full one.
func TestNewRejectsShortHashIDs(t *testing.T) {
	for _, ids := range [][]int64{nil, {7}} {
		r := trace.Request{InputLength: 3 * trace.BlockTokens, OutputLength: 2, HashIDs: ids}
		fc := newFakeCache(fakeConfig{gpuBlocks: 64, blockSize: 16})
		if _, err := New(fc, []trace.Request{r}, Config{CostModel: simpleCost()}); !errors.Is(err, ErrBadConfig) {
			t.Errorf("hash ids %v for %d tokens: New = %v, want ErrBadConfig", ids, r.InputLength, err)
		}
	}
}
