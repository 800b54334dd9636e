package scheduler

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/kvtier/kvtier/trace"
)

// Scheduler replays a trace against a Cache with continuous batching. It is a
// plain, single-owner state machine: not safe for concurrent use, and it does
// nothing between calls to Step. Run drives one to the end.
type Scheduler struct {
	cfg   Config
	cache Cache
	clock clock
	log   *zap.Logger

	reqs    []trace.Request
	seqs    []*sequence // by trace index
	pending int         // seqs[pending:] have not arrived
	waiting queue
	running []*sequence // admitted (running or onboarding), by admission order
	order   uint64
	done    int
	// blocked is set when an admission got ErrNoBlocks and cleared when blocks
	// are freed: until then admitting again would fail the same way.
	blocked bool
	// flushed is set when admission flushed the cache because its front
	// candidate got ErrNoBlocks with no sequence admitted, and cleared by
	// the next admission's outcome.
	flushed bool
	m       metrics

	// per-step scratch
	batch []planned
	work  []Work
	ids   []SeqID
	// generated is, per finished sequence in ids, its output tokens
	// (FinishCache.FreeFinished).
	generated []int
	// commit's scratch, reused every step
	commitSeqs []SeqID
	commitDone []int
	toks       []int64
	nw         []*sequence
}

// planned is one sequence's share of the step being built.
type planned struct {
	s      *sequence
	tokens int
}

// StepReport says what one Step did. Its slices are fresh copies.
type StepReport struct {
	Start, End time.Duration // the step's span on the run's clock; equal when idle
	Idle       bool          // nothing ran: the clock moved to the next event
	Admitted   []SeqID       // sequences given blocks this step, in admission order
	Scheduled  []Scheduled   // sequences computed this step, in batch order
	Preempted  []SeqID       // victims, in the order chosen (most recent first)
	Finished   []SeqID
	// Rejected are the requests ended unserved this step: they can never fit
	// in the GPU cache (Result.Rejected).
	Rejected []SeqID
}

// Scheduled is one sequence's share of a step.
type Scheduled struct {
	Seq     SeqID
	Tokens  int // tokens computed: 1 for a decode
	Prefill bool
}

// New returns a Scheduler for reqs (sorted by Timestamp, as trace.Read and
// trace.Synthetic return them; ties keep trace order). reqs and cfg are not
// modified; reqs must not change during the run.
func New(cache Cache, reqs []trace.Request, cfg Config) (*Scheduler, error) {
	if cache == nil {
		return nil, fmt.Errorf("%w: nil Cache", ErrBadConfig)
	}
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	s := &Scheduler{cfg: c, cache: cache, clock: newClock(c.Clock), log: c.Logger, reqs: reqs}
	s.m.res.SeriesInterval = c.SeriesInterval
	s.m.cost = c.CostModel
	s.seqs = make([]*sequence, len(reqs))
	var prev time.Duration
	for i, r := range reqs {
		if r.InputLength <= 0 {
			return nil, fmt.Errorf("%w: request %d has input length %d", ErrBadConfig, i, r.InputLength)
		}
		// Rounded up without r.InputLength + TraceBlockTokens - 1, which
		// wraps negative for an input length near math.MaxInt.
		if need := r.InputLength/c.TraceBlockTokens + min(r.InputLength%c.TraceBlockTokens, 1); len(r.HashIDs) < need {
			// The prompt is built from the hash ids, one block of tokens each.
			return nil, fmt.Errorf("%w: request %d has %d hash ids for %d input tokens (%d needed)",
				ErrBadConfig, i, len(r.HashIDs), r.InputLength, need)
		}
		at, err := ArrivalTime(r.Timestamp, c.TimeScale)
		if err != nil {
			return nil, fmt.Errorf("request %d: %w", i, err)
		}
		if at < prev {
			return nil, fmt.Errorf("%w: request %d arrives at %v, before request %d (%v): sort by timestamp", ErrBadConfig, i, at, i-1, prev)
		}
		prev = at
		target := c.target(r)
		salt := ""
		if c.Salt != nil {
			salt = c.Salt(i, r)
		}
		s.seqs[i] = &sequence{id: SeqID(i + 1), idx: i, arrival: at, salt: salt, prompt: r.InputLength, target: target, phase: phasePending}
	}
	return s, nil
}

// Run replays reqs against cache until every request has finished or been
// rejected (Result.Rejected), flushes the cache and returns the summary. On
// error it returns the summary so far.
func Run(ctx context.Context, cache Cache, reqs []trace.Request, cfg Config) (Result, error) {
	s, err := New(cache, reqs, cfg)
	if err != nil {
		return Result{}, err
	}
	for !s.Done() {
		if _, err := s.Step(ctx); err != nil {
			return s.Result(), err
		}
	}
	if err := cache.Flush(ctx); err != nil {
		return s.Result(), fmt.Errorf("scheduler: flush: %w", err)
	}
	return s.Result(), nil
}

// Done reports whether every request has finished or been rejected.
func (s *Scheduler) Done() bool { return s.done == len(s.seqs) }

// Now is the run's clock.
func (s *Scheduler) Now() time.Duration { return s.clock.now() }

