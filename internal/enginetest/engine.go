package enginetest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/kvtier/kvtier"
	"github.com/kvtier/kvtier/policy"
	"github.com/kvtier/kvtier/refengine"
)

// Engine is a serving engine's configuration: the Manager, the model and how
// it prefills. It is read-only once its Gens run, so several goroutines may
// share one.
type Engine struct {
	M     *kvtier.Manager
	Model *refengine.Model
	// LoadTimeout, when > 0, gives every allocation a load deadline this
	// long after it is made (AllocRequest.LoadDeadline), in place of the
	// Manager's.
	LoadTimeout time.Duration
	// Chunk, when > 0, prefills at most Chunk tokens per forward pass and
	// commits after each (chunked prefill); 0 prefills in one pass.
	Chunk int
	// Interfere, when set, gives the context of each state-changing Manager
	// call (op names it). A call it makes fail with kvtier.ErrCanceled
	// must have had no effect: the Gen counts it and makes the same call
	// again with its own context. cancel is called after the call.
	Interfere func(op string, ctx context.Context) (cctx context.Context, cancel func())

	// NoClass finishes a request with a plain free. By default Finish
	// first commits, with no new tokens, the request's class
	// (kvtier.CommitItem.Class: policy.OutputClass of the tokens it
	// decoded), as an engine that knows its output length then does: the
	// class only steers the lower tiers' eviction and must never change a
	// served byte.
	NoClass bool

	// Negative controls: each breaks the engine as a real one could be
	// broken, for tests that prove the checks catch it.

	// TrustAlloc takes the tokens Allocate promised (GPU + lower tiers) as
	// valid and keeps the allocation's block table, ignoring the load
	// outcome.
	TrustAlloc bool
	// SkipCommit never commits: nothing the engine computes is ever a hit.
	SkipCommit bool
	// WrapKV, when set, wraps every Gen's store.
	WrapKV func(refengine.KVStore) refengine.KVStore
}

// Tally counts what a Gen's admissions got, in tokens (Late, Failed, Evicted
// and Mismatch in blocks, as OnboardOutcome counts them), and the calls
// Interfere canceled.
type Tally struct {
	Admits                          int
	Promised                        kvtier.TierTokens // tokens each allocation was promised, by tier
	Loaded                          int               // tokens that arrived from a lower tier (valid beyond the GPU hit)
	Computed                        int               // tokens the engine computed
	Late, Failed, Evicted, Mismatch int
	Swapped, Recomputed, Aborted    int // preemptions by swap, by recompute, and aborts
	Canceled                        int // calls Interfere canceled, redone
	Applied                         int // calls whose context Interfere canceled that were applied anyway
}

// Add adds o to t.
func (t *Tally) Add(o Tally) {
	t.Admits += o.Admits
	for i, n := range o.Promised {
		t.Promised[i] += n
	}
	t.Loaded += o.Loaded
	t.Computed += o.Computed
	t.Late += o.Late
	t.Failed += o.Failed
	t.Evicted += o.Evicted
	t.Mismatch += o.Mismatch
	t.Swapped += o.Swapped
	t.Recomputed += o.Recomputed
	t.Aborted += o.Aborted
	t.Canceled += o.Canceled
	t.Applied += o.Applied
}

func (t Tally) String() string {
	return fmt.Sprintf("%d admits: tokens promised %v, %d loaded, %d computed; blocks late %d, failed %d, evicted %d, mismatch %d; swapped %d, recomputed %d, aborted %d; canceled %d, applied after cancel %d",
		t.Admits, t.Promised, t.Loaded, t.Computed, t.Late, t.Failed, t.Evicted, t.Mismatch,
		t.Swapped, t.Recomputed, t.Aborted, t.Canceled, t.Applied)
}

// row is one row of logits the engine computed: the distribution of the
// token after position pos.
type row struct {
	pos    int
	logits []float32
}

