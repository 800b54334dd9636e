package enginetest

import (
	"context"
	"fmt"
	"math/rand/v2"
)

// Mixed serves rounds of two interleaved requests drawn from p, as one
// goroutine of a concurrent test: both are admitted, then prefilled chunk by
// chunk in turn (Chunk drawn from 0, whole, to 5 per round), and the first is
// at random aborted after its first chunk (with garbage in its uncommitted
// blocks), preempted by swap or by recompute and readmitted, or left alone;
// then each decodes 1 to 3 tokens, finishes, and is checked against the
// recompute. Sequence ids are id<<32 plus a count, so goroutines with
// distinct ids never share one; seed fixes the goroutine's choices. It
// returns what its requests got and the first error.
func Mixed(ctx context.Context, base *Engine, p *Prompts, id, seed uint64, rounds int) (Tally, error) {
	rng := rand.New(rand.NewPCG(id, seed))
	var tally Tally
	for r := range rounds {
		e := *base
		e.Chunk = rng.IntN(6)
		gens := []*Gen{
			e.NewGen(id<<32|uint64(2*r+1), p.Next(), ""),
			e.NewGen(id<<32|uint64(2*r+2), p.Next(), ""),
		}
		for _, g := range gens {
			if err := g.Admit(ctx); err != nil {
				return tally, err
			}
		}
		action := rng.IntN(4) // 0: abort the first after a chunk; 1: swap it; 2: recompute it; 3: neither
		for step := 0; !allPrefilled(gens); step++ {
			for i, g := range gens {
				if g.Prefilled() {
					continue
				}
				if _, err := g.PrefillChunk(ctx); err != nil {
					return tally, err
				}
				if i != 0 || step != 0 || action == 3 || g.Prefilled() {
					continue
				}
				switch action {
				case 0:
					if err := g.Compute(1); err != nil {
						return tally, err
					}
					if err := g.Abort(ctx, true /* garbage */); err != nil {
						return tally, err
					}
					tally.Add(g.Tally)
					gens = gens[1:]
				case 1, 2:
					if err := g.Preempt(ctx, action == 1 /* swap */); err != nil {
						return tally, err
					}
					if err := g.Admit(ctx); err != nil {
						return tally, err
					}
				}
				break // gens may have changed
			}
		}
		for _, g := range gens {
			if err := g.Decode(ctx, 1+rng.IntN(3)); err != nil {
				return tally, err
			}
			if err := g.Finish(ctx); err != nil {
				return tally, err
			}
			if err := g.Check(); err != nil {
				return tally, fmt.Errorf("%w (tally %v)", err, g.Tally)
			}
			tally.Add(g.Tally)
		}
	}
	return tally, nil
}

func allPrefilled(gens []*Gen) bool {
	for _, g := range gens {
		if !g.Prefilled() {
			return false
		}
	}
	return true
}