// Result returns the summary so far (a copy).
func (s *Scheduler) Result() Result { return s.m.result() }

// Waiting returns the ids in the waiting queue, front first.
func (s *Scheduler) Waiting() []SeqID {
	out := make([]SeqID, s.waiting.len())
	for i := range out {
		out[i] = s.waiting.at(i).id
	}
	return out
}

// Running returns the ids of admitted sequences (computing or onboarding), in
// admission order.
func (s *Scheduler) Running() []SeqID {
	out := make([]SeqID, len(s.running))
	for i, q := range s.running {
		out[i] = q.id
	}
	return out
}

// Step runs one scheduler step: release arrivals, resolve finished loads,
// schedule the running sequences (one Cache.Append for their decode tokens,
// preempting on ErrNoBlocks), admit waiting ones (one Cache.Allocate), advance
// the clock by the step's cost and free what finished (one Cache.Free). With
// nothing to compute it moves the clock to the next event instead and reports
// Idle. It returns ErrDone once every request has finished.
func (s *Scheduler) Step(ctx context.Context) (StepReport, error) {
	if s.Done() {
		return StepReport{}, ErrDone
	}
	if err := ctx.Err(); err != nil {
		return StepReport{}, err
	}
	now := s.clock.now()
	rep := StepReport{Start: now, End: now}
	s.release(now, &rep)
	if s.Done() {
		s.progress(now)
		return rep, nil // the last arrivals were all rejected
	}
	s.resolveLoads(now)

	budget := s.cfg.MaxNumBatchedTokens
	s.batch = s.batch[:0]
	for _, q := range s.running {
		if budget == 0 {
			break
		}
		if q.phase != phaseRunning {
			continue
		}
		n := min(len(q.tokens)-q.computed, budget)
		s.batch = append(s.batch, planned{q, n})
		budget -= n
	}
	preempted, err := s.appendDecodes(ctx, &rep)
	if err != nil {
		return rep, err
	}
	if !preempted {
		if err := s.admit(ctx, now, &budget, &rep); err != nil {
			return rep, err
		}
	}
	if len(s.batch) == 0 {
		if len(rep.Rejected) > 0 {
			s.progress(now)
		}
		if preempted || s.Done() {
			// every runnable sequence was preempted: admit next step; or
			// admission rejected the last requests
			return rep, nil
		}
		rep.Idle = true
		err := s.idle(ctx, now)
		rep.End = s.clock.now()
		return rep, err
	}

	s.work = s.work[:0]
	for _, p := range s.batch {
		s.work = append(s.work, Work{Tokens: p.tokens, Context: p.s.computed})
	}
	end, err := s.clock.stepDone(ctx, now, s.cfg.CostModel.StepTime(s.work))
	if err != nil {
		return rep, err
	}
	rep.End = end
	s.m.res.Steps++
	if err := s.finishStep(ctx, end, &rep); err != nil {
		return rep, err
	}
	s.progress(end)
	return rep, nil
}

// progress reports to Config.Progress, if set: after every computed step,
// and after a step that only rejected requests.
func (s *Scheduler) progress(now time.Duration) {
	if s.cfg.Progress != nil {
		s.cfg.Progress(Progress{Finished: s.done, Total: len(s.seqs), Now: now, Steps: s.m.res.Steps})
	}
}

// release moves every request that has arrived by now to the waiting queue,
// or rejects it if it needs more than Config.MaxSeqTokens.
func (s *Scheduler) release(now time.Duration, rep *StepReport) {
	for s.pending < len(s.seqs) && s.seqs[s.pending].arrival <= now {
		q := s.seqs[s.pending]
		s.pending++
		s.m.arrival(q.arrival)
		if s.cfg.Rejects(s.reqs[q.idx]) {
			s.reject(q, rep, q.prompt+q.target-1)
			continue
		}
		q.phase = phaseWaiting // its prompt is built when admission first considers it (promptOf)
		s.waiting.pushBack(q)
	}
}

// promptOf builds q's prompt tokens if it has none yet: a request that
// arrived and was never considered for admission. Building them on arrival
// held every waiting prompt at once, 8 bytes a token: a burst of 50,000
// requests of 15k tokens held 6 GB.
func (s *Scheduler) promptOf(q *sequence) {
	if q.tokens == nil {
		q.tokens = trace.TokensOf(s.reqs[q.idx], s.cfg.TraceBlockTokens, s.cfg.Vocab)
	}
}

// reject ends q, which needs blocks for need tokens and can never get them,
// without serving it.
func (s *Scheduler) reject(q *sequence, rep *StepReport, need int) {
	s.log.Debug("scheduler: rejected", zap.Uint64("seq", uint64(q.id)), zap.Int("prompt", q.prompt),
		zap.Int("tokens", need), zap.Int("max_seq_tokens", s.cfg.MaxSeqTokens))
	q.phase = phaseRejected
	q.tokens = nil
	s.done++
	s.m.res.Rejected++
	s.m.res.RejectedPromptTokens += int64(q.prompt)
	if q.firstOut {
		// Rejected after a preemption: TTFT is over served requests only.
		// Any entry equal to q's is as good as q's own.
		if i := slices.Index(s.m.ttfts, q.ttft); i >= 0 {
			s.m.ttfts = slices.Delete(s.m.ttfts, i, i+1)
		}
	}
	rep.Rejected = append(rep.Rejected, q.id)
}

