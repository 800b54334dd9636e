package scheduler

import (
	"time"

	"go.uber.org/zap"
)

// startLoad applies the onboarding policy to a sequence just admitted: it either
// resolves its prefix at once (phaseRunning) or leaves it onboarding.
func (s *Scheduler) startLoad(q *sequence, now time.Duration) {
	lower := q.pinned + q.disk + q.remote
	if lower == 0 {
		s.resolve(q, now, 0)
		return
	}
	if s.cfg.Onboard == BestEffort {
		got := 0
		if isClosed(q.ready) {
			got = s.loadedOf(q)
		}
		s.resolve(q, now, got)
		return
	}
	q.phase = phaseOnboarding
	q.readyAt = now
	if s.cfg.Clock == Logical {
		q.readyAt += s.transfer(q.pinned, q.disk, q.remote)
	}
	q.deadline = now + s.cfg.OnboardTimeout + time.Duration(int64(s.cfg.OnboardTimeoutPer1K)*int64(lower)/1000)
	s.m.res.Onboarded++
	s.resolveLoad(q, now)
}

// transfer is the modelled time to bring pinned, then disk, then remote
// tokens up.
func (s *Scheduler) transfer(pinned, disk, remote int) time.Duration {
	c := s.cfg.CostModel
	return c.TransferTime(TierPinned, pinned) + c.TransferTime(TierDisk, disk) + c.TransferTime(TierRemote, remote)
}

// resolveLoads resolves every onboarding sequence whose load is done or whose
// time is up.
func (s *Scheduler) resolveLoads(now time.Duration) {
	for _, q := range s.running {
		if q.phase == phaseOnboarding {
			s.resolveLoad(q, now)
		}
	}
}

// resolveLoad resolves q if its load is complete (Ready closed and, under the
// logical clock, its modelled transfer over) or, under Timeout, its deadline
// has passed; then the tokens that have not arrived are recomputed.
func (s *Scheduler) resolveLoad(q *sequence, now time.Duration) {
	closed := isClosed(q.ready)
	timeout := s.cfg.Onboard == Timeout
	if closed && now >= q.readyAt && (!timeout || q.readyAt <= q.deadline) {
		s.resolve(q, now, s.loadedOf(q))
		return
	}
	if !timeout || now < q.deadline {
		return
	}
	got := 0
	if closed {
		got = min(s.loadedOf(q), s.arrivedBy(q, q.deadline-q.admitted))
	}
	s.m.res.TimedOutTransfers++
	s.log.Debug("scheduler: load timed out",
		zap.Uint64("seq", uint64(q.id)), zap.Int("tokens", q.pinned+q.disk+q.remote), zap.Int("arrived", got),
		zap.Duration("waited", now-q.admitted))
	s.resolve(q, now, got)
}

// arrivedBy is how many onboarding tokens the cost model says arrive within d:
// pinned first, then disk, each at a steady rate.
func (s *Scheduler) arrivedBy(q *sequence, d time.Duration) int {
	if s.cfg.Clock != Logical {
		return 0 // not closed by the deadline: nothing is known to have arrived
	}
	part := func(tokens int, t time.Duration, d time.Duration) int {
		if t <= 0 || d >= t {
			return tokens
		}
		if d <= 0 {
			return 0
		}
		return int(float64(tokens) * float64(d) / float64(t))
	}
	tp := s.cfg.CostModel.TransferTime(TierPinned, q.pinned)
	got := part(q.pinned, tp, d)
	if got < q.pinned {
		return got
	}
	td := s.cfg.CostModel.TransferTime(TierDisk, q.disk)
	if got += part(q.disk, td, d-tp); got < q.pinned+q.disk {
		return got
	}
	return got + part(q.remote, s.cfg.CostModel.TransferTime(TierRemote, q.remote), d-tp-td)
}

// loadedOf asks the cache how many onboarding tokens arrived; Ready is closed.
func (s *Scheduler) loadedOf(q *sequence) int {
	if q.loaded == nil {
		return q.pinned + q.disk + q.remote
	}
	return q.loaded()
}

// resolve fixes q's computed prefix: its GPU tokens plus got loaded tokens,
// leaving at least one token to compute so the step samples an output, and
// counts the tiers that served them.
func (s *Scheduler) resolve(q *sequence, now time.Duration, got int) {
	got = min(max(got, 0), q.pinned+q.disk+q.remote)
	gpu := min(q.gpu, len(q.tokens))
	total := min(gpu+got, len(q.tokens)-1)
	gpu = min(gpu, total)
	pinned := min(q.pinned, total-gpu)
	disk := min(q.disk, total-gpu-pinned)
	remote := total - gpu - pinned - disk
	q.computed = total
	q.phase = phaseRunning
	q.ready, q.loaded = nil, nil
	// A sequence preempted while its load was in flight was never counted:
	// its next admission is its first.
	s.m.resolved(now, q.resolved, len(q.tokens), gpu, pinned, disk, remote)
	q.resolved = true
}
