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
type Result struct {
	Requests       int   // requests finished
	PromptTokens   int64 // prompt tokens of the finished requests' trace entries
	AdmittedTokens int64 // tokens presented to Cache.Allocate, over all admissions that resolved
	GPUTokens      int64 // of those, served from the GPU tier
	PinnedTokens   int64 // loaded from pinned memory
	DiskTokens     int64 // loaded from disk
	RemoteTokens   int64 // loaded from the shared remote tier
	HitRatio       float64
	PrefillTokens  int64 // tokens computed in prefill (chunked prompts and recomputation)
	CommitRefused  int64 // per-sequence commits the cache refused (blocks left uncached)
	OutputTokens   int64 // output tokens sampled
	// PrefillSaved is the prefill compute the GPUTokens, PinnedTokens and
	// DiskTokens avoided, by tier, as the cost model's WorkCoster prices it
	// (zero for a cost model without one).
	PrefillSaved TierTimes

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
	OutputTokens   int64
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

func (m *metrics) resolved(t time.Duration, tokens, gpu, pinned, disk, remote int) {
	m.res.AdmittedTokens += int64(tokens)
	m.res.GPUTokens += int64(gpu)
	m.res.PinnedTokens += int64(pinned)
	m.res.DiskTokens += int64(disk)
	m.res.RemoteTokens += int64(remote)
	saved := prefillSaved(m.cost, gpu, pinned, disk, remote)
	m.res.PrefillSaved.GPU += saved.GPU
	m.res.PrefillSaved.Pinned += saved.Pinned
	m.res.PrefillSaved.Disk += saved.Disk
	m.res.PrefillSaved.Remote += saved.Remote
	p := m.point(t)
	p.AdmittedTokens += int64(tokens)
	p.HitTokens += int64(gpu + pinned + disk + remote)
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