// freeFinished frees the finished sequences s.ids, telling a FinishCache
// how many tokens each generated (s.generated).
func (s *Scheduler) freeFinished(ctx context.Context) error {
	fc, ok := s.cache.(FinishCache)
	if !ok {
		return s.cache.Free(ctx, s.ids)
	}
	return fc.FreeFinished(ctx, s.ids, s.generated)
}

// finishStep applies a computed step that ended at end: sample tokens, record
// first tokens, and free what finished.
func (s *Scheduler) finishStep(ctx context.Context, end time.Duration, rep *StepReport) error {
	s.m.last = end
	s.ids, s.generated = s.ids[:0], s.generated[:0]
	if err := s.commit(ctx); err != nil {
		return err
	}
	for _, p := range s.batch {
		q := p.s
		prefill := q.computed < q.fill
		if prefill {
			s.m.res.PrefillTokens += int64(p.tokens)
		}
		rep.Scheduled = append(rep.Scheduled, Scheduled{Seq: q.id, Tokens: p.tokens, Prefill: prefill})
		q.computed += p.tokens
		if q.computed < len(q.tokens) {
			continue // a prefill chunk that does not reach the end
		}
		if !q.firstOut {
			q.firstOut, q.ttft = true, end-q.arrival
			s.m.ttfts = append(s.m.ttfts, q.ttft)
		}
		q.generated++
		s.m.sampled(end, 1)
		if q.generated >= q.target {
			q.phase = phaseFinished
			s.ids, s.generated = append(s.ids, q.id), append(s.generated, q.generated)
			continue
		}
		q.tokens = append(q.tokens, q.nextToken(s.cfg.Vocab))
	}
	if len(s.ids) == 0 {
		return nil
	}
	if err := s.freeFinished(ctx); err != nil {
		return fmt.Errorf("scheduler: free %d finished sequences: %w", len(s.ids), err)
	}
	rep.Finished = append(rep.Finished, s.ids...)
	s.blocked = false
	kept := s.running[:0]
	for _, q := range s.running {
		if q.phase == phaseFinished {
			s.done++
			s.m.res.Requests++
			s.m.res.PromptTokens += int64(q.prompt)
			q.tokens = nil
			continue
		}
		kept = append(kept, q)
	}
	clear(s.running[len(kept):])
	s.running = kept
	return nil
}

// commit tells the cache what the step computed: every batch member's
// computed count after this step, before anything is freed.
func (s *Scheduler) commit(ctx context.Context) error {
	s.commitSeqs, s.commitDone = s.commitSeqs[:0], s.commitDone[:0]
	for _, p := range s.batch {
		s.commitSeqs = append(s.commitSeqs, p.s.id)
		s.commitDone = append(s.commitDone, p.s.computed+p.tokens)
	}
	errs, err := s.cache.Commit(ctx, s.commitSeqs, s.commitDone)
	if err != nil {
		return fmt.Errorf("scheduler: commit %d sequences: %w", len(s.commitSeqs), err)
	}
	// A refused commit only leaves blocks uncached (say, a sequence the
	// Timeout policy recomputed while its load was still in flight): the
	// replay goes on, and the cache never serves what it did not commit.
	for _, e := range errs {
		if e != nil {
			s.m.res.CommitRefused++
		}
	}
	return nil
}

// idle moves the clock to the next event when no sequence could compute.
func (s *Scheduler) idle(ctx context.Context, now time.Duration) error {
	until, has := time.Duration(0), false
	next := func(t time.Duration) {
		if !has || t < until {
			until, has = t, true
		}
	}
	if s.pending < len(s.seqs) {
		next(s.seqs[s.pending].arrival)
	}
	var chans []<-chan struct{}
	for _, q := range s.running {
		if q.phase != phaseOnboarding {
			continue
		}
		closed := isClosed(q.ready)
		if s.cfg.Onboard == Timeout {
			next(q.deadline)
		}
		switch {
		case closed && (s.cfg.Onboard != Timeout || q.readyAt <= q.deadline):
			if q.readyAt <= now {
				return nil // the load ended since this step looked: the next step runs it
			}
			next(q.readyAt)
		case !closed && q.readyAt <= now:
			chans = append(chans, q.ready) // the cache owes the data now
		case !closed:
			next(q.readyAt)
		}
	}
	if !has && len(chans) == 0 {
		return fmt.Errorf("%w: %d waiting, %d admitted, nothing pending", ErrStalled, s.waiting.len(), len(s.running))
	}
	if has && until <= now && len(chans) == 0 {
		return fmt.Errorf("%w: next event at %v is not after now (%v)", ErrStalled, until, now)
	}
	return s.clock.idle(ctx, until, has, chans)
}

// noBlocks reports whether a cache error means "no GPU blocks".
func noBlocks(err error) bool { return errors.Is(err, ErrNoBlocks) }
