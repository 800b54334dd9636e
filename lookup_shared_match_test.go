package kvtier

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestLookupMatchesAllocateSharedTier: with the shared tier counted
// (c3fc148), Lookup finds what the allocation right after it finds and
// loads, per tier: prompts ending on a block boundary, one token past or
// short of it, longer than what was stored; under the double-get
// thresholds (DoubleGetMinBlocks, DoubleGetMinRatio, also with part of the
// prompt on the GPU); under a LoRA adapter and a salt.
func TestLookupMatchesAllocateSharedTier(t *testing.T) {
	ctx := context.Background()
	rc, ok := remoteAddrs(t)["standalone"]
	if !ok {
		t.Skip("no standalone Redis")
	}
	type tc struct {
		name       string
		n          int // prompt tokens
		stored     int // tokens computed on node 1
		minBlocks  int
		minRatio   float64
		lora, salt string
		gpuPart    int  // tokens computed on node 2 first (its GPU holds them)
		skipped    bool // the thresholds turn the shared tier's blocks away
	}
	cases := []tc{
		{name: "exact", n: 4 * bt, stored: 4 * bt},
		{name: "partial", n: 4*bt + 3, stored: 4*bt + 3},
		{name: "short-by-one", n: 4*bt - 1, stored: 4*bt - 1},
		{name: "longer-prompt", n: 7 * bt, stored: 4 * bt},
		{name: "minblocks-below", n: 4 * bt, stored: 2 * bt, minBlocks: 3, skipped: true},
		{name: "minblocks-at", n: 4 * bt, stored: 3 * bt, minBlocks: 3},
		{name: "ratio", n: 8 * bt, stored: 4 * bt, minRatio: 0.6, skipped: true},
		{name: "ratio-ok", n: 8 * bt, stored: 5 * bt, minRatio: 0.6},
		{name: "lora", n: 4 * bt, stored: 4 * bt, lora: "a1"},
		{name: "salt", n: 4 * bt, stored: 4 * bt, salt: "s1"},
		{name: "gpu-part", n: 6 * bt, stored: 6 * bt, gpuPart: 2 * bt},
		{name: "gpu-part-ratio", n: 6 * bt, stored: 6 * bt, gpuPart: 2 * bt, minRatio: 0.7, skipped: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			prefix := fmt.Sprintf("kvtier-test-%d", rand.Uint64())
			a := toks(700, c.n)
			cfg := nodeConfig(rc, prefix, "m@1")
			cfg.DoubleGetMinBlocks, cfg.DoubleGetMinRatio = c.minBlocks, c.minRatio
			n1 := newManager(t, cfg)
			r, err := n1.Allocate(ctx, AllocRequest{Seq: 1, Tokens: a[:c.stored], Salt: c.salt, LoRA: c.lora})
			if err != nil {
				t.Fatal(err)
			}
			wait(t, r)
			writeBlocks(t, n1, r.Blocks, a[:c.stored], "")
			if err := commitFree(ctx, n1, 1); err != nil {
				t.Fatal(err)
			}
			if err := n1.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			n2 := newManager(t, cfg)
			if c.gpuPart > 0 {
				r, err := n2.Allocate(ctx, AllocRequest{Seq: 5, Tokens: a[:c.gpuPart], Salt: c.salt, LoRA: c.lora})
				if err != nil {
					t.Fatal(err)
				}
				wait(t, r)
				if err := commitFree(ctx, n2, 5); err != nil {
					t.Fatal(err)
				}
			}
			l, err := n2.Lookup(ctx, LookupRequest{Tokens: a, Salt: c.salt, LoRA: c.lora})
			if err != nil {
				t.Fatal(err)
			}
			ar, err := n2.Allocate(ctx, AllocRequest{Seq: 2, Tokens: a, Salt: c.salt, LoRA: c.lora})
			if err != nil {
				t.Fatal(err)
			}
			o := wait(t, ar)
			if l.DoubleGetSkipped != c.skipped || (!c.skipped && l.Tokens.Of(Remote) == 0) {
				t.Errorf("Lookup %v, double get skipped %v; want the shared tier's blocks, skipped %v", l.Tokens, l.DoubleGetSkipped, c.skipped)
			}
			if ar.Tokens != l.Tokens {
				t.Errorf("Allocate found %v, Lookup said %v", ar.Tokens, l.Tokens)
			}
			if o.ValidTokens != l.Tokens.Sum() {
				t.Errorf("%d tokens valid once loaded, Lookup said %v", o.ValidTokens, l.Tokens)
			}
		})
	}
}
