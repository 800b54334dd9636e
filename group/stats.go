package group

import "sync/atomic"

// Stats are one rank's counters of the group's agreements.
type Stats struct {
	Rank int
	// Agreements counts allocations the group agreed on (each is one
	// reduction of the lookup and at least one of what was loaded).
	Agreements uint64
	// Reductions counts calls to the Collective.
	Reductions uint64
	// HitCostTokens sums, over agreements, this rank's lookup hit minus
	// the group's: tokens this rank held that the group's minimum left
	// unused before anything was loaded.
	HitCostTokens uint64
	// LoadCostTokens sums this rank's valid tokens after its loads minus
	// the group's agreed valid prefix: what a late or failed load on
	// another rank made this rank recompute.
	LoadCostTokens uint64
	// Reallocations counts sequences this rank freed and allocated again,
	// capped at the agreed prefix, because it held more than the group.
	Reallocations uint64
	// LookupErrors counts local lookups that failed (reported as -1: the
	// group's hit becomes 0).
	LookupErrors uint64
	// Failures counts group calls that ended in an error on this rank: a
	// reduction some rank left, an allocation some rank could not make.
	Failures uint64
	// Commits counts group commits; CommitCostTokens sums this rank's
	// committed tokens minus what every rank committed.
	Commits          uint64
	CommitCostTokens uint64
}

// GroupStats sums the ranks' Stats: the agreements are the group's (every
// rank counts the same ones), the costs are summed over ranks.
type GroupStats struct {
	Ranks                           []Stats
	Agreements, Failures            uint64
	HitCostTokens, LoadCostTokens   uint64
	Reallocations, CommitCostTokens uint64
}

// Summarize returns the group's view of the ranks' Stats.
func Summarize(ranks []Stats) GroupStats {
	g := GroupStats{Ranks: append([]Stats(nil), ranks...)}
	for _, s := range ranks {
		g.Agreements = max(g.Agreements, s.Agreements)
		g.Failures = max(g.Failures, s.Failures)
		g.HitCostTokens += s.HitCostTokens
		g.LoadCostTokens += s.LoadCostTokens
		g.Reallocations += s.Reallocations
		g.CommitCostTokens += s.CommitCostTokens
	}
	return g
}

// counters are a rank's Stats, written by the rank's goroutine and read
// by Stats from any.
type counters struct {
	agreements, reductions, hitCost, loadCost atomic.Uint64
	reallocs, lookupErrs, failures            atomic.Uint64
	commits, commitCost                       atomic.Uint64
}

func (c *counters) snapshot(rank int) Stats {
	return Stats{Rank: rank, Agreements: c.agreements.Load(), Reductions: c.reductions.Load(),
		HitCostTokens: c.hitCost.Load(), LoadCostTokens: c.loadCost.Load(), Reallocations: c.reallocs.Load(),
		LookupErrors: c.lookupErrs.Load(), Failures: c.failures.Load(), Commits: c.commits.Load(), CommitCostTokens: c.commitCost.Load()}
}
