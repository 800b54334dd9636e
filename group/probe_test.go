package group_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/kvtier/kvtier"
	"github.com/kvtier/kvtier/gpu/tier"
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

// hookCollective runs after(op) on its rank once reduction op completed.
// deleteAfterAgreement rebuilds c's two ranks over a collective that, on
// rank 1, deletes prompt from rank 1's Manager right after the first
// reduction (the agreement on the hit). It returns what closes the
// collective.
func deleteAfterAgreement(t *testing.T, ctx context.Context, c *cluster, prompt []int64) (closeLocal func()) {
	t.Helper()
	l, err := group.NewLocal(2)
	if err != nil {
		t.Fatal(err)
	}
	for r := range 2 {
		h := hookCollective{Collective: l.Rank(r)}
		if r == 1 {
			h.after = func(op uint64) {
				if op == 0 {
					if _, err := c.ms[1].Delete(ctx, prompt, ""); err != nil {
						t.Error(err)
					}
				}
			}
		}
		if c.ranks[r], err = group.NewRank(group.Config{Rank: r, Size: 2, Manager: c.ms[r], Collective: h}); err != nil {
			t.Fatal(err)
		}
	}
	return l.Close
}

// gpuStats returns m's GPU tier stats.
func gpuStats(t *testing.T, m *kvtier.Manager) kvtier.TierStats {
	t.Helper()
	st, err := m.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return st.Tier(kvtier.GPU)
}

type hookCollective struct {
	group.Collective
	after func(op uint64)
}

func (h hookCollective) AllReduceMin(ctx context.Context, op uint64, v int64) (int64, error) {
	a, err := h.Collective.AllReduceMin(ctx, op, v)
	if err == nil && h.after != nil {
		h.after(op)
	}
	return a, err
}

// TestProbeEvictionAfterAgreement: rank 1's copy of the prompt is dropped
// between the agreement on the hit and its allocation. Every rank must
// return the same ValidTokens, rank 0 must be reallocated to hold exactly
// it, and nothing leaks. Rank 0's lookup statistics count the request
// once: its reallocation is not another lookup.
func TestProbeEvictionAfterAgreement(t *testing.T) {
	ctx := context.Background()
	c := gpuOnlyCluster(t, 2, -1)
	prompt := make([]int64, 3*bt+1)
	for i := range prompt {
		prompt[i] = int64(100 + i)
	}
	alloc := func(seq uint64) []group.AllocResult {
		res := make([]group.AllocResult, 2)
		c.must(c.each(func(r int) (err error) {
			res[r], err = c.ranks[r].Allocate(ctx, group.AllocRequest{AllocRequest: kvtier.AllocRequest{Seq: seq, Tokens: prompt}})
			return err
		}))
		return res
	}
	alloc(1)
	c.must(c.each(func(r int) error { _, err := c.ranks[r].Commit(ctx, 1, len(prompt)); return err }))
	c.free(1)
	before := gpuStats(t, c.ms[0])
	// Rebuild the ranks over a hooked collective.
	defer deleteAfterAgreement(t, ctx, c, prompt)()
	res := alloc(2)
	after := gpuStats(t, c.ms[0])
	lookedUp := after.Tokens[tier.DefaultNamespace].Prompt - before.Tokens[tier.DefaultNamespace].Prompt
	blocks := after.Hits + after.Misses - before.Hits - before.Misses
	if lookedUp != uint64(len(prompt)) || blocks != 4 {
		t.Errorf("rank 0's GPU tier counted %d prompt tokens and %d blocks looked up for request 2, want %d and 4: its reallocation is the same request",
			lookedUp, blocks, len(prompt))
	}
	for r, x := range res {
		t.Logf("rank %d: %+v", r, x)
		if x.ValidTokens != 0 {
			t.Errorf("rank %d: ValidTokens %d, want 0 (rank 1 lost the prefix)", r, x.ValidTokens)
		}
	}
	if res[0].AgreedHit != 3*bt || !res[0].Reallocated {
		t.Errorf("rank 0: %+v, want agreed hit %d and reallocated", res[0], 3*bt)
	}
	c.free(2)
	c.checkNoLeak()
}

