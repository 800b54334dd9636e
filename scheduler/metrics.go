package scheduler

import (
	"math"
	"slices"
	"time"
)

// Result summarises a run. Times are on the run's clock (logical by default).
//
// Tokens are counted per admission: a sequence preempted and admitted again
// presents its prompt and the tokens decoded so far once more, so
// AdmittedTokens can exceed PromptTokens, and HitRatio is over AdmittedTokens.
// A readmission mostly finds the sequence's own KV, computed before it was
// preempted: Readmissions holds that part of the counts, and the counts less
// Readmissions are what requests found at their first admission, the prefix
// reuse between requests that a trace simulation (package cachesim) counts.
type Result struct {
	Requests     int   // requests finished (served); rejected ones are not
	PromptTokens int64 // prompt tokens of the finished requests' trace entries
	// Rejected counts requests that could never fit in the GPU cache and
	// ended without being served (see Config.MaxSeqTokens), and
	// RejectedPromptTokens their prompt tokens. They are in no other count,
	// except that one rejected after a preemption (its prompt fitted, its
	// output did not: only with MaxSeqTokens 0) keeps what its earlier
	// admissions and output tokens counted, but not its TTFT.
	Rejected             int
	RejectedPromptTokens int64
	AdmittedTokens       int64 // tokens presented to Cache.Allocate, over all admissions that resolved
	GPUTokens            int64 // of those, served from the GPU tier
	PinnedTokens         int64 // loaded from pinned memory
	DiskTokens           int64 // loaded from disk
	RemoteTokens         int64 // loaded from the shared remote tier
	HitRatio             float64
	PrefillTokens        int64 // tokens computed in prefill (chunked prompts and recomputation)
	CommitRefused        int64 // per-sequence commits the cache refused (blocks left uncached)
	OutputTokens         int64 // output tokens sampled
	// PrefillSaved is the prefill compute the GPUTokens, PinnedTokens and
	// DiskTokens avoided, by tier, as the cost model's WorkCoster prices it
	// (zero for a cost model without one).
	PrefillSaved TierTimes
	// Readmissions is the part of AdmittedTokens, the tier counts and
	// PrefillSaved that admissions after a preemption contributed.
	Readmissions Served

	TTFT TTFT // arrival to the end of the step that sampled the first output token

	Duration         time.Duration // first arrival to the end of the last step
	OutputTokensPerS float64
	RequestsPerS     float64
	Steps            int
	Preemptions      int
	SwapFallbacks    int // Swap preemptions done by recomputation (ErrUnsupported)
	// Requeued counts allocations freed again at once because a sequence
	// ahead of them in the same Allocate got no blocks (admission is first
	// come, first served). A Cache that stops at the first such sequence
	// (schedcache does) leaves it 0; each one may have started loads for
	// nothing.
	Requeued          int
	TimedOutTransfers int // loads given up on by the Timeout policy
	Onboarded         int // admissions that waited for a load under Wait or Timeout

	SeriesInterval time.Duration
	Series         []SeriesPoint
}

// Served is what a set of admissions presented to the cache and found there.
type Served struct {
	Tokens                    int64 // tokens presented to Cache.Allocate
	GPU, Pinned, Disk, Remote int64 // of those, served from each tier
	PrefillSaved              TierTimes
}

// Hits is the tokens served from any tier.
func (s Served) Hits() int64 { return s.GPU + s.Pinned + s.Disk + s.Remote }

// Plus is s + o, field by field.
func (s Served) Plus(o Served) Served {
	return Served{Tokens: s.Tokens + o.Tokens, GPU: s.GPU + o.GPU, Pinned: s.Pinned + o.Pinned,
		Disk: s.Disk + o.Disk, Remote: s.Remote + o.Remote, PrefillSaved: s.PrefillSaved.Plus(o.PrefillSaved)}
}

// FirstAdmissions is what every request found at its first admission: r's
// per-admission counts less its Readmissions. Its Tokens are the prompt
// tokens of the requests admitted.
func (r Result) FirstAdmissions() Served {
	q := r.Readmissions
	return Served{
		Tokens: r.AdmittedTokens - q.Tokens,
		GPU:    r.GPUTokens - q.GPU, Pinned: r.PinnedTokens - q.Pinned,
		Disk: r.DiskTokens - q.Disk, Remote: r.RemoteTokens - q.Remote,
		PrefillSaved: r.PrefillSaved.Minus(q.PrefillSaved),
	}
}

