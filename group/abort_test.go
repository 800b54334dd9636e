package group_test

import (
	"context"
	"errors"
	"testing"

	"github.com/kvtier/kvtier"
	"github.com/kvtier/kvtier/group"
)

// gpuOnlyCluster is n GPU-only ranks; rank small has only 2 blocks.
func gpuOnlyCluster(t *testing.T, n, small int) *cluster {
	t.Helper()
	c := &cluster{t: t}
	for r := range n {
		blocks := 16
		if r == small {
			blocks = 2
		}
		cfg, err := group.RankConfig(kvtier.Config{GPUBlocks: blocks, BlockTokens: bt}, r, n)
		if err != nil {
			t.Fatal(err)
		}
		m, err := kvtier.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = m.Close(context.Background()) })
		c.ms = append(c.ms, m)
	}
	c.regroup()
	t.Cleanup(func() { c.local.Close() })
	return c
}

// TestGroupAbortsOnEveryRank: when one rank cannot allocate, or one rank's
// context has ended, every rank returns ErrAborted and none keeps the
// sequence; the group serves the next request.
func TestGroupAbortsOnEveryRank(t *testing.T) {
	ctx := context.Background()
	c := gpuOnlyCluster(t, 4, 1)
	prompt := make([]int64, 5*bt)
	for i := range prompt {
		prompt[i] = int64(i)
	}
	alloc := func(seq uint64, tokens []int64, ctxOf func(r int) context.Context) []error {
		return c.each(func(r int) error {
			_, err := c.ranks[r].Allocate(ctxOf(r), group.AllocRequest{AllocRequest: kvtier.AllocRequest{Seq: seq, Tokens: tokens}})
			return err
		})
	}
	errs := alloc(1, prompt, func(int) context.Context { return ctx })
	for r, err := range errs {
		if !errors.Is(err, group.ErrAborted) || (r == 1) != errors.Is(err, kvtier.ErrNoSpace) {
			t.Fatalf("rank %d: %v, want ErrAborted (and ErrNoSpace on rank 1)", r, err)
		}
	}
	c.checkNoLeak()

	canceled, cancel := context.WithCancel(ctx)
	cancel()
	errs = alloc(2, prompt[:bt], func(r int) context.Context {
		if r == 2 {
			return canceled
		}
		return ctx
	})
	for r, err := range errs {
		if !errors.Is(err, group.ErrAborted) {
			t.Fatalf("rank %d with rank 2 canceled: %v, want ErrAborted", r, err)
		}
	}
	c.checkNoLeak()

	// The group goes on.
	c.must(alloc(3, prompt[:bt], func(int) context.Context { return ctx }))
	c.free(3)
	c.checkNoLeak()
	for r, rk := range c.ranks {
		if st := rk.Stats(); st.Failures != 2 || st.Agreements != 1 {
			t.Fatalf("rank %d stats %+v, want 2 failures and 1 agreement", r, st)
		}
	}
}