// TestProbeCommitErrorCountsAsFailure: Stats.Failures "counts group calls
// that ended in an error on this rank"; a Commit that returns this rank's
// own commit error (here a bad token count) is one.
func TestProbeCommitErrorCountsAsFailure(t *testing.T) {
	ctx := context.Background()
	c := gpuOnlyCluster(t, 2, -1)
	prompt := make([]int64, 2*bt)
	for i := range prompt {
		prompt[i] = int64(i)
	}
	c.must(c.each(func(r int) error {
		_, err := c.ranks[r].Allocate(ctx, group.AllocRequest{AllocRequest: kvtier.AllocRequest{Seq: 1, Tokens: prompt}})
		return err
	}))
	errs := c.each(func(r int) error {
		n := len(prompt)
		if r == 1 {
			n = len(prompt) + 5 // past the sequence: the Manager refuses it (ErrBadCommit)
		}
		_, err := c.ranks[r].Commit(ctx, 1, n)
		return err
	})
	if errs[0] != nil || errs[1] == nil {
		t.Fatalf("commit errors %v, want rank 1's alone", errs)
	}
	if st := c.ranks[1].Stats(); st.Failures != 1 {
		t.Errorf("rank 1 stats %+v after its Commit returned %v: want 1 failure", st, errs[1])
	}
	c.free(1)
}

// TestProbeReallocationCountsDemandOnce: rank 0 (with a disk) holds the
// prompt's first 2 blocks on the GPU, as rank 1 does until its copy is
// dropped right after the agreement; rank 0 is then reallocated capped at
// 0. The 3 blocks no tier held are the request's misses: rank 0's disk
// must observe them once, not once per allocation of the same request.
func TestProbeReallocationCountsDemandOnce(t *testing.T) {
	ctx := context.Background()
	m0, err := kvtier.New(kvtier.Config{GPUBlocks: 1, BlockTokens: bt})
	if err != nil {
		t.Fatal(err)
	}
	bb := int64(m0.Layout().BlockBytes())
	if err := m0.Close(ctx); err != nil {
		t.Fatal(err)
	}
	c := clusterOf(t, []kvtier.Config{
		{GPUBlocks: 16, BlockTokens: bt, PinnedBytes: 8 * 4096, DiskDir: t.TempDir(), DiskBytes: 256 * (bb + 8192)},
		{GPUBlocks: 16, BlockTokens: bt},
	})
	prompt := make([]int64, 5*bt)
	for i := range prompt {
		prompt[i] = int64(5000 + i)
	}
	head := prompt[:2*bt]
	c.must(c.each(func(r int) error {
		if _, err := c.ranks[r].Allocate(ctx, group.AllocRequest{AllocRequest: kvtier.AllocRequest{Seq: 1, Tokens: head}}); err != nil {
			return err
		}
		_, err := c.ranks[r].Commit(ctx, 1, len(head))
		return err
	}))
	c.free(1)
	c.flush()
	before, err := c.ms[0].Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer deleteAfterAgreement(t, ctx, c, head)()
	res := make([]group.AllocResult, 2)
	c.must(c.each(func(r int) (err error) {
		res[r], err = c.ranks[r].Allocate(ctx, group.AllocRequest{AllocRequest: kvtier.AllocRequest{Seq: 2, Tokens: prompt}})
		return err
	}))
	if !res[0].Reallocated || res[0].ValidTokens != 0 {
		t.Fatalf("rank 0: %+v, want reallocated to 0 valid tokens", res[0])
	}
	c.must(c.each(func(r int) error { _, err := c.ranks[r].Commit(ctx, 2, len(prompt)); return err }))
	c.free(2)
	c.flush()
	var seen float64
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		st, err := c.ms[0].Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if seen = st.Tier(kvtier.Disk).Extra["misses_observed"] - before.Tier(kvtier.Disk).Extra["misses_observed"]; seen >= 3 {
			break
		}
	}
	if seen != 3 {
		t.Errorf("rank 0's disk observed %v misses for the request, want its 3 blocks no tier held, once", seen)
	}
}
