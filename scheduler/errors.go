package scheduler

import "errors"

var (
	// ErrNoBlocks is what a Cache returns (in AllocOutcome.Err or a per-sequence
	// Append error) when the GPU has too few free blocks. The adapter over the
	// kvtier Manager maps the block pool's ErrNoSpace to it.
	ErrNoBlocks = errors.New("kvtier: scheduler: no free GPU blocks")
	// ErrUnsupported is what Cache.Swap returns when the cache cannot swap; the
	// scheduler then preempts by recomputation.
	ErrUnsupported = errors.New("kvtier: scheduler: operation not supported by the cache")
	// ErrBadConfig is wrapped by every Config validation error.
	ErrBadConfig = errors.New("kvtier: scheduler: bad config")
	// ErrCacheContract is wrapped when a Cache answers with the wrong number of
	// outcomes or a malformed outcome.
	ErrCacheContract = errors.New("kvtier: scheduler: cache broke its contract")
	// ErrUnschedulable was wrapped when the request at the head of the
	// waiting queue could not get blocks although nothing else held any,
	// and that ended the run.
	//
	// Deprecated: no longer returned. Such a request is rejected, as vLLM
	// rejects a request longer than its max_model_len, and the run goes on
	// (Result.Rejected, StepReport.Rejected; Config.MaxSeqTokens rejects it
	// on arrival). A caller that wants the old stop checks those.
	ErrUnschedulable = errors.New("kvtier: scheduler: request can never fit in the GPU cache")
	// ErrDone is returned by Step after every request has finished.
	ErrDone = errors.New("kvtier: scheduler: all requests finished")
	// ErrStalled is wrapped when no sequence can make progress and no event is
	// pending: a bug in the scheduler or a cache that never completes a load.
	ErrStalled = errors.New("kvtier: scheduler: stalled")
)
