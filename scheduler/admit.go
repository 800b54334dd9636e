package scheduler

import (
	"context"
	"fmt"
	"time"
)

// admit takes waiting sequences that have arrived, front first, while the
// sequence limit and the token budget allow, and gives them blocks with one
// Cache.Allocate. The budget is charged a candidate's whole remaining length
// before its cached prefix is known; what a prefix hit leaves unused waits for
// the next step.
//
// Admission is strictly first come, first served: when a candidate gets
// ErrNoBlocks it stays at the front, and candidates behind it that did get
// blocks (a Cache that tries them regardless) are freed again (one
// Cache.Free, counted in Result.Requeued) and stay behind it. After such a
// failure admission waits until the scheduler has freed blocks (a finish or a
// preemption): the Cache is assumed to serve this scheduler alone. A front
// candidate that gets ErrNoBlocks while no sequence holds blocks is tried
// again after a Cache.Flush (tier writes in flight may still hold blocks
// freed a moment ago); if it fails again it can never fit: it is rejected
// and admission goes on with the next.
func (s *Scheduler) admit(ctx context.Context, now time.Duration, budget *int, rep *StepReport) error {
	for {
		again, err := s.admitOnce(ctx, now, budget, rep)
		if err != nil || !again {
			return err
		}
	}
}

// admitOnce makes one Allocate call for admit. again says that it rejected
// the front candidate and admitted nothing: admit tries the next.
func (s *Scheduler) admitOnce(ctx context.Context, now time.Duration, budget *int, rep *StepReport) (again bool, err error) {
	if s.blocked {
		return false, nil
	}
	charge := *budget
	s.nw = s.nw[:0]
	for charge > 0 && len(s.running)+len(s.nw) < s.cfg.MaxNumSeqs && len(s.nw) < s.waiting.len() {
		q := s.waiting.at(len(s.nw))
		s.promptOf(q)
		s.nw = append(s.nw, q)
		charge -= min(len(q.tokens), charge)
	}
	if len(s.nw) == 0 {
		return false, nil
	}
	reqs := make([]AllocReq, len(s.nw))
	for i, q := range s.nw {
		reqs[i] = AllocReq{Seq: q.id, Tokens: q.tokens, Salt: q.salt}
	}
	outs, err := s.cache.Allocate(ctx, reqs)
	if err != nil {
		return false, fmt.Errorf("scheduler: allocate %d sequences: %w", len(reqs), err)
	}
	if len(outs) != len(reqs) {
		return false, fmt.Errorf("%w: Allocate answered %d outcomes for %d requests", ErrCacheContract, len(outs), len(reqs))
	}
	firstFail := -1
	var undo []SeqID
	for i, o := range outs {
		switch {
		case o.Err != nil && !noBlocks(o.Err):
			return false, s.failAllocate(ctx, reqs, outs, fmt.Errorf("scheduler: allocate sequence %d: %w", reqs[i].Seq, o.Err))
		case o.Err != nil:
			if firstFail < 0 {
				firstFail = i
			}
		case firstFail >= 0:
			undo = append(undo, reqs[i].Seq)
		case o.GPUTokens < 0 || o.PinnedTokens < 0 || o.DiskTokens < 0 || o.RemoteTokens < 0:
			return false, s.failAllocate(ctx, reqs, outs, fmt.Errorf("%w: sequence %d: negative prefix %+v", ErrCacheContract, reqs[i].Seq, o))
		}
	}
	if len(undo) > 0 {
		s.m.res.Requeued += len(undo)
		if err := s.cache.Free(ctx, undo); err != nil {
			return false, fmt.Errorf("scheduler: free %d sequences admitted out of order: %w", len(undo), err)
		}
	}
	n := len(outs)
	if firstFail >= 0 {
		n = firstFail
		s.blocked = true
		if n == 0 && len(s.running) == 0 {
			if !s.flushed {
				// Blocks freed a moment ago may still be held by tier
				// writes in flight: let them land, then try again.
				if err := s.cache.Flush(ctx); err != nil {
					return false, fmt.Errorf("scheduler: flush before rejecting sequence %d: %w", s.nw[0].id, err)
				}
				s.flushed, s.blocked = true, false
				return true, nil
			}
			// Nothing else holds blocks: it can never fit.
			s.flushed = false
			q := s.waiting.popFront()
			s.reject(q, rep, len(q.tokens))
			s.blocked = false
			return true, nil
		}
	}
	s.flushed = false
	for i := range n {
		q := s.waiting.popFront()
		o := outs[i]
		s.order++
		q.order, q.admitted = s.order, now
		q.allocated, q.fill = len(q.tokens), len(q.tokens)
		q.gpu, q.pinned, q.disk, q.remote = o.GPUTokens, o.PinnedTokens, o.DiskTokens, o.RemoteTokens
		q.ready, q.loaded = o.Ready, o.Loaded
		s.running = append(s.running, q)
		rep.Admitted = append(rep.Admitted, q.id)
		s.startLoad(q, now)
		if q.phase != phaseRunning || *budget == 0 {
			continue
		}
		t := min(len(q.tokens)-q.computed, *budget)
		s.batch = append(s.batch, planned{q, t})
		*budget -= t
	}
	return false, nil
}

// failAllocate ends an Allocate call that fails with err: it frees every
// sequence the call allocated (each outcome without an error), or those
// sequences would hold their blocks and ids for ever, and returns err, with
// the Free's error if that fails too.
func (s *Scheduler) failAllocate(ctx context.Context, reqs []AllocReq, outs []AllocOutcome, err error) error {
	var got []SeqID
	for j, o := range outs {
		if o.Err == nil {
			got = append(got, reqs[j].Seq)
		}
	}
	if len(got) > 0 {
		if ferr := s.cache.Free(context.WithoutCancel(ctx), got); ferr != nil {
			err = fmt.Errorf("%w; freeing the %d sequences allocated with it: %w", err, len(got), ferr)
		}
	}
	return err
}
