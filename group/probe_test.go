package group_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/kvtier/kvtier"
	"github.com/kvtier/kvtier/group"
)

// TestProbeNilContextRankKeepsGroupInStep: a group call made with a nil
// context on one rank is a bad argument like any other, and a group call
// "takes part in its reductions even when it fails on this rank (a bad
// argument ...)": the other ranks must get ErrAborted at once, not wait
// for the peer until their own contexts end, and the ranks' reduction
// counters must stay paired for the next request.
func TestProbeNilContextRankKeepsGroupInStep(t *testing.T) {
	c := gpuOnlyCluster(t, 2, -1)
	prompt := make([]int64, 2*bt)
	for i := range prompt {
		prompt[i] = int64(i)
	}
	var nilCtx context.Context
	bound, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	errs := c.each(func(r int) error {
		ctx := nilCtx
		if r == 0 {
			ctx = bound
		}
		_, err := c.ranks[r].Allocate(ctx, group.AllocRequest{AllocRequest: kvtier.AllocRequest{Seq: 1, Tokens: prompt}})
		return err
	})
	if errors.Is(errs[0], context.DeadlineExceeded) || !errors.Is(errs[0], group.ErrAborted) {
		t.Errorf("rank 0 with rank 1 given a nil context: %v, want ErrAborted at once (not its own deadline)", errs[0])
	}
	if errs[1] == nil {
		t.Errorf("rank 1 with a nil context: no error")
	}
	s0, s1 := c.ranks[0].Stats(), c.ranks[1].Stats()
	if s0.Reductions != s1.Reductions {
		t.Errorf("reductions: rank 0 %d, rank 1 %d: the ranks' call orders are apart", s0.Reductions, s1.Reductions)
	}
	c.checkNoLeak()

	// Commit and Lookup too: rank 1's nil context fails there alone.
	c.must(c.each(func(r int) error {
		_, err := c.ranks[r].Allocate(bound, group.AllocRequest{AllocRequest: kvtier.AllocRequest{Seq: 2, Tokens: prompt}})
		return err
	}))
	n := make([]int, 2)
	errs = c.each(func(r int) (err error) {
		ctx := nilCtx
		if r == 0 {
			ctx = bound
		}
		n[r], err = c.ranks[r].Commit(ctx, 2, len(prompt))
		return err
	})
	if errs[0] != nil || errs[1] == nil || n[0] != 0 || n[1] != 0 {
		t.Errorf("commit with rank 1 given a nil context: %v, %v; counts %v; want rank 1's error alone and 0 everywhere", errs[0], errs[1], n)
	}
	errs = c.each(func(r int) (err error) {
		ctx := nilCtx
		if r == 0 {
			ctx = bound
		}
		n[r], err = c.ranks[r].Lookup(ctx, kvtier.LookupRequest{Tokens: prompt})
		return err
	})
	if errs[0] != nil || n[0] != 0 || n[1] != 0 {
		t.Errorf("lookup with rank 1 given a nil context: %v, %v; hits %v; want 0 everywhere", errs[0], errs[1], n)
	}
	c.free(2)
	c.checkNoLeak()
}
