package group

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/kvtier/kvtier"
)

// Values a rank reports in a reduction besides a token count.
const (
	// lookupFailed is a local lookup that failed: the group's hit is 0
	// (AIBrix's -1).
	lookupFailed = -1
	// abortVote is a rank that holds no sequence (its allocation failed,
	// its context ended): the group gives the request up.
	abortVote = -2
)

// Rank is one rank's side of a tensor-parallel group: its Manager and the
// group's Collective. Its group calls (Allocate, Commit, Lookup) reduce
// across the ranks, so every rank must make the same calls in the same
// order — one goroutine per rank, as with an NCCL communicator; Rank is
// not safe for concurrent use, except Stats. A group call takes part in
// its reductions even when it fails on this rank (a bad argument, a failed
// lookup, allocation or commit): it reports the failure in the reduction
// instead of returning early, so the ranks' reductions stay paired.
type Rank struct {
	cfg Config
	m   *kvtier.Manager
	log *zap.Logger
	op  uint64 // the next reduction's id; equal on every rank by the call order
	c   counters
}

// NewRank validates cfg and returns the rank. cfg is not modified.
func NewRank(cfg Config) (*Rank, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = zap.NewNop()
	}
	return &Rank{cfg: cfg, m: cfg.Manager, log: log.With(zap.Int("rank", cfg.Rank), zap.Int("group", cfg.Size))}, nil
}

// Stats returns this rank's counters; safe from any goroutine.
func (r *Rank) Stats() Stats { return r.c.snapshot(r.cfg.Rank) }

// AllocRequest is an allocation for the whole group: every rank passes the
// same prompt and the same Deadline.
type AllocRequest struct {
	// AllocRequest is the rank's request. A MaxHitTokens set there caps
	// this rank's contribution to the group's hit; LoadDeadline is ignored
	// (Deadline replaces it).
	kvtier.AllocRequest
	// Deadline bounds every rank's loads from lower tiers. Derive it once
	// (on rank 0, from the request's arrival) and pass the same instant to
	// every rank, so that a timeout is decided against one clock reading:
	// each Manager's own budget would start at its own allocation time. Zero
	// leaves each Manager's ReadDeadline settings in force. A Manager with
	// no free GPU block to put in place of a late load's blocks lets that
	// load finish late (its Ready waits for the copy): size GPUBlocks with
	// headroom. A reallocation (Allocate's step 3) keeps it, even once it
	// has passed: see the package doc.
	Deadline time.Time
}

// AllocResult answers a group allocation, on one rank.
type AllocResult struct {
	Seq uint64
	// Blocks is this rank's block table; it belongs to the caller.
	Blocks []kvtier.BlockID
	// ValidTokens leading tokens hold valid KV on every rank of the group:
	// the same number on every rank. Compute the rest, then commit.
	ValidTokens int
	// LocalHit is what this rank's Lookup found; AgreedHit the group's
	// minimum, the cap every rank allocated under.
	LocalHit, AgreedHit int
	// LocalValid is what this rank's first allocation held valid once its
	// loads ended (≤ AgreedHit); Reallocated says it held more than the
	// group and was allocated again, capped at ValidTokens.
	LocalValid  int
	Reallocated bool
	// Rounds counts the reductions on what was loaded (1 when every rank
	// loaded the agreed hit).
	Rounds int
}

