package scheduler

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"go.uber.org/zap"
)

// appendDecodes gives every planned sequence that has a sampled token without
// a block its block, with one Cache.Append. Sequences that get ErrNoBlocks make
// room by preempting the most recently admitted sequence (possibly themselves),
// one victim each, and try again with one more Append, until every survivor has
// its block. It reports whether anything was preempted.
func (s *Scheduler) appendDecodes(ctx context.Context, rep *StepReport) (bool, error) {
	var need []*sequence
	for _, p := range s.batch {
		if p.s.allocated < len(p.s.tokens) {
			need = append(need, p.s)
		}
	}
	preempted := false
	for len(need) > 0 {
		s.ids, s.toks = s.ids[:0], s.toks[:0]
		for _, q := range need {
			if q.allocated+1 != len(q.tokens) {
				panic(fmt.Sprintf("kvtier: scheduler: sequence %d is %d tokens behind its blocks", q.id, len(q.tokens)-q.allocated))
			}
			s.ids = append(s.ids, q.id)
			s.toks = append(s.toks, q.tokens[q.allocated])
		}
		errs, err := s.cache.Append(ctx, s.ids, s.toks)
		if err != nil {
			return preempted, fmt.Errorf("scheduler: append to %d sequences: %w", len(s.ids), err)
		}
		if len(errs) != len(need) {
			return preempted, fmt.Errorf("%w: Append answered %d errors for %d sequences", ErrCacheContract, len(errs), len(need))
		}
		failed := need[:0]
		for i, q := range need {
			switch e := errs[i]; {
			case e == nil:
				q.allocated++
			case noBlocks(e):
				failed = append(failed, q)
			default:
				return preempted, fmt.Errorf("scheduler: append to sequence %d: %w", q.id, e)
			}
		}
		if len(failed) == 0 {
			break
		}
		var victims []*sequence
		for _, q := range failed {
			if q.phase != phaseRunning || len(s.running) == 0 {
				continue // already a victim of this round
			}
			v := s.running[len(s.running)-1]
			s.running = s.running[:len(s.running)-1]
			v.phase = phaseWaiting
			victims = append(victims, v)
		}
		if err := s.preempt(ctx, victims, rep); err != nil {
			return true, err
		}
		preempted = true
		need = slices.DeleteFunc(failed, func(q *sequence) bool { return q.phase != phaseRunning })
	}
	if preempted {
		s.batch = slices.DeleteFunc(s.batch, func(p planned) bool { return p.s.phase != phaseRunning })
	}
	return preempted, nil
}

// preempt releases the victims' blocks by the configured policy and requeues
// them at the front of the waiting queue. victims come most recent first, so
// the earliest admitted ends up at the very front.
func (s *Scheduler) preempt(ctx context.Context, victims []*sequence, rep *StepReport) error {
	if len(victims) == 0 {
		return nil
	}
	ids := make([]SeqID, len(victims))
	for i, v := range victims {
		ids[i] = v.id
	}
	swapped := false
	if s.cfg.Preempt == Swap {
		err := s.cache.Swap(ctx, ids)
		switch {
		case err == nil:
			swapped = true
		case errors.Is(err, ErrUnsupported):
			s.m.res.SwapFallbacks += len(ids)
		default:
			return fmt.Errorf("scheduler: swap out %d sequences: %w", len(ids), err)
		}
	}
	if !swapped {
		if err := s.cache.Free(ctx, ids); err != nil {
			return fmt.Errorf("scheduler: free %d preempted sequences: %w", len(ids), err)
		}
	}
	for _, v := range victims {
		s.log.Debug("scheduler: preempted", zap.Uint64("seq", uint64(v.id)), zap.Stringer("policy", s.cfg.Preempt),
			zap.Int("tokens", len(v.tokens)), zap.Bool("swapped", swapped))
		v.reset()
		s.waiting.pushFront(v)
		rep.Preempted = append(rep.Preempted, v.id)
	}
	s.m.res.Preemptions += len(victims)
	s.blocked = false
	return nil
}
