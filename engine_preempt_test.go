package kvtier_test

import (
	"fmt"
	"testing"

	"github.com/kvtier/kvtier"
	"github.com/kvtier/kvtier/internal/enginetest"
	"github.com/kvtier/kvtier/refengine"
)

// TestReferenceEnginePreemption: requests preempted mid-decode and
// mid-prefill, by Swap (their committed blocks go to pinned memory; the GPU
// is then emptied, so the resumption loads them from there) and by recompute
// (Free; the resumption hits what the GPU still caches), under each layout.
// Logits stay bit-identical; Swap must have written every full committed
// block down, and resumptions must have hit the tier the scenario names.
func TestReferenceEnginePreemption(t *testing.T) {
	for _, kind := range layouts {
		for _, swap := range []bool{true, false} {
			t.Run(fmt.Sprintf("layout=%v/swap=%v", kind, swap), func(t *testing.T) {
				ctx := engineCtx(t)
				const gpuBlocks = 32
				cfg := engineConfig(t, gpuBlocks, 64, kind)
				cfg.OffloadThreshold = 1 // nothing moves down but what Swap and eviction move
				m := mustNew(t, cfg)
				defer mustClose(t, m)
				p := enginetest.NewPrompts(21, refengine.TinyConfig.Vocab, ebt, 3)
				model := engineModel(t)
				var tally, resumed enginetest.Tally
				for i := range 8 {
					e := &enginetest.Engine{M: m, Model: model}
					midPrefill := i%2 == 1
					if midPrefill {
						e.Chunk = 2*ebt + 1
					}
					g := e.NewGen(uint64(i+1), p.Next(), "")
					if err := g.Admit(ctx); err != nil {
						t.Fatal(err)
					}
					if midPrefill {
						if _, err := g.PrefillChunk(ctx); err != nil {
							t.Fatal(err)
						}
					} else if err := g.Prefill(ctx); err != nil {
						t.Fatal(err)
					} else if err := g.Decode(ctx, 2); err != nil {
						t.Fatal(err)
					}
					full := g.Computed() / ebt * ebt // committed, in whole blocks
					if err := g.Preempt(ctx, swap); err != nil {
						t.Fatal(err)
					}
					before := g.Tally
					if swap {
						if err := m.Flush(ctx); err != nil {
							t.Fatal(err)
						}
						pr, err := m.Exists(ctx, g.Tokens[:full], "")
						if err != nil || pr.Tokens.Of(kvtier.Pinned) != full {
							t.Fatalf("seq %d swapped out with %d committed tokens in full blocks; pinned memory holds %+v (%v)", g.Seq, full, pr, err)
						}
						if err := enginetest.EvictGPU(ctx, m, p, 1<<40, gpuBlocks); err != nil {
							t.Fatal(err)
						}
					}
					if err := g.Admit(ctx); err != nil {
						t.Fatal(err)
					}
					want := min(full, (len(g.Tokens)-1)/ebt*ebt) // the hit cap keeps the last token to compute
					switch r := g.Last; {
					case swap && (r.Tokens.Of(kvtier.GPU) != 0 || r.Tokens.Of(kvtier.Pinned) != want || g.LastOut.ValidTokens != want):
						t.Fatalf("seq %d resumed after a swap of %d tokens: %+v, outcome %+v", g.Seq, want, r, g.LastOut)
					case !swap && r.Tokens.Of(kvtier.GPU) != want:
						t.Fatalf("seq %d resumed after a free of %d committed tokens: %+v", g.Seq, want, r)
					}
					if err := g.Prefill(ctx); err != nil {
						t.Fatal(err)
					}
					if err := g.Decode(ctx, 2); err != nil {
						t.Fatal(err)
					}
					if err := g.Finish(ctx); err != nil {
						t.Fatal(err)
					}
					if err := g.Check(); err != nil {
						t.Fatal(err)
					}
					after := g.Tally
					after.Admits -= before.Admits
					for i, n := range before.Promised {
						after.Promised[i] -= n
					}
					after.Loaded -= before.Loaded
					resumed.Add(after)
					tally.Add(g.Tally)
				}
				if err := enginetest.CheckNoLeaks(ctx, m); err != nil {
					t.Fatal(err)
				}
				if swap && (resumed.Promised.Of(kvtier.Pinned) == 0 || resumed.Loaded == 0) || !swap && resumed.Promised.Of(kvtier.GPU) == 0 {
					t.Fatalf("resumptions did not hit the tier under test: %v", resumed)
				}
				t.Logf("resumptions: %v; all: %v", resumed, tally)
			})
		}
	}
}

