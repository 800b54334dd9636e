package kvtier_test

import (
	"testing"

	"github.com/kvtier/kvtier/gpu"
	"github.com/kvtier/kvtier/internal/enginetest"
)

// TestEngineOneTokenPrompt: a one-token prompt whose block is cached
// (one-token blocks) is admitted with its hit capped one token short, as
// every longer prompt is, and its logits checked. The engine kit asked
// for MaxHitTokens = len(prompt)-1 = 0, which means no cap: the whole
// prompt was a hit and Admit failed ("1 of 1 tokens valid: the hit cap
// did not hold"). The Manager's doc says to pass -1 there.
func TestEngineOneTokenPrompt(t *testing.T) {
	ctx := engineCtx(t)
	cfg, err := enginetest.Config(1, 16, 0, gpu.BlockContiguous)
	if err != nil {
		t.Fatal(err)
	}
	m := mustNew(t, cfg)
	defer mustClose(t, m)
	e := &enginetest.Engine{M: m, Model: engineModel(t)}
	for seq := uint64(1); seq <= 2; seq++ {
		g := e.NewGen(seq, []int64{5}, "")
		if err := g.Run(ctx, 2); err != nil {
			t.Fatalf("request %d: %v", seq, err)
		}
		if err := g.Check(); err != nil {
			t.Fatal(err)
		}
	}
}
