package schedcache

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/kvtier/kvtier"
	"github.com/kvtier/kvtier/policy"
	"github.com/kvtier/kvtier/scheduler"
)

// Options tunes a Cache. The zero value is valid.
type Options struct {
	// Sync makes every call finish its tier work before it returns: Allocate
	// waits for each allocation's copies (its Ready), and Allocate, Append
	// and Free flush the Manager, so every tier write a call started has
	// finished before the scheduler's next call. Under the scheduler's logical
	// clock replays become repeatable (loads still take their modelled time);
	// under the wall clock it would hide the copies' real time. See the
	// package doc. If the context ends while Allocate waits, the sequences
	// it allocated are freed before it returns the error; if a flush fails,
	// the call's own change (an append, a commit, a free) stands and the
	// error says the copies may not have finished: do not retry the step.
	Sync bool
	// NoClass frees finished sequences without telling the Manager their
	// class. By default FreeFinished gives each finished request's blocks
	// its class, policy.OutputClass of the tokens it generated
	// (kvtier.CommitItem.Class), for the lower tiers' eviction policies.
	NoClass bool
}

// Cache is a scheduler.Cache over a kvtier Manager. Like the scheduler that
// drives it, it is not safe for concurrent use. It does not own the Manager:
// the caller closes it after the run.
type Cache struct {
	m    *kvtier.Manager
	opts Options

	// scratch, reused between calls (the Manager copies what it keeps)
	reqs    []kvtier.AllocRequest
	items   []kvtier.AppendItem
	toks    []int64
	seqs    []uint64
	commits []kvtier.CommitItem
	seen    map[scheduler.SeqID]bool // FreeFinished's check for a sequence named twice
}

var _ scheduler.FinishCache = (*Cache)(nil)

// New returns a Cache over m. m must not be nil.
func New(m *kvtier.Manager, opts Options) *Cache {
	if m == nil {
		panic("kvtier: schedcache.New: nil Manager")
	}
	return &Cache{m: m, opts: opts}
}

// Manager returns the Manager the Cache drives.
func (c *Cache) Manager() *kvtier.Manager { return c.m }

// noBlocks maps the Manager's "no space" error to scheduler.ErrNoBlocks,
// keeping the original in the chain; other errors pass unchanged.
func noBlocks(err error) error {
	if err != nil && errors.Is(err, kvtier.ErrNoSpace) {
		return fmt.Errorf("schedcache: %w: %w", scheduler.ErrNoBlocks, err)
	}
	return err
}

// keepOne is the MaxHitTokens that leaves a sequence of n tokens one to
// compute, as the engine contract asks (README, "Keep a token to compute"):
// n-1, rounded down to whole blocks by the Manager, so a fully cached
// prompt of whole blocks recomputes its last block, as vLLM does, instead of
// computing its last token into a committed block other sequences share. A
// one-token sequence passes -1 (0 means no cap).
func keepOne(n int) int {
	if n <= 1 {
		return -1
	}
	return n - 1
}

// Allocate implements scheduler.Cache with one Manager.AllocateInOrder:
// the scheduler admits first come, first served, so once a sequence gets no
// blocks the ones after it are not tried (they would be freed again, their
// loads started for nothing).
func (c *Cache) Allocate(ctx context.Context, reqs []scheduler.AllocReq) ([]scheduler.AllocOutcome, error) {
	c.reqs = c.reqs[:0]
	for _, r := range reqs {
		c.reqs = append(c.reqs, kvtier.AllocRequest{Seq: uint64(r.Seq), Tokens: r.Tokens, Salt: r.Salt, MaxHitTokens: keepOne(len(r.Tokens))})
	}
	res, err := c.m.AllocateInOrder(ctx, c.reqs)
	clear(c.reqs) // drop references to the scheduler's token slices
	if err != nil {
		return nil, fmt.Errorf("schedcache: allocate %d sequences: %w", len(reqs), err)
	}
	if len(res) != len(reqs) {
		return nil, fmt.Errorf("schedcache: allocate: %d results for %d requests", len(res), len(reqs))
	}
	// A context that ended while the batch waited (a request parked for
	// blocks is then answered ErrCanceled, the others applied) fails the
	// call: the scheduler takes that as allocating nothing.
	if err := ctx.Err(); err != nil {
		return nil, c.undoAllocate(ctx, err, reqs, res)
	}
	if c.opts.Sync {
		for i := range res {
			if r := &res[i]; r.Err == nil && r.Ready != nil {
				select {
				case <-r.Ready.Done():
				case <-ctx.Done():
					return nil, c.undoAllocate(ctx, ctx.Err(), reqs, res)
				}
			}
		}
	}
	if err := c.sync(ctx); err != nil {
		return nil, c.undoAllocate(ctx, err, reqs, res)
	}
	outs := make([]scheduler.AllocOutcome, len(res))
	for i := range res {
		outs[i] = outcome(&res[i])
	}
	return outs, nil
}

