// Package scheduler replays LLM request traces against a tiered KV cache with
// continuous batching, the way vLLM and nano-vllm schedule a GPU, and reports
// what the cache tiers buy: prefix hits per tier, prefill tokens computed, time
// to first token, throughput and preemptions.
//
// # Cache
//
// The KV-cache manager is reached through the Cache interface, batched so that
// one scheduler step makes one Allocate (admissions), one Append (a decode token
// for every running sequence) and one Free (finished sequences) call. An
// adapter maps the kvtier Manager onto it; its "no space" error becomes
// ErrNoBlocks. Allocate reports a sequence's cached prefix per tier: tokens on
// the GPU, then tokens being onboarded from pinned memory and from disk, with a
// Ready channel and a Loaded count for the load.
//
// # Steps
//
// A Scheduler is a plain single-goroutine state machine; Step runs one step:
//
//  1. Requests whose arrival time has come join the back of the waiting queue,
//     except those that need more than Config.MaxSeqTokens, which are rejected.
//  2. Admitted sequences whose load is complete (or, under Timeout, late) have
//     their prefix resolved and start computing.
//  3. Running sequences are scheduled in admission order within the step's
//     token budget (MaxNumBatchedTokens): a decode takes one token, a prompt the
//     rest of its uncached tokens, in chunks if the budget is short (chunked
//     prefill). Decode tokens get their blocks with one Cache.Append; a sequence
//     that gets ErrNoBlocks preempts the most recently admitted sequence
//     (possibly itself) by Free (Recompute) or Swap, and the victims go back to
//     the front of the waiting queue, earliest admitted first.
//  4. If nothing was preempted, waiting sequences that have arrived are admitted
//     front first while MaxNumSeqs and the budget allow (one Cache.Allocate).
//     Admission is strictly first come, first served.
//  5. The step costs CostModel.StepTime of its batch; at its end each sequence
//     that computed its last token samples one output token; sequences with
//     their output length are freed.
//
// A request that can never fit in the GPU cache ends unserved, as vLLM
// rejects a request longer than its max_model_len, and the run goes on: it is
// rejected on arrival when it needs more than Config.MaxSeqTokens, or when it
// gets ErrNoBlocks at the front of the queue while no other sequence holds
// blocks, and again after a Cache.Flush has let the tier writes in flight
// release theirs. Result.Rejected counts it; it is in no served figure, nor
// in Result.TTFT if it was rejected after a preemption.
//
// A prefix hit is never recomputed, except that the last prompt token always is,
// to sample the first output token. A sequence whose prefix loads from a lower
// tier waits under its OnboardPolicy (BestEffort, Wait, Timeout) without holding
// up the others.
//
// # Time
//
// Under the Logical clock (the default) a step advances time by its modelled
// cost, an idle scheduler jumps to the next arrival, modelled load end or
// timeout, and a load counts as done when the cache has closed Ready and the
// cost model's transfer time has passed. The same inputs give the same Result,
// and an hour of trace replays in seconds. When the only thing left is a load
// the cache has not finished although its modelled time has passed, the logical
// scheduler blocks on Ready (the cache owes the data now). Under the Wall clock
// time is real and steps last at least their modelled cost.
//
// # Cost model
//
// DefaultCostModel is an Analytic roofline model of an H100-SXM running
// Llama-3-8B in bf16 (see Analytic for each figure and its source), with
// transfers over PCIe Gen5 from pinned memory and from NVMe.
//
// # Usage
//
//	reqs := trace.Sample()
//	res, err := scheduler.Run(ctx, cacheAdapter, reqs, scheduler.Config{
//		MaxNumSeqs:      256,
//		MaxOutputTokens: 128,
//		Onboard:         scheduler.Timeout,
//	})
//	fmt.Printf("hit %.1f%%, TTFT p50 %v, %.0f tok/s\n", 100*res.HitRatio, res.TTFT.P50, res.OutputTokensPerS)
//
// For a step-wise run, New returns a Scheduler whose Step reports what each
// step admitted, computed, preempted and finished.
package scheduler
