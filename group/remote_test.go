package group_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	"github.com/kvtier/kvtier"
	"github.com/kvtier/kvtier/gpu"
	"github.com/kvtier/kvtier/group"
	"github.com/kvtier/kvtier/refengine"
)

// TestGroupHitFromSharedTier: a group on a node whose own tiers hold
// nothing of a prompt agrees on the hit the shared tier holds (each rank
// its own shard, under its own keys) and its logits from the loaded KV are
// bit-identical to a recompute. The group agreed its hit from Lookup,
// which left the shared tier out: it recomputed the whole prompt.
func TestGroupHitFromSharedTier(t *testing.T) {
	addr := os.Getenv("KVTIER_REDIS")
	if addr == "" {
		if os.Getenv("KVTIER_REQUIRE_REDIS") != "" {
			t.Fatal("KVTIER_REQUIRE_REDIS is set (CI) but KVTIER_REDIS is not")
		}
		t.Skip(`no Redis: run eval "$(.ci/redis.sh start)" first (CI does)`)
	}
	model, err := refengine.New(tpModel)
	if err != nil {
		t.Fatal(err)
	}
	layout, err := gpu.NewLayout(shardSpec(), bt)
	if err != nil {
		t.Fatal(err)
	}
	slot := int64((layout.BlockBytes() + 4095) / 4096 * 4096)
	prefix := fmt.Sprintf("kvtier-group-test-%d", rand.Uint64())
	node := func() *cluster {
		c := &cluster{t: t, model: model}
		for r := range nRanks {
			base := kvtier.Config{GPUBlocks: 18, BlockTokens: bt, Model: shardSpec(), VocabSize: tpModel.Vocab, ModelID: "tp-tiny@1",
				Ingestion: kvtier.IngestAll, DiskIngestion: kvtier.IngestAll, PinnedBytes: 32 * slot, ReadDeadlineBase: -1,
				Remote: &kvtier.RemoteConfig{Addrs: []string{addr}, Prefix: prefix}}
			cfg, err := group.RankConfig(base, r, nRanks)
			if err != nil {
				t.Fatal(err)
			}
			m, err := kvtier.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = m.Close(context.Background()) })
			c.cfgs, c.ms = append(c.cfgs, cfg), append(c.ms, m)
		}
		c.regroup()
		t.Cleanup(c.local.Close)
		return c
	}
	prompt := randomTokens(rand.New(rand.NewPCG(7, 7)), 6*bt+1)
	far := time.Now().Add(time.Hour)

	first := node()
	s := first.serve(1, prompt, far)
	if s.valid != 0 {
		t.Fatalf("the first node started from %d valid tokens of a prompt no tier held", s.valid)
	}
	first.free(1)
	first.flush() // written through to the shared tier

	second := node()
	s = second.serve(1, prompt, far) // checks every logit against a recompute
	for r, res := range s.res {
		if res.LocalHit != 6*bt || res.AgreedHit != 6*bt || res.ValidTokens != 6*bt {
			t.Errorf("rank %d on the second node: local hit %d, agreed %d, valid %d; want %d each (the shared tier's blocks)",
				r, res.LocalHit, res.AgreedHit, res.ValidTokens, 6*bt)
		}
	}
	second.free(1)
	second.checkNoLeak()
}