// undoAllocate frees the sequences a batch allocated when the call fails
// after the Manager applied it (cause: ctx ended while it waited, or Sync's
// flush failed): the scheduler takes the failed call as allocating nothing,
// so leaving them would leak their blocks and refuse their ids later. The
// free runs past ctx's end, bounded by undoTimeout.
func (c *Cache) undoAllocate(ctx context.Context, cause error, reqs []scheduler.AllocReq, res []kvtier.AllocResult) error {
	var seqs []uint64
	for i := range res {
		if res[i].Err == nil {
			seqs = append(seqs, uint64(reqs[i].Seq))
		}
	}
	uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), undoTimeout)
	defer cancel()
	errs, err := c.m.FreeBatch(uctx, seqs)
	if err == nil {
		err = errors.Join(errs...)
	}
	if err != nil {
		return fmt.Errorf("schedcache: allocate: %w; freeing the %d sequences it allocated: %w", cause, len(seqs), err)
	}
	return fmt.Errorf("schedcache: allocate: %w (the %d sequences it allocated were freed)", cause, len(seqs))
}

// undoTimeout bounds undoAllocate's free, which runs after the caller's
// context ended.
const undoTimeout = 10 * time.Second

// outcome turns one Manager result into the scheduler's view of it.
func outcome(r *kvtier.AllocResult) scheduler.AllocOutcome {
	if r.Err != nil {
		return scheduler.AllocOutcome{Err: noBlocks(r.Err)}
	}
	o := scheduler.AllocOutcome{GPUTokens: r.Tokens.Of(kvtier.GPU), PinnedTokens: r.Tokens.Of(kvtier.Pinned),
		DiskTokens: r.Tokens.Of(kvtier.Disk), RemoteTokens: r.Tokens.Of(kvtier.Remote)}
	lower := r.Tokens.Below()
	if lower == 0 || r.Ready == nil {
		// Nothing loads. Ready may still wait on the offload of blocks this
		// allocation evicted; the scheduler writes no KV, so it need not wait.
		return o
	}
	ready, gpu := r.Ready, o.GPUTokens
	o.Ready = ready.Done()
	o.Loaded = func() int { return min(max(ready.Outcome().ValidTokens-gpu, 0), lower) }
	return o
}

// Append implements scheduler.Cache with one Manager.AppendBatch. Lengths
// that differ are refused with ErrBadArgs, changing nothing.
func (c *Cache) Append(ctx context.Context, seqs []scheduler.SeqID, tokens []int64) ([]error, error) {
	if len(seqs) != len(tokens) {
		return nil, fmt.Errorf("schedcache: append: %d sequences, %d tokens: %w", len(seqs), len(tokens), ErrBadArgs)
	}
	c.items = c.items[:0]
	c.toks = append(c.toks[:0], tokens...)
	for i, s := range seqs {
		c.items = append(c.items, kvtier.AppendItem{Seq: uint64(s), Tokens: c.toks[i : i+1 : i+1]})
	}
	res, err := c.m.AppendBatch(ctx, c.items)
	if err != nil {
		return nil, fmt.Errorf("schedcache: append to %d sequences: %w", len(seqs), err)
	}
	if len(res) != len(seqs) {
		return nil, fmt.Errorf("schedcache: append: %d results for %d sequences", len(res), len(seqs))
	}
	errs := make([]error, len(res))
	for i := range res {
		errs[i] = noBlocks(res[i].Err)
	}
	return errs, c.sync(ctx)
}

// Commit implements scheduler.Cache with one Manager.CommitBatch. Lengths
// that differ are refused with ErrBadArgs, changing nothing.
func (c *Cache) Commit(ctx context.Context, seqs []scheduler.SeqID, computed []int) ([]error, error) {
	if len(seqs) != len(computed) {
		return nil, fmt.Errorf("schedcache: commit: %d sequences, %d counts: %w", len(seqs), len(computed), ErrBadArgs)
	}
	c.commits = c.commits[:0]
	for i, s := range seqs {
		c.commits = append(c.commits, kvtier.CommitItem{Seq: uint64(s), Tokens: computed[i]})
	}
	errs, err := c.m.CommitBatch(ctx, c.commits)
	if err != nil {
		return nil, fmt.Errorf("schedcache: commit %d sequences: %w", len(seqs), err)
	}
	return errs, c.sync(ctx)
}