// TestReferenceEngineChunkedPrefill: prefill in chunks that do not align
// with blocks, with a Commit after each, under every ingestion policy. Two
// sequences of one prompt are in flight at once: the second, admitted after
// the first computed a chunk but before it committed it, hits nothing (and
// nothing was written down); a third, admitted after the commit, hits
// exactly the committed full blocks. Then random requests, the GPU emptied,
// and more requests, which load from pinned memory. Every logit matches.
func TestReferenceEngineChunkedPrefill(t *testing.T) {
	for _, ing := range []kvtier.Ingestion{kvtier.IngestEvict, kvtier.IngestAll, kvtier.IngestHot} {
		t.Run("ingestion="+ing.String(), func(t *testing.T) {
			ctx := engineCtx(t)
			const gpuBlocks = 40
			cfg := engineConfig(t, gpuBlocks, 64, layouts[int(ing)%2])
			cfg.Ingestion = ing
			m := mustNew(t, cfg)
			defer mustClose(t, m)
			model := engineModel(t)
			p := enginetest.NewPrompts(uint64(31+int(ing)), refengine.TinyConfig.Vocab, ebt, 4)

			e := &enginetest.Engine{M: m, Model: model, Chunk: 3}
			prompt := p.Unique(5*ebt + 2)
			a, b, c := e.NewGen(1, prompt, ""), e.NewGen(2, prompt, ""), e.NewGen(3, prompt, "")
			if err := a.Admit(ctx); err != nil {
				t.Fatal(err)
			}
			if err := a.Compute(2*ebt + 1); err != nil { // written, not committed
				t.Fatal(err)
			}
			if err := b.Admit(ctx); err != nil {
				t.Fatal(err)
			}
			if r := b.Last; r.Tokens.Sum() != 0 {
				t.Fatalf("a sequence hit another's uncommitted blocks: %+v", r)
			}
			if err := m.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			if pr, err := m.Exists(ctx, prompt, ""); err != nil || pr != (kvtier.Presence{}) {
				t.Fatalf("uncommitted blocks are visible: %+v (%v)", pr, err)
			}
			if err := a.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			if err := c.Admit(ctx); err != nil {
				t.Fatal(err)
			}
			if r := c.Last; r.Tokens.Of(kvtier.GPU) != 2*ebt {
				t.Fatalf("admitted after a commit of %d tokens, a sequence hit %+v, want %d GPU tokens", 2*ebt+1, r, 2*ebt)
			}
			// All three finish, chunk by chunk, interleaved.
			gens := []*enginetest.Gen{a, b, c}
			for done := 0; done < len(gens); {
				done = 0
				for _, g := range gens {
					if g.Prefilled() {
						done++
						continue
					}
					if _, err := g.PrefillChunk(ctx); err != nil {
						t.Fatal(err)
					}
				}
			}
			for _, g := range gens {
				if err := g.Decode(ctx, 2); err != nil {
					t.Fatal(err)
				}
				if err := g.Finish(ctx); err != nil {
					t.Fatal(err)
				}
				if err := g.Check(); err != nil {
					t.Fatal(err)
				}
			}

			var tally enginetest.Tally
			for i := range 24 {
				e := &enginetest.Engine{M: m, Model: model, Chunk: 1 + i%5}
				tally.Add(serveChecked(t, ctx, e, p, uint64(100+i), 1, 2, 0))
			}
			if ing == kvtier.IngestAll {
				// Written through as committed: more blocks went down
				// than were evicted.
				if err := m.Flush(ctx); err != nil {
					t.Fatal(err)
				}
				if st, err := m.Stats(ctx); err != nil || st.Tier(kvtier.GPU).Offloaded <= st.Tier(kvtier.GPU).Evictions {
					t.Fatalf("IngestAll wrote no more than the evicted blocks down: %v (%v)", st.Tier(kvtier.GPU), err)
				}
			}
			if err := enginetest.EvictGPU(ctx, m, p, 1<<40, gpuBlocks); err != nil {
				t.Fatal(err)
			}
			if err := m.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			var after enginetest.Tally
			for i, s := range p.Stems {
				e := &enginetest.Engine{M: m, Model: model, Chunk: 2 + i}
				g := e.NewGen(uint64(200+i), append(append([]int64(nil), s...), p.Unique(3)...), "")
				if err := g.Run(ctx, 2); err != nil {
					t.Fatal(err)
				}
				if err := g.Check(); err != nil {
					t.Fatal(err)
				}
				after.Add(g.Tally)
			}
			if err := enginetest.CheckNoLeaks(ctx, m); err != nil {
				t.Fatal(err)
			}
			if tally.Promised.Of(kvtier.GPU) == 0 || after.Promised.Of(kvtier.Pinned) == 0 || after.Loaded == 0 {
				t.Fatalf("GPU hits or pinned loads missing: before eviction %v; after %v", tally, after)
			}
			t.Logf("before eviction: %v; after: %v", tally, after)
		})
	}
}

