package stress

import (
	"context"
	"fmt"

	"github.com/kvtier/kvtier"
)

// prober runs single-goroutine probes on a Manager that a stress phase has
// just left quiescent (Flush, no sequence live): exact checks of what the
// load leaves to chance, on whatever state the load left. Its prompts are
// fresh (tokens no worker sends) under a salt of their own; its sequence ids
// are its own.
type prober struct {
	m    *kvtier.Manager
	seq  uint64
	next int64 // the next fresh token
	buf  []byte
}

func newProber(m *kvtier.Manager) *prober {
	return &prober{m: m, seq: 1 << 62, next: 5 << 40, buf: make([]byte, m.Layout().BlockBytes())}
}

const probeSalt = "probe"

// fresh returns n blocks of tokens no one has sent.
func (p *prober) fresh(blocks int) []int64 {
	out := make([]int64, blocks*bt)
	for i := range out {
		out[i] = p.next
		p.next++
	}
	return out
}

// alloc allocates tokens as a new sequence, waits for its Ready and writes
// the blocks the cache did not give it; with commit it commits them all.
func (p *prober) alloc(ctx context.Context, tokens []int64, commit bool) (uint64, kvtier.AllocResult, error) {
	p.seq++
	seq := p.seq
	r, err := p.m.Allocate(ctx, kvtier.AllocRequest{Seq: seq, Tokens: tokens, Salt: probeSalt})
	if err != nil {
		return seq, r, fmt.Errorf("allocating %d tokens: %w", len(tokens), err)
	}
	select {
	case <-r.Ready.Done():
	case <-ctx.Done():
		return seq, r, fmt.Errorf("seq %d: Ready never completed: %w", seq, ctx.Err())
	}
	out := r.Ready.Outcome()
	blocks := r.Blocks
	if out.Blocks != nil {
		blocks = out.Blocks
	}
	for i := out.ValidTokens / bt; i < len(blocks); i++ {
		if err := p.m.Arena().WriteBlock(int(blocks[i]), 0, pattern(p.buf, 0, int(seq))); err != nil {
			return seq, r, err
		}
	}
	if !commit {
		return seq, r, nil
	}
	return seq, r, p.m.Commit(ctx, seq, len(tokens))
}

// onGPU returns how many leading tokens of tokens the GPU serves.
func (p *prober) onGPU(ctx context.Context, tokens []int64) (int, error) {
	pr, err := p.m.Exists(ctx, tokens, probeSalt)
	return pr.Tokens.Of(kvtier.GPU), err
}

// freeOrder checks the order in which the GPU takes free blocks: blocks
// that hold no cached KV first, then cached blocks, least recently freed
// first. It commits two prompts a1 and a2 and allocates, between them, a
// filler c that takes every other GPU block and is never committed; it
// frees a1, then c (its blocks hold nothing cached), then a2, and allocates
// a fresh prompt as large as c. Taking blocks in order, that prompt takes
// exactly c's blocks, and a1 and a2 stay hits. Were freed cached blocks
// taken first, a2 would be gone; were uncached ones taken last, a1.
func (p *prober) freeOrder(ctx context.Context) error {
	st, err := p.m.Stats(ctx)
	if err != nil {
		return err
	}
	n := st.Tier(kvtier.GPU).Blocks
	a1, a2, c := p.fresh(2), p.fresh(2), p.fresh(n-4)
	s1, _, err := p.alloc(ctx, a1, true /* commit */)
	if err != nil {
		return err
	}
	sc, _, err := p.alloc(ctx, c, false /* commit */)
	if err != nil {
		return err
	}
	s2, _, err := p.alloc(ctx, a2, true /* commit */)
	if err != nil {
		return err
	}
	for _, s := range []uint64{s1, sc, s2} {
		if err := p.m.Free(ctx, s); err != nil {
			return err
		}
	}
	sb, _, err := p.alloc(ctx, p.fresh(n-4), false /* commit */)
	if err != nil {
		return err
	}
	for i, a := range [][]int64{a1, a2} {
		got, err := p.onGPU(ctx, a)
		if err != nil {
			return err
		}
		if got != len(a) {
			return fmt.Errorf("free order: prompt a%d (freed %s) hits %d of its %d tokens on the GPU after an allocation of the %d blocks that held nothing cached: the free queue gave up cached KV first",
				i+1, [...]string{"before the uncached filler", "last"}[i], got, len(a), n-4)
		}
	}
	return p.m.Free(ctx, sb)
}

// missesObserved returns the disk tier's count of misses its eviction
// policy heard of (the index passes each sequence's computed misses on,
// from the GPU's Demand). Two Stats calls: the first returns once the
// index has handled everything the GPU sent it before (its Demand), the
// second reads the disk once it has handled what the index sent it then.
func (p *prober) missesObserved(ctx context.Context) (int, error) {
	if _, err := p.m.Stats(ctx); err != nil {
		return 0, err
	}
	st, err := p.m.Stats(ctx)
	return int(st.Tier(kvtier.Disk).Extra["misses_observed"]), err
}