// Allocate allocates req.Seq on this rank so that every rank of the group
// starts from the same valid prefix:
//
//  1. each rank looks its hit up (no side effects) and the group takes the
//     minimum, before anything is loaded (a failed lookup counts as 0);
//  2. each rank allocates with MaxHitTokens at that minimum and the shared
//     Deadline, and waits for its loads;
//  3. the group takes the minimum of what every rank holds valid (a late or
//     failed load on one rank lowers it for all); a rank holding more frees
//     its sequence and allocates it again capped at the minimum — the
//     blocks past it go back to its cache, still findable, and it gets
//     fresh ones to recompute into. Step 3 repeats until a reduction
//     leaves the minimum unchanged (it only decreases, so it ends).
//
// When any rank cannot allocate, or any rank's context ends, every rank
// frees its sequence and returns an error matching ErrAborted: the group
// holds the request on all ranks or on none.
func (r *Rank) Allocate(ctx context.Context, req AllocRequest) (AllocResult, error) {
	res, err := r.allocate(ctx, req)
	if err != nil {
		r.c.failures.Add(1)
		r.log.Warn("group allocation aborted", zap.Uint64("seq", req.Seq), zap.Error(err))
		return AllocResult{Seq: req.Seq}, err
	}
	r.c.agreements.Add(1)
	r.c.hitCost.Add(uint64(res.LocalHit - res.AgreedHit))
	r.c.loadCost.Add(uint64(res.LocalValid - res.ValidTokens))
	r.log.Debug("group allocation agreed", zap.Uint64("seq", req.Seq), zap.Int("local_hit", res.LocalHit),
		zap.Int("agreed_hit", res.AgreedHit), zap.Int("local_valid", res.LocalValid), zap.Int("valid", res.ValidTokens), zap.Int("rounds", res.Rounds))
	return res, nil
}

func (r *Rank) allocate(ctx context.Context, req AllocRequest) (AllocResult, error) {
	out := AllocResult{Seq: req.Seq}
	local := r.localHit(ctx, req.AllocRequest)
	out.LocalHit = max(local, 0)
	h, err := r.reduce(ctx, int64(local))
	if err != nil {
		return out, fmt.Errorf("kvtier: group: agreeing on the hit of sequence %d: %w", req.Seq, err)
	}
	out.AgreedHit = int(max(h, 0))
	held, v, lerr := r.load(ctx, req, out.AgreedHit)
	out.LocalValid = max(v, 0)
	prev := out.AgreedHit
	for {
		out.Rounds++
		a, err := r.reduce(ctx, int64(v))
		if err == nil && a == abortVote {
			err = ErrAborted
			if lerr != nil {
				err = fmt.Errorf("%w: %w", ErrAborted, lerr)
			}
		}
		if err != nil {
			if held != nil {
				// The request is gone everywhere: give the blocks back
				// even if ctx ended (that may be why).
				if ferr := r.m.Free(context.WithoutCancel(ctx), req.Seq); ferr != nil {
					err = errors.Join(err, ferr)
				}
			}
			return out, fmt.Errorf("kvtier: group: agreeing on the valid prefix of sequence %d: %w", req.Seq, err)
		}
		if int(a) == prev { // every rank holds exactly a
			out.Blocks, out.ValidTokens = held, int(a)
			return out, nil
		}
		prev = int(a)
		if v > prev {
			out.Reallocated = true
			r.c.reallocs.Add(1)
			if err := r.m.Free(context.WithoutCancel(ctx), req.Seq); err != nil {
				held, v, lerr = nil, abortVote, err
				continue
			}
			req.Again = true // its lookup counted at the first allocation
			held, v, lerr = r.load(ctx, req, prev)
		}
	}
}

// localHit is this rank's hit for req: tokens, lookupFailed on an error.
func (r *Rank) localHit(ctx context.Context, req kvtier.AllocRequest) int {
	tokens := req.Tokens
	if req.MaxSeqLen > 0 && len(tokens) > req.MaxSeqLen && req.Truncate {
		tokens = tokens[:req.MaxSeqLen]
	}
	lr, err := r.m.Lookup(ctx, kvtier.LookupRequest{Tokens: tokens, Salt: req.Salt, LoRA: req.LoRA})
	if err != nil {
		r.c.lookupErrs.Add(1)
		r.log.Warn("group lookup failed: reporting no hit", zap.Uint64("seq", req.Seq), zap.Error(err))
		return lookupFailed
	}
	hit := lr.Tokens.Sum()
	if bt := r.m.BlockTokens(); req.MaxHitTokens < 0 {
		hit = 0
	} else if req.MaxHitTokens > 0 {
		hit = min(hit, req.MaxHitTokens/bt*bt)
	}
	return hit
}