// Free implements scheduler.Cache with one Manager.FreeBatch. The first
// per-sequence error, if any, is returned (joined with the others).
func (c *Cache) Free(ctx context.Context, seqs []scheduler.SeqID) error {
	errs, err := c.m.FreeBatch(ctx, c.ids(seqs))
	if err != nil {
		return fmt.Errorf("schedcache: free %d sequences: %w", len(seqs), err)
	}
	if err := seqErrs("free", seqs, errs); err != nil {
		return err
	}
	return c.sync(ctx)
}

// ids copies seqs into c.seqs, as the Manager names sequences.
func (c *Cache) ids(seqs []scheduler.SeqID) []uint64 {
	c.seqs = c.seqs[:0]
	for _, s := range seqs {
		c.seqs = append(c.seqs, uint64(s))
	}
	return c.seqs
}

// seqErrs joins the per-sequence errors of op on seqs, nil when there are
// none.
func seqErrs(op string, seqs []scheduler.SeqID, errs []error) error {
	var bad []error
	for i, e := range errs {
		if e != nil {
			bad = append(bad, fmt.Errorf("sequence %d: %w", seqs[i], e))
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("schedcache: %s: %w", op, errors.Join(bad...))
	}
	return nil
}

// FreeFinished implements scheduler.FinishCache with one Manager.Step: a
// commit of no new tokens that gives each sequence its class,
// policy.OutputClass(generated[i]), then the free (Free without it when
// Options.NoClass is set). Lengths that differ, a negative count or a
// sequence named twice are refused with ErrBadArgs, changing nothing. A
// refused class commit (any error; say
// kvtier.ErrNotReady, for a sequence the scheduler recomputed while its load
// was still in flight, whose commits were refused too) only leaves the class
// unset; the free goes on. The first per-sequence error of the free, if
// any, is returned (joined with the others).
func (c *Cache) FreeFinished(ctx context.Context, seqs []scheduler.SeqID, generated []int) error {
	if len(seqs) != len(generated) {
		return fmt.Errorf("schedcache: free: %d sequences, %d output counts: %w", len(seqs), len(generated), ErrBadArgs)
	}
	if c.seen == nil {
		c.seen = map[scheduler.SeqID]bool{}
	}
	clear(c.seen)
	for i, s := range seqs {
		if generated[i] < 0 {
			return fmt.Errorf("schedcache: free: sequence %d generated %d tokens: %w", s, generated[i], ErrBadArgs)
		}
		if c.seen[s] {
			return fmt.Errorf("schedcache: free: sequence %d named twice: %w", s, ErrBadArgs)
		}
		c.seen[s] = true
	}
	if c.opts.NoClass {
		return c.Free(ctx, seqs)
	}
	c.commits = finishCommits(c.commits[:0], seqs, generated)
	res, err := c.m.Step(ctx, kvtier.StepRequest{Commit: c.commits, Free: c.ids(seqs)})
	if err != nil {
		return fmt.Errorf("schedcache: free %d sequences: %w", len(seqs), err)
	}
	if err := seqErrs("free", seqs, res.FreeErrs); err != nil {
		return err
	}
	return c.sync(ctx)
}

// finishCommits appends to dst, per finished sequence, the commit of no new
// tokens that gives it its class: policy.OutputClass of the tokens it
// generated.
func finishCommits(dst []kvtier.CommitItem, seqs []scheduler.SeqID, generated []int) []kvtier.CommitItem {
	for i, s := range seqs {
		dst = append(dst, kvtier.CommitItem{Seq: uint64(s), Class: policy.OutputClass(generated[i])})
	}
	return dst
}

// Swap implements scheduler.Cache with Manager.Swap: the sequences' full blocks
// are written down to pinned memory and the sequences freed. A Manager with no
// pinned tier answers kvtier.ErrNoLowerTier, which becomes
// scheduler.ErrUnsupported: the scheduler recomputes instead.
func (c *Cache) Swap(ctx context.Context, seqs []scheduler.SeqID) error {
	errs, err := c.m.Swap(ctx, c.ids(seqs))
	if errors.Is(err, kvtier.ErrNoLowerTier) {
		return fmt.Errorf("schedcache: swap: %w: %w", err, scheduler.ErrUnsupported)
	}
	if err != nil {
		return fmt.Errorf("schedcache: swap %d sequences: %w", len(seqs), err)
	}
	if err := seqErrs("swap", seqs, errs); err != nil {
		return err
	}
	return c.sync(ctx)
}

// Flush implements scheduler.Cache with Manager.Flush.
func (c *Cache) Flush(ctx context.Context) error {
	if err := c.m.Flush(ctx); err != nil {
		return fmt.Errorf("schedcache: flush: %w", err)
	}
	return nil
}

func (c *Cache) sync(ctx context.Context) error {
	if !c.opts.Sync {
		return nil
	}
	return c.Flush(ctx)
}