// Gen is one request through the engine: its sequence id, its tokens (the
// prompt, then every token decoded), and the logits it computed. A Gen is
// used by one goroutine.
type Gen struct {
	e      *Engine
	Seq    uint64
	Salt   string
	Tokens []int64
	// Decoded counts the tokens Decode appended.
	Decoded int
	// Last is the admission's allocation and outcome.
	Last    kvtier.AllocResult
	LastOut kvtier.OnboardOutcome
	Tally   Tally

	live      bool
	computed  int // leading tokens of Tokens whose KV is in the blocks
	committed int // leading tokens committed (or found valid at admission)
	kv        *KV
	store     refengine.KVStore
	rows      []row
}

// NewGen returns a request for prompt under seq and salt; nothing is
// allocated until Admit.
func (e *Engine) NewGen(seq uint64, prompt []int64, salt string) *Gen {
	return &Gen{e: e, Seq: seq, Salt: salt, Tokens: append([]int64(nil), prompt...)}
}

// Live reports whether the sequence is allocated.
func (g *Gen) Live() bool { return g.live }

// Computed returns how many leading tokens hold KV while the Gen is live.
func (g *Gen) Computed() int { return g.computed }

// call runs f under the engine's Interfere context, if any; a call it
// cancels before it took effect (kvtier.ErrCanceled) is counted and made
// again under ctx.
func (g *Gen) call(ctx context.Context, op string, f func(context.Context) error) error {
	if g.e.Interfere == nil {
		return f(ctx)
	}
	cctx, cancel := g.e.Interfere(op, ctx)
	err := f(cctx)
	canceled := cctx.Err() != nil
	cancel()
	switch {
	case errors.Is(err, kvtier.ErrCanceled):
		g.Tally.Canceled++
		return f(ctx)
	case canceled && err == nil:
		g.Tally.Applied++
	}
	return err
}

// Admit allocates the Gen's tokens, waits for the loads and takes the valid
// prefix. The hit is capped one token short of the sequence, so the last
// token is always computed and gives the next token's logits.
func (g *Gen) Admit(ctx context.Context) error {
	if g.live {
		return fmt.Errorf("enginetest: seq %d admitted twice", g.Seq)
	}
	req := kvtier.AllocRequest{Seq: g.Seq, Tokens: g.Tokens, Salt: g.Salt, MaxHitTokens: len(g.Tokens) - 1}
	if req.MaxHitTokens == 0 {
		req.MaxHitTokens = -1 // a one-token prompt serves none: 0 would mean no cap
	}
	if g.e.LoadTimeout > 0 {
		req.LoadDeadline = time.Now().Add(g.e.LoadTimeout)
	}
	var r kvtier.AllocResult
	err := g.call(ctx, "allocate", func(ctx context.Context) (err error) {
		r, err = g.e.M.Allocate(ctx, req)
		return err
	})
	if err != nil {
		return fmt.Errorf("seq %d: allocate: %w", g.Seq, err)
	}
	g.live = true
	var out kvtier.OnboardOutcome
	select {
	case <-r.Ready.Done():
		out = r.Ready.Outcome()
	case <-ctx.Done():
		return fmt.Errorf("seq %d: Ready never completed: %w", g.Seq, ctx.Err())
	}
	g.Last, g.LastOut = r, out
	t := &g.Tally
	t.Admits++
	for i, n := range r.Tokens {
		t.Promised[i] += n
	}
	t.Loaded += out.ValidTokens - r.Tokens.Of(kvtier.GPU)
	t.Late += out.Late
	t.Failed += out.Failed
	t.Evicted += out.Evicted
	t.Mismatch += out.Mismatch
	table := r.Blocks
	g.computed = out.ValidTokens
	if out.Blocks != nil && !g.e.TrustAlloc {
		table = out.Blocks
	}
	if g.e.TrustAlloc {
		g.computed = r.Tokens.Sum()
	}
	if g.computed >= len(g.Tokens) || g.computed < 0 {
		return fmt.Errorf("seq %d: %d of %d tokens valid: the hit cap did not hold (%+v, %+v)", g.Seq, g.computed, len(g.Tokens), r, out)
	}
	g.committed = g.computed
	g.kv = NewKV(g.e.M, table)
	g.store = g.kv
	if g.e.WrapKV != nil {
		g.store = g.e.WrapKV(g.kv)
	}
	return nil
}