// demand checks what the disk's eviction policy hears as misses (with a
// disk tier whose policy learns from them): the blocks a sequence looked
// up below, found neither in pinned memory nor on disk, and computed,
// once, at its first commit past what the cache gave it; nothing for GPU
// hits, for blocks loaded from below, for a sequence freed before a
// commit, or for a later commit.
func (p *prober) demand(ctx context.Context) error {
	base, err := p.missesObserved(ctx)
	if err != nil {
		return err
	}
	if base == 0 {
		return fmt.Errorf("demand: the disk heard of no miss under the load: does its policy learn from misses (misses_observed)?")
	}
	st, err := p.m.Stats(ctx)
	if err != nil {
		return err
	}
	n := st.Tier(kvtier.GPU).Blocks
	a, q := p.fresh(3), p.fresh(3)
	ax := append(a[:len(a):len(a)], p.fresh(1)...)
	var sa, sq, sx uint64
	type step struct {
		what string
		want int
		do   func() error
	}
	steps := []step{
		{"a fresh 3-block prompt computed and committed", 3, func() (err error) {
			sa, _, err = p.alloc(ctx, a, true /* commit */)
			return err
		}},
		{"freed", 0, func() error { return p.m.Free(ctx, sa) }},
		{"allocated again, all GPU hits, and committed", 0, func() (err error) {
			var r kvtier.AllocResult
			if sa, r, err = p.alloc(ctx, a, true /* commit */); err == nil && r.Tokens.Of(kvtier.GPU) != len(a) {
				err = fmt.Errorf("the prompt just freed hits %v, want all %d tokens on the GPU (probe setup)", r.Tokens, len(a))
			}
			if err == nil {
				err = p.m.Free(ctx, sa)
			}
			return err
		}},
		{"extended by a fresh block, committed up to its GPU hits", 0, func() (err error) {
			if sx, _, err = p.alloc(ctx, ax, false /* commit */); err == nil {
				err = p.m.Commit(ctx, sx, len(a))
			}
			return err
		}},
		{"then committed in full", 1, func() error {
			if err := p.m.Commit(ctx, sx, len(ax)); err != nil {
				return err
			}
			return p.m.Free(ctx, sx)
		}},
		{"a fresh prompt freed before any commit", 0, func() (err error) {
			if sq, _, err = p.alloc(ctx, q, false /* commit */); err == nil {
				err = p.m.Free(ctx, sq)
			}
			return err
		}},
		{"allocated again and its first block committed", 3, func() (err error) {
			if sq, _, err = p.alloc(ctx, q, false /* commit */); err == nil {
				err = p.m.Commit(ctx, sq, bt)
			}
			return err
		}},
		{"then committed in full", 0, func() error {
			if err := p.m.Commit(ctx, sq, len(q)); err != nil {
				return err
			}
			return p.m.Free(ctx, sq)
		}},
		{"evicted from the GPU by a prompt as large, never committed", 0, func() error {
			s, _, err := p.alloc(ctx, p.fresh(n), false /* commit */)
			if err != nil {
				return err
			}
			if err := p.m.Free(ctx, s); err != nil {
				return err
			}
			if err := p.m.Flush(ctx); err != nil {
				return err
			}
			if pr, err := p.m.Exists(ctx, a, probeSalt); err != nil || pr.Tokens.Of(kvtier.GPU) != 0 || pr.Tokens.Of(kvtier.Pinned) != len(a) {
				return fmt.Errorf("the evicted prompt is held %v, want pinned memory only (probe setup; %v)", pr.Tokens, err)
			}
			return nil
		}},
		{"loaded from pinned memory and committed", 0, func() (err error) {
			var r kvtier.AllocResult
			if sa, r, err = p.alloc(ctx, a, true /* commit */); err == nil && r.Tokens.Of(kvtier.Pinned) != len(a) {
				err = fmt.Errorf("the prompt in pinned memory is served %v, want all %d tokens from pinned memory (probe setup)", r.Tokens, len(a))
			}
			if err == nil {
				err = p.m.Free(ctx, sa)
			}
			return err
		}},
	}
	for _, s := range steps {
		if err := s.do(); err != nil {
			return fmt.Errorf("demand: %s: %w", s.what, err)
		}
		got, err := p.missesObserved(ctx)
		if err != nil {
			return err
		}
		if got-base != s.want {
			return fmt.Errorf("demand: %s: the disk heard of %d misses, want %d", s.what, got-base, s.want)
		}
		base = got
	}
	return nil
}
