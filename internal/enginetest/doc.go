// Package enginetest drives refengine, a real decoder-only transformer, through
// a kvtier.Manager as a serving engine does, and checks every logit it
// computed against a recompute of the whole sequence with no cache, bit for
// bit. The root package's engine tests and the stress suite share it.
//
// # Pieces
//
//   - KV is a refengine.KVStore over a sequence's block table in the Manager's
//     arena. It reads and writes one token's (layer, K or V) region at a time
//     through Arena.ReadRegion and WriteRegion, so it works under both arena
//     layouts (gpu.BlockContiguous and gpu.LayerSeparate).
//   - Engine and Gen are the serving loop of one request: Admit (Allocate, wait
//     for Ready, take the block table the outcome gives), Prefill in chunks with
//     a Commit after each, Decode (Append, forward, Commit), Preempt (Swap, or
//     Free for recompute), Abort (Free before any commit), Finish. A Gen keeps
//     every row of logits it computed; Check recomputes the sequence with
//     refengine.Reference and compares them.
//   - Prompts draws prompts that share stems, so that requests hit each
//     other's blocks.
//
// # Negative controls
//
// A test of this kind proves something only if it can fail. Engine has knobs
// that break it the way a real engine could be broken: TrustAlloc ignores the
// load outcome (uses what Allocate promised, not what arrived), SkipCommit never
// commits (nothing is ever a hit), WrapKV interposes on the store (to corrupt
// what it reads). The root package's tests turn them on and expect a failure.
//
// # Usage
//
//	e := &enginetest.Engine{M: m, Model: model, Chunk: 3}
//	g := e.NewGen(seq, prompt, "")
//	err := g.Run(ctx, 4) // admit, prefill, decode 4 tokens, free
//	err = g.Check()      // every logit equals a recompute with no cache
package enginetest
