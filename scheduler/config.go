package scheduler

import (
	"fmt"
	"math"
	"time"

	"go.uber.org/zap"

	"github.com/kvtier/kvtier/trace"
)

// PreemptPolicy says how a running sequence gives up its GPU blocks when a
// decode step cannot find a block.
type PreemptPolicy int

const (
	// Recompute frees the victim's blocks (they stay cached) and requeues it at
	// the front of the waiting queue; on readmission it prefills its prompt and
	// the tokens decoded so far again, minus whatever prefix the cache still holds.
	Recompute PreemptPolicy = iota + 1
	// Swap asks the cache to move the victim's blocks to pinned memory
	// (Cache.Swap) and requeues it, so its readmission finds them in the pinned
	// tier. A cache answering ErrUnsupported falls back to Recompute.
	Swap
)

func (p PreemptPolicy) String() string {
	switch p {
	case Recompute:
		return "recompute"
	case Swap:
		return "swap"
	}
	return fmt.Sprintf("PreemptPolicy(%d)", int(p))
}

// OnboardPolicy says what an admitted sequence does while its prefix is still
// being copied up from pinned memory or disk. In every policy the sequence waits
// without holding up the others: it keeps its blocks and its seat in the batch
// but takes no tokens of the step budget.
type OnboardPolicy int

const (
	// BestEffort never waits: prefix tokens count as loaded only if the load is
	// already complete (Ready closed) when the sequence is admitted; otherwise all
	// of them are recomputed. The modelled transfer time is not charged: this is
	// the optimistic bound of a load fully hidden under compute.
	BestEffort OnboardPolicy = iota + 1
	// Wait holds the sequence until the load is complete, however long: Ready must
	// be closed and, under the logical clock, the cost model's transfer time must
	// have passed since admission.
	Wait
	// Timeout waits as Wait does, up to OnboardTimeout + OnboardTimeoutPer1K per
	// thousand onboarding tokens; then the tokens that have not arrived are
	// recomputed and the transfer counts in Result.TimedOutTransfers.
	Timeout
)

func (p OnboardPolicy) String() string {
	switch p {
	case BestEffort:
		return "best-effort"
	case Wait:
		return "wait"
	case Timeout:
		return "timeout"
	}
	return fmt.Sprintf("OnboardPolicy(%d)", int(p))
}

// Defaults, from nano-vllm's Config (max_num_seqs 512, max_num_batched_tokens
// 16384) and Llama 3's tokenizer (128,256 ids).
const (
	DefaultMaxNumSeqs          = 512
	DefaultMaxNumBatchedTokens = 16384
	DefaultVocab               = 128256
	DefaultSeriesInterval      = 10 * time.Second
	DefaultOnboardTimeout      = 20 * time.Millisecond
	DefaultOnboardTimeoutPer1K = 5 * time.Millisecond
)

// Config tunes a run. The zero value of every field means its default; New
// never modifies the caller's Config.
type Config struct {
	// MaxNumSeqs bounds the sequences admitted at once (running or onboarding).
	MaxNumSeqs int
	// MaxNumBatchedTokens bounds the tokens computed in one step; a prompt longer
	// than what is left of it is prefilled in chunks over several steps.
	MaxNumBatchedTokens int
	// MaxOutputTokens caps each request's output length (0: no cap). A request
	// always produces at least one output token.
	MaxOutputTokens int
	// Preempt is the preemption policy (default Recompute).
	Preempt PreemptPolicy
	// Onboard is the policy for prefixes loading from lower tiers (default Wait).
	Onboard OnboardPolicy
	// OnboardTimeout and OnboardTimeoutPer1K make the Timeout policy's allowance:
	// base + per-1k × onboarding tokens / 1000, on the run's clock.
	OnboardTimeout      time.Duration
	OnboardTimeoutPer1K time.Duration
	// CostModel gives step and transfer times (default DefaultCostModel()).
	CostModel CostModel
	// Clock is Logical (default) or Wall.
	Clock ClockMode
	// TimeScale multiplies trace timestamps (0 means 1): 0.5 replays twice as fast.
	TimeScale float64
	// Vocab is the vocabulary size for trace.TokensOf and decoded tokens.
	Vocab int
	// TraceBlockTokens is how many tokens one of the trace's hash ids
	// stands for (0 means trace.BlockTokens, Mooncake's 512): the prompt
	// is built from the hash ids, TraceBlockTokens tokens each
	// (trace.TokensOf). It is the trace's, not the cache's block size.
	TraceBlockTokens int
	// MaxSeqTokens is the most tokens one sequence can hold blocks for: the
	// GPU cache's capacity in tokens (blocks × tokens a block), or less
	// (vLLM's max_model_len). 0 means unknown. A request that would need more
	// — its prompt plus its output tokens but the last, which needs no block —
	// is rejected when it arrives (Result.Rejected), as vLLM rejects a prompt
	// longer than max_model_len, and the others are served. With 0 the
	// scheduler still rejects a request that gets ErrNoBlocks while no other
	// sequence holds blocks, even after a Cache.Flush, but only once the
	// sequences ahead of it have finished: admission is first come, first
	// served.
	MaxSeqTokens int
	// Salt, if set, gives request i (trace order) its tenant salt.
	Salt func(i int, r trace.Request) string
	// SeriesInterval is the width of one Result.Series bucket on the run's clock.
	SeriesInterval time.Duration
	// Progress, if set, is called after every step that computed or rejected
	// requests, with the run's progress. It runs on the scheduler's goroutine
	// and must not call the Scheduler.
	Progress func(Progress)
	// Logger receives debug events (preemptions, timeouts). nil: no logging.
	Logger *zap.Logger
}

