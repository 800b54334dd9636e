package group_test

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/kvtier/kvtier"
	"github.com/kvtier/kvtier/group"
	"github.com/kvtier/kvtier/refengine"
)

// TestProbeGroupTruncatedAdapterRequests: a tensor-parallel engine serves
// a prompt longer than MaxSeqLen (Truncate) under a LoRA adapter, capping
// the hit one token short of the kept tokens as the README says. The
// ranks look the truncated prompt up (Rank.Allocate cuts it as the Manager
// will), so a second request starts from the kept prefix's cached blocks
// on every rank; after the chain is deleted on one rank only, the group
// starts from nothing; the same tokens without the adapter hit nothing.
// Every logit over the four shards equals a recompute of the kept tokens.
func TestProbeGroupTruncatedAdapterRequests(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	model, err := refengine.New(tpModel)
	if err != nil {
		t.Fatal(err)
	}
	bases := make([]kvtier.Config, nRanks)
	for r := range bases {
		bases[r] = kvtier.Config{GPUBlocks: 32, BlockTokens: bt, Model: shardSpec(), VocabSize: tpModel.Vocab, ModelID: "tp-tiny@1"}
	}
	c := clusterOf(t, bases)
	rng := rand.New(rand.NewPCG(15, 5))
	const keep = 5*bt + 2
	long := randomTokens(rng, keep+3*bt)
	kept := long[:keep]
	want, err := model.Reference(kept)
	if err != nil {
		t.Fatal(err)
	}

	serve := func(seq uint64, lora string) int {
		t.Helper()
		res := make([]group.AllocResult, nRanks)
		c.must(c.each(func(r int) (err error) {
			res[r], err = c.ranks[r].Allocate(ctx, group.AllocRequest{AllocRequest: kvtier.AllocRequest{
				Seq: seq, Tokens: long, LoRA: lora, MaxSeqLen: keep, Truncate: true, MaxHitTokens: keep - 1}})
			return err
		}))
		kv := &shardedKV{ms: c.ms, tables: make([][]kvtier.BlockID, nRanks)}
		valid := res[0].ValidTokens
		for r, x := range res {
			if x.ValidTokens != valid {
				t.Fatalf("seq %d: rank %d starts from %d tokens, rank 0 from %d", seq, r, x.ValidTokens, valid)
			}
			if want := (keep + bt - 1) / bt; len(x.Blocks) != want {
				t.Fatalf("seq %d: rank %d holds %d blocks for %d kept tokens, want %d", seq, r, len(x.Blocks), keep, want)
			}
			kv.tables[r] = x.Blocks
		}
		logits, err := model.Forward(kv, kept[valid:], valid)
		if err != nil {
			t.Fatal(err)
		}
		for i, l := range logits {
			for j := range l {
				if math.Float32bits(l[j]) != math.Float32bits(want[valid+i][j]) {
					t.Fatalf("seq %d position %d logit %d: %v from the group's cache, %v recomputed (valid %d)", seq, valid+i, j, l[j], want[valid+i][j], valid)
				}
			}
		}
		committed := make([]int, nRanks)
		c.must(c.each(func(r int) (err error) {
			committed[r], err = c.ranks[r].Commit(ctx, seq, keep)
			return err
		}))
		if committed[0] != keep {
			t.Fatalf("seq %d: the group committed %d of %d kept tokens", seq, committed[0], keep)
		}
		c.free(seq)
		return valid
	}

	if v := serve(1, "sql-lora"); v != 0 {
		t.Fatalf("a cold group starts from %d tokens", v)
	}
	if v := serve(2, "sql-lora"); v != (keep-1)/bt*bt {
		t.Fatalf("the same truncated request starts from %d tokens, want %d", v, (keep-1)/bt*bt)
	}
	if v := serve(3, ""); v != 0 {
		t.Fatalf("the base model starts from %d tokens of the adapter's blocks", v)
	}
	if _, err := c.ms[2].DeleteChain(ctx, kvtier.Chain{Tokens: kept, LoRA: "sql-lora"}); err != nil {
		t.Fatal(err)
	}
	if v := serve(4, "sql-lora"); v != 0 {
		t.Fatalf("rank 2 lost the chain, yet the group starts from %d tokens", v)
	}
	c.checkNoLeak()
}