// TTFT holds time-to-first-token percentiles (nearest rank).
type TTFT struct {
	P50, P90, P99, Max time.Duration
	Mean               time.Duration
}

// SeriesPoint is one SeriesInterval of the run, starting at Start.
type SeriesPoint struct {
	Start          time.Duration
	Arrivals       int   // requests whose arrival falls in the interval
	AdmittedTokens int64 // tokens whose prefix was resolved in the interval
	HitTokens      int64 // of those, served from any tier
	HitRatio       float64
	// ReadmittedTokens and ReadmittedHitTokens are the part of
	// AdmittedTokens and HitTokens that readmissions after a preemption
	// contributed.
	ReadmittedTokens, ReadmittedHitTokens int64
	OutputTokens                          int64
}

// metrics accumulates a Result while the run goes on.
type metrics struct {
	res      Result
	cost     CostModel // prices Result.PrefillSaved
	ttfts    []time.Duration
	first    time.Duration
	hasFirst bool
	last     time.Duration
}

func (m *metrics) point(t time.Duration) *SeriesPoint {
	i := int(t / m.res.SeriesInterval)
	for len(m.res.Series) <= i {
		n := len(m.res.Series)
		m.res.Series = append(m.res.Series, SeriesPoint{Start: time.Duration(n) * m.res.SeriesInterval})
	}
	return &m.res.Series[i]
}

func (m *metrics) arrival(t time.Duration) {
	m.point(t).Arrivals++
	if !m.hasFirst || t < m.first {
		m.first, m.hasFirst = t, true
	}
}

// resolved counts an admission's prefix; readmitted says the sequence had
// an admission counted before (it was preempted since).
func (m *metrics) resolved(t time.Duration, readmitted bool, tokens, gpu, pinned, disk, remote int) {
	m.res.AdmittedTokens += int64(tokens)
	m.res.GPUTokens += int64(gpu)
	m.res.PinnedTokens += int64(pinned)
	m.res.DiskTokens += int64(disk)
	m.res.RemoteTokens += int64(remote)
	saved := prefillSaved(m.cost, gpu, pinned, disk, remote)
	m.res.PrefillSaved = m.res.PrefillSaved.Plus(saved)
	p := m.point(t)
	p.AdmittedTokens += int64(tokens)
	p.HitTokens += int64(gpu + pinned + disk + remote)
	if !readmitted {
		return
	}
	m.res.Readmissions = m.res.Readmissions.Plus(Served{Tokens: int64(tokens),
		GPU: int64(gpu), Pinned: int64(pinned), Disk: int64(disk), Remote: int64(remote), PrefillSaved: saved})
	p.ReadmittedTokens += int64(tokens)
	p.ReadmittedHitTokens += int64(gpu + pinned + disk + remote)
}

func (m *metrics) sampled(t time.Duration, n int) {
	m.res.OutputTokens += int64(n)
	m.point(t).OutputTokens += int64(n)
}

// result returns a copy of the summary as of now.
func (m *metrics) result() Result {
	r := m.res
	r.Series = slices.Clone(m.res.Series)
	if r.AdmittedTokens > 0 {
		r.HitRatio = float64(r.GPUTokens+r.PinnedTokens+r.DiskTokens+r.RemoteTokens) / float64(r.AdmittedTokens)
	}
	for i := range r.Series {
		if p := &r.Series[i]; p.AdmittedTokens > 0 {
			p.HitRatio = float64(p.HitTokens) / float64(p.AdmittedTokens)
		}
	}
	if m.hasFirst && m.last > m.first {
		r.Duration = m.last - m.first
		r.OutputTokensPerS = float64(r.OutputTokens) / r.Duration.Seconds()
		r.RequestsPerS = float64(r.Requests) / r.Duration.Seconds()
	}
	r.TTFT = percentiles(m.ttfts)
	return r
}

func percentiles(ds []time.Duration) TTFT {
	if len(ds) == 0 {
		return TTFT{}
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	rank := func(p float64) time.Duration {
		i := int(math.Ceil(p*float64(len(s)))) - 1 // nearest rank
		return s[min(max(i, 0), len(s)-1)]
	}
	var sum time.Duration
	for _, d := range s {
		sum += d
	}
	return TTFT{P50: rank(0.50), P90: rank(0.90), P99: rank(0.99), Max: s[len(s)-1], Mean: sum / time.Duration(len(s))}
}