// TestReferenceEngineAbort: a request computes its prompt, fills its blocks
// with garbage, and is freed before any commit (under IngestAll, which writes
// committed blocks down at once): nothing of it is cached on any tier, and
// the same prompt is then computed afresh. One aborted after a first chunk's
// commit leaves exactly that chunk's full blocks.
func TestReferenceEngineAbort(t *testing.T) {
	ctx := engineCtx(t)
	cfg := engineConfig(t, 32, 32, layouts[0])
	cfg.Ingestion = kvtier.IngestAll
	m := mustNew(t, cfg)
	defer mustClose(t, m)
	model := engineModel(t)
	p := enginetest.NewPrompts(41, refengine.TinyConfig.Vocab, ebt, 2)
	for i, chunk := range []int{0, 2*ebt + 1} {
		e := &enginetest.Engine{M: m, Model: model, Chunk: chunk}
		prompt := p.Unique(5*ebt + 1)
		g := e.NewGen(uint64(10*i+1), prompt, "")
		if err := g.Admit(ctx); err != nil {
			t.Fatal(err)
		}
		kept := 0
		if chunk > 0 {
			if _, err := g.PrefillChunk(ctx); err != nil {
				t.Fatal(err)
			}
			kept = chunk / ebt * ebt
		}
		if err := g.Compute(len(prompt)); err != nil {
			t.Fatal(err)
		}
		if err := g.Abort(ctx, true /* garbage */); err != nil {
			t.Fatal(err)
		}
		if err := m.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		pr, err := m.Exists(ctx, prompt, "")
		if err != nil || pr.Tokens.Of(kvtier.GPU) != kept || pr.Tokens.Of(kvtier.Pinned) > kept || pr.Tokens.Of(kvtier.Disk) != 0 {
			t.Fatalf("after an abort with %d tokens committed: %+v (%v)", kept, pr, err)
		}
		again := e.NewGen(uint64(10*i+2), prompt, "")
		if err := again.Run(ctx, 2); err != nil {
			t.Fatal(err)
		}
		if err := again.Check(); err != nil {
			t.Fatal(err)
		}
		if again.Last.Tokens.Of(kvtier.GPU) != kept {
			t.Fatalf("the same prompt after the abort hit %+v, want %d GPU tokens", again.Last, kept)
		}
	}
	if err := enginetest.CheckNoLeaks(ctx, m); err != nil {
		t.Fatal(err)
	}
}
