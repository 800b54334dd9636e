package group_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/kvtier/kvtier"
	"github.com/kvtier/kvtier/group"
)

// gpuOnlyCluster is n GPU-only ranks; rank small has only 2 blocks.
func gpuOnlyCluster(t *testing.T, n, small int) *cluster {
	t.Helper()
	bases := make([]kvtier.Config, n)
	for r := range bases {
		bases[r] = kvtier.Config{GPUBlocks: 16, BlockTokens: bt}
		if r == small {
			bases[r].GPUBlocks = 2
		}
	}
	return clusterOf(t, bases)
}

// clusterOf is a rank per base config, each made a rank's by RankConfig.
func clusterOf(t *testing.T, bases []kvtier.Config) *cluster {
	t.Helper()
	c := &cluster{t: t}
	for r, base := range bases {
		cfg, err := group.RankConfig(base, r, len(bases))
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

// TestGroupCommitBadTokensKeepsRanksInStep: a rank passing a bad token
// count to Commit still takes part in the reduction, reporting a failure:
// it returns a *ConfigError and commits nothing, the group's count is 0 on
// every rank, and the ranks' later reductions still pair up.
func TestGroupCommitBadTokensKeepsRanksInStep(t *testing.T) {
	ctx := context.Background()
	c := gpuOnlyCluster(t, 4, -1)
	prompt := make([]int64, 2*bt+1)
	for i := range prompt {
		prompt[i] = int64(i)
	}
	c.must(c.each(func(r int) error {
		_, err := c.ranks[r].Allocate(ctx, group.AllocRequest{AllocRequest: kvtier.AllocRequest{Seq: 1, Tokens: prompt}})
		return err
	}))
	commit := func(tokensOf func(r int) int) ([]int, []error) {
		// A rank that returns without reducing leaves the others waiting
		// for it: it ends their wait, so the test fails instead of hanging.
		inStep, cancel := context.WithCancel(ctx)
		defer cancel()
		n := make([]int, len(c.ranks))
		return n, c.each(func(r int) (err error) {
			before := c.ranks[r].Stats().Reductions
			n[r], err = c.ranks[r].Commit(inStep, 1, tokensOf(r))
			if c.ranks[r].Stats().Reductions == before {
				cancel()
			}
			return err
		})
	}
	lookup := func() []int {
		hits := make([]int, len(c.ranks))
		c.must(c.each(func(r int) (err error) {
			hits[r], err = c.ranks[r].Lookup(ctx, kvtier.LookupRequest{Tokens: prompt})
			return err
		}))
		return hits
	}

	n, errs := commit(func(r int) int {
		if r == 2 {
			return -1
		}
		return len(prompt)
	})
	for r, err := range errs {
		var ce *group.ConfigError
		if r == 2 && !(errors.As(err, &ce) && ce.Field == "tokens" && errors.Is(err, group.ErrBadConfig)) || r != 2 && err != nil {
			t.Fatalf("rank %d: %v (want a *ConfigError on rank 2 only)", r, err)
		}
		if n[r] != 0 {
			t.Fatalf("rank %d: the group committed %d tokens, want 0 (rank 2 committed nothing)", r, n[r])
		}
	}
	for r, rk := range c.ranks {
		if st, st0 := rk.Stats(), c.ranks[0].Stats(); st.Reductions != st0.Reductions || st.Commits != 1 {
			t.Fatalf("rank %d stats %+v, rank 0 %+v: want the same reductions and 1 commit", r, st, st0)
		}
	}
	// Rank 2 holds nothing committed, so the group finds nothing.
	if hits := lookup(); slices.Max(hits) != 0 {
		t.Fatalf("group lookups %v after rank 2's bad commit, want 0", hits)
	}

	// The group goes on: a good commit everywhere stores the full blocks.
	n, errs = commit(func(int) int { return len(prompt) })
	c.must(errs)
	for r := range n {
		if n[r] != len(prompt) {
			t.Fatalf("rank %d: the group committed %d tokens, want %d", r, n[r], len(prompt))
		}
	}
	if hits := lookup(); slices.Min(hits) != 2*bt || slices.Max(hits) != 2*bt {
		t.Fatalf("group lookups %v, want %d", hits, 2*bt)
	}
	c.free(1)
	c.checkNoLeak()
}
