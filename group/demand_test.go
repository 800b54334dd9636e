package group_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/kvtier/kvtier"
	"github.com/kvtier/kvtier/group"
)

// TestGroupAbortCountsNoDiskMisses: a group request aborted because one rank
// has no GPU room was applied on the other rank before the vote, and freed
// there; a scheduler asks again. That rank's disk policy must not count the
// request's misses per try: it hears of a request's misses when the group
// commits it. After two aborted tries of a 5-block request and one 1-block
// request served, rank 0's disk has observed 1 miss.
func TestGroupAbortCountsNoDiskMisses(t *testing.T) {
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
		{GPUBlocks: 2, BlockTokens: bt}, // no room for 5 blocks
	})
	tokens := func(base, n int) []int64 {
		p := make([]int64, n)
		for i := range p {
			p[i] = int64(base + i)
		}
		return p
	}
	for try := range 2 {
		errs := c.each(func(r int) error {
			_, err := c.ranks[r].Allocate(ctx, group.AllocRequest{AllocRequest: kvtier.AllocRequest{Seq: uint64(1 + try), Tokens: tokens(7000, 5*bt)}})
			return err
		})
		for r, err := range errs {
			if !errors.Is(err, group.ErrAborted) {
				t.Fatalf("try %d rank %d: %v, want ErrAborted", try, r, err)
			}
		}
	}
	one := tokens(9000, bt)
	c.must(c.each(func(r int) error {
		_, err := c.ranks[r].Allocate(ctx, group.AllocRequest{AllocRequest: kvtier.AllocRequest{Seq: 10, Tokens: one}})
		return err
	}))
	c.must(c.each(func(r int) error {
		_, err := c.ranks[r].Commit(ctx, 10, len(one))
		return err
	}))
	var seen float64
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		st, err := c.ms[0].Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if seen = st.Tier(kvtier.Disk).Extra["misses_observed"]; seen >= 1 {
			break
		}
	}
	if seen != 1 {
		t.Fatalf("rank 0's disk observed %v misses, want the served request's 1 (the aborted one's 5 blocks, tried twice, count nothing)", seen)
	}
}