// Compute runs the model over the next n tokens (at most the rest of the
// sequence) and writes their KV, without committing.
func (g *Gen) Compute(n int) error {
	if !g.live {
		return fmt.Errorf("enginetest: seq %d computes while not admitted", g.Seq)
	}
	end := min(g.computed+n, len(g.Tokens))
	if end <= g.computed {
		return nil
	}
	logits, err := g.e.Model.Forward(g.store, g.Tokens[g.computed:end], g.computed)
	if err != nil {
		return fmt.Errorf("seq %d: forward [%d,%d): %w", g.Seq, g.computed, end, err)
	}
	for i, l := range logits {
		g.rows = append(g.rows, row{pos: g.computed + i, logits: l})
	}
	g.Tally.Computed += end - g.computed
	g.computed = end
	return nil
}

// Commit commits every token computed so far.
func (g *Gen) Commit(ctx context.Context) error {
	if g.e.SkipCommit {
		return nil
	}
	n := g.computed
	if err := g.call(ctx, "commit", func(ctx context.Context) error { return g.e.M.Commit(ctx, g.Seq, n) }); err != nil {
		return fmt.Errorf("seq %d: commit %d: %w", g.Seq, n, err)
	}
	g.committed = n
	return nil
}

// Prefilled reports whether every token holds KV.
func (g *Gen) Prefilled() bool { return g.live && g.computed == len(g.Tokens) }

// PrefillChunk computes and commits the next chunk (Engine.Chunk tokens, or
// the rest). It reports whether the prefill is done.
func (g *Gen) PrefillChunk(ctx context.Context) (bool, error) {
	n := len(g.Tokens)
	if g.e.Chunk > 0 {
		n = g.e.Chunk
	}
	if err := g.Compute(n); err != nil {
		return false, err
	}
	if err := g.Commit(ctx); err != nil {
		return false, err
	}
	return g.Prefilled(), nil
}

// Prefill computes the rest of the sequence, chunk by chunk.
func (g *Gen) Prefill(ctx context.Context) error {
	for {
		done, err := g.PrefillChunk(ctx)
		if err != nil || done {
			return err
		}
	}
}

// Next returns the token the engine decodes next: the argmax of the last
// position's logits. The Gen must be prefilled.
func (g *Gen) Next() int64 {
	last := len(g.Tokens) - 1
	for i := len(g.rows) - 1; i >= 0; i-- {
		if g.rows[i].pos == last {
			return refengine.Argmax(g.rows[i].logits)
		}
	}
	panic(fmt.Sprintf("enginetest: seq %d has no logits for position %d", g.Seq, last))
}

// Decode decodes n tokens: each is appended, computed and committed.
func (g *Gen) Decode(ctx context.Context, n int) error {
	for range n {
		if !g.Prefilled() {
			return fmt.Errorf("enginetest: seq %d decodes before its prefill is done", g.Seq)
		}
		tok := g.Next()
		var blocks []kvtier.BlockID
		err := g.call(ctx, "append", func(ctx context.Context) (err error) {
			blocks, err = g.e.M.Append(ctx, g.Seq, []int64{tok})
			return err
		})
		if err != nil {
			return fmt.Errorf("seq %d: append: %w", g.Seq, err)
		}
		g.kv.Table = append(g.kv.Table, blocks...)
		g.Tokens = append(g.Tokens, tok)
		g.Decoded++
		if err := g.Compute(1); err != nil {
			return err
		}
		if err := g.Commit(ctx); err != nil {
			return err
		}
	}
	return nil
}

