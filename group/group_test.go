package group_test

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/kvtier/kvtier"
	"github.com/kvtier/kvtier/gpu"
	"github.com/kvtier/kvtier/group"
	"github.com/kvtier/kvtier/refengine"
)

func randomTokens(rng *rand.Rand, n int) []int64 {
	p := make([]int64, n)
	for i := range p {
		p[i] = rng.Int64N(int64(tpModel.Vocab))
	}
	return p
}

// TestGroupAgreesDespiteDivergentRanks runs 4 ranks, each holding one KV
// head of the reference transformer, through deliberately different
// states: rank 0's pinned tier is too small to keep the prompt (it loads
// from disk), rank 1's disk record of one block is corrupt (flipped bytes,
// then a restart), rank 2's loads wait past the group's deadline, rank 3's
// loads fail. Every request starts from the same valid prefix on every
// rank, the prefix is the one the weakest rank could serve, the logits
// computed over the four shards equal a full recompute bit for bit, and
// every block is free again at the end.
func TestGroupAgreesDespiteDivergentRanks(t *testing.T) {
	ctx := context.Background()
	model, err := refengine.New(tpModel)
	if err != nil {
		t.Fatal(err)
	}
	layout, err := gpu.NewLayout(shardSpec(), bt)
	if err != nil {
		t.Fatal(err)
	}
	slot := int64((layout.BlockBytes() + 4095) / 4096 * 4096)
	c := &cluster{t: t, model: model}
	for r := range nRanks {
		c.devs = append(c.devs, newFaultyDevice(t))
		pinnedSlots := int64(32)
		if r == 0 {
			pinnedSlots = 6 // the prompt's blocks are evicted from pinned memory to disk
		}
		base := kvtier.Config{GPUBlocks: 18, BlockTokens: bt, Model: shardSpec(), VocabSize: tpModel.Vocab, ModelID: "tp-tiny@1",
			Ingestion: kvtier.IngestAll, DiskIngestion: kvtier.IngestAll, PinnedBytes: pinnedSlots * slot,
			DiskDir: t.TempDir(), DiskBytes: 1 << 20, ReadDeadlineBase: -1, Device: c.devs[r]}
		cfg, err := group.RankConfig(base, r, nRanks)
		if err != nil {
			t.Fatal(err)
		}
		m, err := kvtier.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		c.cfgs, c.ms = append(c.cfgs, cfg), append(c.ms, m)
	}
	defer func() {
		for _, d := range c.devs {
			if g := d.gate.Load(); g != nil {
				close(*g)
				d.gate.Store(nil)
			}
		}
		for _, m := range c.ms {
			_ = m.Close(ctx)
		}
		c.local.Close()
	}()
	c.regroup()
	rng := rand.New(rand.NewPCG(14, 4))
	prompt := randomTokens(rng, 8*bt+1) // 8 full blocks and a partial one, always computed
	far := time.Now().Add(time.Hour)

	// 1. The prompt, computed everywhere and written through to pinned
	// memory and disk.
	s := c.serve(1, prompt, far)
	if s.valid != 0 {
		t.Fatalf("a cold group starts from %d valid tokens", s.valid)
	}
	block5 := make([]byte, layout.BlockBytes())
	if err := c.ms[1].Arena().ReadBlock(int(s.kv.tables[1][5]), 0, block5); err != nil {
		t.Fatal(err)
	}
	c.free(1)
	c.flush()

	// Rank 1 restarts over a disk record of block 5 with flipped bytes; the
	// group re-forms.
	if err := c.ms[1].Close(ctx); err != nil {
		t.Fatal(err)
	}
	corruptBlock(t, c.cfgs[1].DiskDir, block5[:256])
	if c.ms[1], err = kvtier.New(c.cfgs[1]); err != nil {
		t.Fatal(err)
	}
	c.regroup()

	// 2. A live sequence keeps the prompt's first 2 blocks on every GPU.
	keep := prompt[:2*bt+1]
	if s := c.serve(2, keep, far); s.valid != 2*bt {
		t.Fatalf("the kept prefix starts from %d valid tokens, want %d", s.valid, 2*bt)
	}
	// 3. A filler takes every other GPU block: the prompt's blocks 2..7 are
	// below the GPU now.
	evict := func(seq uint64) {
		c.serve(seq, randomTokens(rng, 15*bt), far)
		c.free(seq)
		c.flush()
	}
	evict(3)

	// 4. Rank 1 holds 5 blocks (its block 5 is corrupt), the others 8.
	s = c.serve(4, prompt, far)
	if s.valid != 5*bt {
		t.Fatalf("group valid prefix %d, want %d (rank 1 cannot serve block 5)", s.valid, 5*bt)
	}
	checkAgreement(t, s)
	for r, res := range s.res {
		if r != 1 && !res.Reallocated {
			t.Fatalf("rank %d: %+v: want its loads cut back to the group's prefix", r, res)
		}
	}
	c.free(4)
	evict(5)

	// 5. Rank 2's loads wait past the deadline; rank 3's fail. Both fall back
	// to the 2 blocks their GPU holds, and so does the group.
	gate := make(chan struct{})
	c.devs[2].gate.Store(&gate)
	c.devs[3].fail.Store(true)
	s = c.serve(6, prompt, time.Now().Add(300*time.Millisecond))
	if s.valid != 2*bt {
		t.Fatalf("group valid prefix %d, want %d (rank 2 late, rank 3 failing)", s.valid, 2*bt)
	}
	checkAgreement(t, s)
	for r, res := range s.res {
		if res.AgreedHit <= 2*bt {
			t.Fatalf("rank %d: agreed hit %d: every rank held more of the prompt below the GPU", r, res.AgreedHit)
		}
		if r >= 2 && (res.LocalValid != 2*bt || res.Reallocated) {
			t.Fatalf("rank %d: %+v", r, res)
		}
	}
	c.free(6)
	close(gate)
	c.devs[2].gate.Store(nil)
	c.devs[3].fail.Store(false)

	st := make([]group.Stats, nRanks)
	for r, rk := range c.ranks {
		st[r] = rk.Stats()
	}
	for r := range nRanks {
		if st[r].HitCostTokens != c.hitCost[r] || st[r].LoadCostTokens != c.loadCost[r] || st[r].Agreements != 5 || st[r].Commits != 5 {
			t.Fatalf("rank %d stats %+v, want hit cost %d, load cost %d, 5 agreements and commits (since the regroup)", r, st[r], c.hitCost[r], c.loadCost[r])
		}
	}
	for r, m := range c.ms {
		ts, err := m.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if r == 2 && ts.Tier(kvtier.GPU).Timeouts == 0 || r == 3 && ts.Tier(kvtier.GPU).Failed == 0 {
			t.Fatalf("rank %d: the injected fault left no trace: %v", r, ts.Tier(kvtier.GPU))
		}
	}
	g := group.Summarize(st)
	if g.Agreements != 5 || g.Failures != 0 || g.LoadCostTokens == 0 {
		t.Fatalf("group stats %+v", g)
	}
	c.free(2)
	c.checkNoLeak()
}

// checkAgreement checks one request's results against the protocol: the
// agreed hit is the ranks' smallest lookup, every rank's valid prefix is
// the smallest of what the ranks loaded, and a rank that loaded more was
// allocated again.
func checkAgreement(t *testing.T, s served) {
	t.Helper()
	hit, valid := s.res[0].LocalHit, s.res[0].LocalValid
	for _, res := range s.res {
		hit, valid = min(hit, res.LocalHit), min(valid, res.LocalValid)
	}
	for r, res := range s.res {
		if res.AgreedHit != hit || res.ValidTokens != valid || res.LocalValid > res.AgreedHit || res.Reallocated != (res.LocalValid > valid) {
			t.Fatalf("rank %d: %+v: want agreed hit %d, valid %d", r, res, hit, valid)
		}
	}
}
