package main

import (
	"context"
	"time"

	"github.com/kvtier/kvtier/schedcache"
	"github.com/kvtier/kvtier/scheduler"
	"github.com/kvtier/kvtier/trace"
)

// ttftTracker recovers each request's time to first token, which
// scheduler.Result gives only as percentiles, for the CDF plot.
//
// A sequence samples its first output token at the end of the step whose
// prefill chunk reaches the end of its prompt. The step reports say which steps
// prefilled a sequence but not which chunk was the last, so the tracker waits
// for proof that the first token exists: the sequence's first decode token
// passed to Cache.Append, or the sequence finishing. Its first token came at
// the end of its latest prefill step before that. (A sequence preempted after
// its first token but before its first Append, which needs its decode to be
// squeezed out of a full step's token budget, would be counted at its
// re-prefill instead: rare, and the run's TTFT percentiles in the table come
// from the scheduler itself.)
type ttftTracker struct {
	arrival     []time.Duration // by trace index
	lastPrefill []time.Duration
	ttft        []time.Duration
	known       []bool
	appended    []scheduler.SeqID // decode tokens passed to Append in the current step
}

func newTTFTTracker(reqs []trace.Request, timeScale float64) *ttftTracker {
	t := &ttftTracker{
		arrival:     make([]time.Duration, len(reqs)),
		lastPrefill: make([]time.Duration, len(reqs)),
		ttft:        make([]time.Duration, len(reqs)),
		known:       make([]bool, len(reqs)),
	}
	for i, r := range reqs {
		// as the scheduler computes it; scheduler.New has rejected what overflows
		t.arrival[i], _ = scheduler.ArrivalTime(r.Timestamp, timeScale)
	}
	return t
}

func (t *ttftTracker) found(id scheduler.SeqID) {
	i := int(id) - 1
	if !t.known[i] {
		t.known[i] = true
		t.ttft[i] = t.lastPrefill[i] - t.arrival[i]
	}
}

// step takes one step's report; the Append calls made during the step were
// recorded before it returned.
func (t *ttftTracker) step(rep scheduler.StepReport) {
	for _, id := range t.appended {
		t.found(id)
	}
	t.appended = t.appended[:0]
	for _, s := range rep.Scheduled {
		if s.Prefill {
			t.lastPrefill[int(s.Seq)-1] = rep.End
		}
	}
	for _, id := range rep.Finished {
		t.found(id)
	}
}

// values returns the TTFT of every request whose first token was seen, in
// trace order.
func (t *ttftTracker) values() []time.Duration {
	out := make([]time.Duration, 0, len(t.ttft))
	for i, d := range t.ttft {
		if t.known[i] {
			out = append(out, d)
		}
	}
	return out
}

// recordingCache passes every call to the Manager's adapter and tells the
// tracker which sequences got a decode token.
type recordingCache struct {
	*schedcache.Cache // FreeFinished too: the scheduler gives the tiers each request's class
	tr                *ttftTracker
}

func (c *recordingCache) Append(ctx context.Context, seqs []scheduler.SeqID, tokens []int64) ([]error, error) {
	c.tr.appended = append(c.tr.appended, seqs...)
	return c.Cache.Append(ctx, seqs, tokens)
}