// free frees (or swaps out) the sequence.
func (g *Gen) free(ctx context.Context, swap bool) error {
	if !g.live {
		return fmt.Errorf("enginetest: seq %d freed while not admitted", g.Seq)
	}
	op := "free"
	if swap {
		op = "swap"
	}
	err := g.call(ctx, op, func(ctx context.Context) error {
		if !swap {
			return g.e.M.Free(ctx, g.Seq)
		}
		errs, err := g.e.M.Swap(ctx, []uint64{g.Seq})
		if err != nil {
			return err
		}
		return errs[0]
	})
	if err != nil {
		return fmt.Errorf("seq %d: %s: %w", g.Seq, op, err)
	}
	g.live, g.computed, g.committed, g.kv, g.store = false, 0, 0, nil, nil
	return nil
}

// Preempt ends the sequence's allocation mid-request, by Swap or by Free (to
// recompute); a later Admit resumes it from whatever the tiers still hold.
func (g *Gen) Preempt(ctx context.Context, swap bool) error {
	if swap {
		g.Tally.Swapped++
	} else {
		g.Tally.Recomputed++
	}
	return g.free(ctx, swap)
}

// Abort frees the sequence; the caller did not commit what it wrote since
// the last commit, which must be discarded. With garbage set, it first fills
// every block from the committed prefix on with bytes that are no one's KV:
// a cache that kept them would change a later request's logits.
func (g *Gen) Abort(ctx context.Context, garbage bool) error {
	if garbage && g.live {
		bt := g.e.M.BlockTokens()
		buf := make([]byte, g.e.M.Layout().BlockBytes())
		for i := range buf {
			buf[i] = byte(i*7 + int(g.Seq))
		}
		for _, b := range g.kv.Table[g.committedBlocks(bt):] {
			if err := g.e.M.Arena().WriteBlock(int(b), 0, buf); err != nil {
				return fmt.Errorf("seq %d: garbage: %w", g.Seq, err)
			}
		}
	}
	g.Tally.Aborted++
	return g.free(ctx, false)
}

// committedBlocks is how many blocks the last Commit (or the admission's
// valid prefix) covered in full.
func (g *Gen) committedBlocks(bt int) int {
	if g.e.SkipCommit {
		return 0
	}
	return g.committed / bt
}

// Finish frees the sequence at the end of the request, after giving it its
// class (see Engine.NoClass).
func (g *Gen) Finish(ctx context.Context) error {
	if g.live && !g.e.NoClass && !g.e.SkipCommit {
		item := kvtier.CommitItem{Seq: g.Seq, Class: policy.OutputClass(g.Decoded)}
		err := g.call(ctx, "class", func(ctx context.Context) error {
			errs, err := g.e.M.CommitBatch(ctx, []kvtier.CommitItem{item})
			if err != nil {
				return err
			}
			return errs[0]
		})
		if err != nil {
			return fmt.Errorf("seq %d: class commit: %w", g.Seq, err)
		}
	}
	return g.free(ctx, false)
}

// Run serves the whole request: admit, prefill, decode n tokens, finish.
func (g *Gen) Run(ctx context.Context, n int) error {
	if err := g.Admit(ctx); err != nil {
		return err
	}
	if err := g.Prefill(ctx); err != nil {
		return err
	}
	if err := g.Decode(ctx, n); err != nil {
		return err
	}
	return g.Finish(ctx)
}

// Check recomputes the Gen's tokens with no cache and compares every row of
// logits the engine computed, bit for bit. The decoded tokens are the
// argmax of rows the engine computed, so a wrong row also changes the
// sequence the reference recomputes.
func (g *Gen) Check() error {
	want, err := g.e.Model.Reference(g.Tokens)
	if err != nil {
		return fmt.Errorf("seq %d: reference: %w", g.Seq, err)
	}
	for _, r := range g.rows {
		for j, x := range r.logits {
			if math.Float32bits(x) != math.Float32bits(want[r.pos][j]) {
				return fmt.Errorf("seq %d: position %d logit %d: %v with the cache, %v recomputed", g.Seq, r.pos, j, x, want[r.pos][j])
			}
		}
	}
	if len(g.rows) == 0 {
		return fmt.Errorf("seq %d: no logits computed", g.Seq)
	}
	return nil
}
