package scheduler

import "context"

// SeqID names one sequence (one trace request) towards the Cache. The scheduler
// numbers requests from 1 in trace order: request i is SeqID(i+1). A preempted
// sequence keeps its id when it is admitted again.
type SeqID uint64

// AllocReq asks the Cache for blocks for a whole sequence.
//
// Tokens is read-only and owned by the scheduler: a Cache that keeps token ids
// past the call must copy them.
type AllocReq struct {
	Seq    SeqID
	Tokens []int64
	Salt   string // tenant salt for the prefix hash; "" for none
}

// AllocOutcome is the Cache's answer to one AllocReq.
//
// The three token counts describe a leading run of the prompt: the first
// GPUTokens are on the GPU now, the next PinnedTokens are being copied up from
// pinned host memory, and the next DiskTokens from disk. Everything after them
// must be computed.
type AllocOutcome struct {
	// Err is nil on success. errors.Is(Err, ErrNoBlocks) means the GPU has too
	// few free blocks; the sequence then stays waiting and holds nothing. Any
	// other error ends the run.
	Err          error
	GPUTokens    int
	PinnedTokens int
	DiskTokens   int
	// RemoteTokens follow DiskTokens, from a tier shared over the network.
	RemoteTokens int
	// Ready is closed when the onboarding of PinnedTokens+DiskTokens+RemoteTokens is done. nil
	// means nothing loads (or it is done already).
	Ready <-chan struct{}
	// Loaded, called only after Ready is closed, says how many of
	// PinnedTokens+DiskTokens actually arrived, as a leading run: a late or
	// failed read leaves the rest to recompute. nil means all of them.
	Loaded func() int
}

// Cache is the KV-cache manager as the scheduler sees it. Every method is
// batched: the scheduler makes at most one call of each per step, except that
// Append (and Free or Swap) are called again within a step while it preempts
// sequences to make room. Calls come from the one goroutine that drives the
// Scheduler.
//
// Ownership: a sequence holds its blocks from a successful Allocate until the
// scheduler passes it to Free or Swap. Every SeqID passed to Append, Free or Swap
// holds blocks. Slices passed in are read-only and not retained by the caller's
// contract: copy what you keep.
type Cache interface {
	// Allocate gives blocks to each request, all or nothing per request, and
	// reports its cached prefix. It returns one outcome per request, in order;
	// the error result is for failures of the whole call. Admission is first
	// come, first served: a Cache should not try the requests after one that
	// gets ErrNoBlocks (answering them ErrNoBlocks too, as schedcache does);
	// those it does allocate, the scheduler frees again (Result.Requeued).
	Allocate(ctx context.Context, reqs []AllocReq) ([]AllocOutcome, error)
	// Append adds tokens[i] to sequence seqs[i] (one decoded token each). It
	// returns one error per sequence, nil on success; errors.Is(e, ErrNoBlocks)
	// means that sequence could not grow and is unchanged.
	Append(ctx context.Context, seqs []SeqID, tokens []int64) ([]error, error)
	// Commit says that the first computed[i] tokens of seqs[i] hold computed
	// KV: the step's forward pass wrote them. Only committed blocks may be
	// served to other sequences or moved to lower tiers. It returns one error
	// per sequence.
	Commit(ctx context.Context, seqs []SeqID, computed []int) ([]error, error)
	// Free releases finished or preempted sequences. Their blocks stay cached
	// and can be hit later.
	Free(ctx context.Context, seqs []SeqID) error
	// Swap preempts by swapping: the sequences' blocks move to pinned memory and
	// their GPU blocks are freed, as Free does. It returns ErrUnsupported (maybe
	// wrapped) when the cache cannot swap; nothing has changed then.
	Swap(ctx context.Context, seqs []SeqID) error
	// Flush returns once every tier write in flight has completed.
	Flush(ctx context.Context) error
}

// FinishCache is a Cache that is told, as finished sequences are freed, how
// many tokens each generated: a request's output length, which an engine
// knows only then and which kvtier's lower tiers take as the request's class
// for their eviction policies (policy.OutputClass, kvtier.CommitItem.Class).
// The scheduler calls FreeFinished in place of Free for the sequences of a
// step that finished; preempted, requeued and rejected ones still go to Free.
// Like Free it returns the first per-sequence error, if any. A wrapper that
// embeds the Cache interface hides FreeFinished from the scheduler: embed
// the concrete type, or a FinishCache.
type FinishCache interface {
	Cache
	FreeFinished(ctx context.Context, seqs []SeqID, generated []int) error
}