// load allocates req capped at limit tokens of hit under the group's
// deadline and waits for its loads. It returns the block table (nil when
// no sequence is held), the valid tokens, or abortVote and the error.
func (r *Rank) load(ctx context.Context, req AllocRequest, limit int) ([]kvtier.BlockID, int, error) {
	ar := req.AllocRequest
	ar.MaxHitTokens, ar.LoadDeadline = limit, req.Deadline
	if limit == 0 {
		ar.MaxHitTokens = -1 // 0 would mean no cap
	}
	res, err := r.m.Allocate(ctx, ar)
	if err != nil {
		return nil, abortVote, err
	}
	select {
	case <-res.Ready.Done():
	case <-ctx.Done():
		if ferr := r.m.Free(context.WithoutCancel(ctx), req.Seq); ferr != nil {
			return res.Blocks, abortVote, errors.Join(ctx.Err(), ferr)
		}
		return nil, abortVote, ctx.Err()
	}
	o := res.Ready.Outcome()
	table := res.Blocks
	if o.Blocks != nil { // late loads were swapped for fresh blocks
		table = o.Blocks
	}
	return table, o.ValidTokens, nil
}

// reduce runs the next reduction. A group call given a nil context has
// failed on this rank (the Manager refuses it: ErrNilContext) and still
// takes part, under a context that never ends: a Collective refuses a nil
// one without arriving, which would leave the other ranks waiting.
func (r *Rank) reduce(ctx context.Context, v int64) (int64, error) {
	if ctx == nil {
		ctx = context.Background()
	}
	id := r.op
	r.op++
	r.c.reductions.Add(1)
	return r.cfg.Collective.AllReduceMin(ctx, id, v)
}

// Commit commits seq's first tokens tokens on this rank, then reduces: it
// returns how many tokens every rank of the group committed — a block is
// stored for the group only once every rank stored its shard of it — and
// this rank's own commit error. A rank whose commit failed reports -1, so
// the group's count is 0. tokens is a count (not kvtier.AllTokens): a
// negative one is this rank's failure like any other, not a reason to skip
// the reduction (that would put the ranks out of step) — the rank commits
// nothing, reports -1 and returns a *ConfigError, and the group's count is
// 0.
func (r *Rank) Commit(ctx context.Context, seq uint64, tokens int) (int, error) {
	local := int64(tokens)
	var cerr error
	if tokens < 0 {
		cerr = &ConfigError{"tokens", tokens, "a group commit names its token count"}
	} else {
		cerr = r.m.Commit(ctx, seq, tokens)
	}
	if cerr != nil {
		local = lookupFailed
	}
	a, err := r.reduce(ctx, local)
	if err != nil {
		r.c.failures.Add(1)
		return 0, errors.Join(cerr, fmt.Errorf("kvtier: group: agreeing on the commit of sequence %d: %w", seq, err))
	}
	a = max(a, 0)
	r.c.commits.Add(1)
	if cerr == nil {
		r.c.commitCost.Add(uint64(int64(tokens) - a))
	} else {
		r.c.failures.Add(1) // the call ends in this rank's own error
	}
	return int(a), cerr
}

// Lookup returns the prefix of req's prompt the whole group holds (the
// minimum of every rank's hit, GPU and lower tiers; 0 where a rank's
// lookup failed), without side effects.
func (r *Rank) Lookup(ctx context.Context, req kvtier.LookupRequest) (int, error) {
	local := r.localHit(ctx, kvtier.AllocRequest{Tokens: req.Tokens, Salt: req.Salt, LoRA: req.LoRA})
	a, err := r.reduce(ctx, int64(local))
	if err != nil {
		r.c.failures.Add(1)
		return 0, fmt.Errorf("kvtier: group: agreeing on a lookup: %w", err)
	}
	return int(max(a, 0)), nil
}