// Rejects reports whether a run under c rejects r on arrival: r needs blocks
// for more than MaxSeqTokens tokens, its prompt and its output tokens (capped
// by MaxOutputTokens, at least one) but the last, which is sampled and never
// appended. With MaxSeqTokens 0 it is false.
func (c Config) Rejects(r trace.Request) bool {
	return c.MaxSeqTokens > 0 && r.InputLength+c.target(r)-1 > c.MaxSeqTokens
}

// target is the number of output tokens r produces under c.
func (c Config) target(r trace.Request) int {
	t := max(r.OutputLength, 1)
	if c.MaxOutputTokens > 0 {
		t = min(t, c.MaxOutputTokens)
	}
	return t
}

// ArrivalTime is when a request stamped ts milliseconds arrives on a run's
// clock at time scale scale (0 means 1): ts × scale ms. It is an error, wrapping
// ErrBadConfig, for a negative ts or one past what a time.Duration holds
// (about 292 years), which a plain conversion would turn into a negative time.
func ArrivalTime(ts int64, scale float64) (time.Duration, error) {
	if scale == 0 {
		scale = 1
	}
	ns := float64(ts) * scale * float64(time.Millisecond)
	if ts < 0 || !(ns < durationLimit) {
		return 0, fmt.Errorf("%w: timestamp %d ms at time scale %g is outside [0, %.0f ms]: rebase it (trace.Read does) or use a smaller scale",
			ErrBadConfig, ts, scale, durationLimit/float64(time.Millisecond))
	}
	return time.Duration(ns), nil
}

// durationLimit is 2^63: a float64 number of nanoseconds below it converts
// to a time.Duration exactly.
const durationLimit = float64(math.MaxInt64)

// Progress is passed to Config.Progress.
type Progress struct {
	Finished int           // requests finished or rejected
	Total    int           // requests in the run
	Now      time.Duration // the run's clock
	Steps    int
}

// withDefaults validates c and returns a copy with defaults filled in.
func (c Config) withDefaults() (Config, error) {
	bad := func(format string, a ...any) (Config, error) {
		return Config{}, fmt.Errorf("%w: "+format, append([]any{ErrBadConfig}, a...)...)
	}
	switch {
	case c.MaxNumSeqs < 0:
		return bad("MaxNumSeqs %d must be >= 0", c.MaxNumSeqs)
	case c.MaxNumBatchedTokens < 0:
		return bad("MaxNumBatchedTokens %d must be >= 0", c.MaxNumBatchedTokens)
	case c.MaxOutputTokens < 0:
		return bad("MaxOutputTokens %d must be >= 0", c.MaxOutputTokens)
	case c.Preempt != 0 && c.Preempt != Recompute && c.Preempt != Swap:
		return bad("Preempt %v", c.Preempt)
	case c.Onboard != 0 && c.Onboard != BestEffort && c.Onboard != Wait && c.Onboard != Timeout:
		return bad("Onboard %v", c.Onboard)
	case c.OnboardTimeout < 0 || c.OnboardTimeoutPer1K < 0:
		return bad("OnboardTimeout %v and OnboardTimeoutPer1K %v must be >= 0", c.OnboardTimeout, c.OnboardTimeoutPer1K)
	case c.Clock != 0 && c.Clock != Logical && c.Clock != Wall:
		return bad("Clock %v", c.Clock)
	case c.TimeScale < 0 || math.IsNaN(c.TimeScale) || math.IsInf(c.TimeScale, 0):
		return bad("TimeScale %v must be finite and >= 0", c.TimeScale)
	case c.Vocab < 0:
		return bad("Vocab %d must be >= 0", c.Vocab)
	case c.SeriesInterval < 0:
		return bad("SeriesInterval %v must be >= 0", c.SeriesInterval)
	case c.TraceBlockTokens < 0:
		return bad("TraceBlockTokens %d must be >= 0", c.TraceBlockTokens)
	case c.MaxSeqTokens < 0:
		return bad("MaxSeqTokens %d must be >= 0", c.MaxSeqTokens)
	}
	if c.MaxNumSeqs == 0 {
		c.MaxNumSeqs = DefaultMaxNumSeqs
	}
	if c.MaxNumBatchedTokens == 0 {
		c.MaxNumBatchedTokens = DefaultMaxNumBatchedTokens
	}
	if c.Preempt == 0 {
		c.Preempt = Recompute
	}
	if c.Onboard == 0 {
		c.Onboard = Wait
	}
	if c.OnboardTimeout == 0 && c.OnboardTimeoutPer1K == 0 {
		c.OnboardTimeout, c.OnboardTimeoutPer1K = DefaultOnboardTimeout, DefaultOnboardTimeoutPer1K
	}
	if c.CostModel == nil {
		c.CostModel = DefaultCostModel()
	}
	if c.Clock == 0 {
		c.Clock = Logical
	}
	if c.TimeScale == 0 {
		c.TimeScale = 1
	}
	if c.Vocab == 0 {
		c.Vocab = DefaultVocab
	}
	if c.SeriesInterval == 0 {
		c.SeriesInterval = DefaultSeriesInterval
	}
	if c.TraceBlockTokens == 0 {
		c.TraceBlockTokens = trace.BlockTokens
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	return c, nil
}
