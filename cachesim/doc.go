// Package cachesim measures KV-cache hit ratios by replaying request traces
// (see package trace) against one tier of a fixed number of blocks, with the
// prefix semantics of an LLM prefix cache.
//
// # Sections
//
//   - Semantics: how a request is looked up and admitted.
//   - Policies: [Simulate] and [SimulatePolicy] run the policy package's
//     LRU, FIFO, S3-FIFO, ARC and the default, Adaptive.
//   - References: [Infinite] (the ideal hit ratio) and [OPT] (the clairvoyant
//     optimum) bound the block hits any policy can reach. OPT maximises
//     blocks, not tokens: its TokenHitRatio is a reference, not a bound (a
//     partial last block counts as one block, so keeping it over a full one
//     can cost tokens); Infinite's is a bound.
//   - Usage.
//
// # Semantics
//
// A block is a hash id of the trace (512 tokens; a request's partial last
// block counts like a full one). For each request, in trace order:
//
//  1. hits = the length of the leading run of its ids that are resident at
//     lookup time. A resident block after a missing one is no hit: the model
//     would have to recompute the missing block's KV, and with it everything
//     after it;
//  2. every id of the request is inserted or touched;
//  3. the tier evicts down to its capacity.
//
// The hit ratio is hits / block refs, counted in blocks. This is the model of
// /work/shared/traces/README.md; Simulate reproduces its LRU numbers for both
// Mooncake traces exactly (TestMooncakeReferenceStatistics). The touch order of
// step 2 matters for LRU: Options.ReverseTouch touches the last id first, so
// the head of the prefix is the most recent.
//
// # Which policy
//
// Under prefix semantics every request inserts all its blocks, and in the
// Mooncake traces most of them are used once (the tail of each prompt, and
// the partial last block always). LRU lets that stream flush the reused
// prefixes. policy.ARC keeps keys seen once in a recency list T1 and keys
// hit again in T2, with ghost lists that move the boundary; one-use blocks
// churn through T1 and leave first. It needs no admission hook: every block
// is admitted to T1, which is the filter. On the conversation trace it is
// the best online policy at 1k and 16k blocks; no online policy tried
// (LRU, S3-FIFO, ARC, W-TinyLFU, LFU with dynamic aging) reaches 95% of OPT
// below 64k blocks, because OPT knows which of the once-seen blocks will be
// reused and no key-only signal predicts it.
//
// policy.Adaptive (the disk tier's default, and the pinned tier's when it is
// the last tier) remembers every id seen (16 bytes of
// times per id, about 139 bytes with its index), ranks the deeper blocks of
// a chain and a request's partial last block first, learns per request
// class (policy.OutputClass of the output length, which Simulate passes)
// how often a block first seen there comes back, and picks, per capacity,
// among nine rankings scored on metadata-only shadow caches (the ninth
// evicts first the blocks seen once of a class found rare); once its
// choice has switched, the shadows near the choice vote on its victims.
// Hit ratios from `go run ./cmd/kvbench -suite trace -trace FILE -capacity
// ...` on 2026-11-27 (adaptive, best classic, OPT):
//
//	conversation  1k: 8.24% arc 6.96% opt 19.28%   4k: 15.79% arc 12.07% opt 32.43%   16k: 28.51% arc 27.64% opt 36.64%
//	synthetic    256: 3.08% fifo 2.15% opt 13.71%  1k: 9.69% arc 8.69% opt 27.97%     2k: 15.73% arc 15.59% opt 38.35%
//	             4k: 26.93% arc 25.98% opt 49.66%  16k: 59.20% arc 56.68% opt 63.96%  64k: all 63.96%
//
// It is at or above the best classic policy in every cell of both traces;
// at the synthetic trace's 2k it passes ARC by 0.9%, where issue 16 asks
// 10%. Before the classes it was 0.99x of ARC at 16k (56.21%), and no
// ranking read without them closed that: a single one of its rankings,
// fixed for the whole trace, would beat ARC by 0.2% (the frequency ranking
// with a four-capacity window, 56.79%; at 2k the new-first frequency
// ranking with a one-capacity window gets 16.28%), and the shadows' totals
// over the whole trace rank it first; but the leader over the last few
// periods keeps changing, and following it lands near the candidates'
// average. Longer or shorter
// memories, a significance test instead of the 2% margin, finer periods,
// another starting ranking, evicting first what the leading shadow does not
// hold, a vote of the shadows from the start (while they tie it follows the
// candidates' majority, which costs the conversation trace's 32k and 64k
// cells), an on-policy choice per eviction
// (LeCaR's regret weights) and ARC, S3-FIFO and LRU themselves among the
// choices each moved these cells by at most a point and lost others. Nor did
// a different kind of policy reach ARC there: hit density (LHD's value, each
// block's expected hits per unit of cache time from its age on) with
// reuse-gap distributions per use-count class learned from every id ever
// seen, evicting among leaf blocks only, matched Adaptive on the
// conversation trace but stayed at 0.95-0.99x of ARC on the synthetic one at
// 2k, 4k and 16k blocks in every variant tried. Where OPT gains there (at
// 2k: 46,735 block hits against ARC's 18,999) is on blocks whose previous
// use lies one to eight capacities back: it keeps some blocks for several
// cache lifetimes by passing over others at once, and no use count, age or
// reuse gap told those blocks apart; the request's class tells some (with
// it each ranking alone gets at most 16.39% at 2k, 1.05x ARC). Run the
// report tests for the classic policies' table, for Adaptive on generated
// workloads of other shapes, for each of Adaptive's rankings alone, for
// the reuse per request class, and for when a class must be known:
//
//	KVTIER_CACHESIM_REPORT=1 go test -run TestReportFullTraces -v ./cachesim
//	KVTIER_CACHESIM_REPORT=1 go test -run TestReportAdaptiveGenerated -v ./cachesim
//	KVTIER_CACHESIM_REPORT=1 go test -run TestReportAdaptiveCandidates -v ./cachesim
//	KVTIER_CACHESIM_REPORT=1 go test -run TestReportClassReuse -v ./cachesim
//	KVTIER_CACHESIM_REPORT=1 go test -run TestReportClassTiming -v ./cachesim
//
// The figures of single rankings above come from the last.
//
// # What OPT computes
//
// OPT evicts by Belady's MIN: at step 3 the resident id whose next use (the
// next request holding it) is farthest goes first, ids never used again
// before all others, and among equal next uses the id at the later position
// of its request (the descendant) goes first. It costs O(refs log capacity):
// next uses are precomputed in one backward pass and the residents sit in an
// indexed max-heap. The full conversation trace (288,500 refs) takes about
// 0.2 s at any capacity.
//
// On a chained trace ([CheckChained] returns nil: every id has one
// predecessor, so each request is a root-to-node path of a forest; both
// Mooncake traces and trace.Synthetic are chained) OPT is the exact optimum,
// not a heuristic. Why:
//
//   - Any replay is a schedule: between requests the tier holds a set S of at
//     most capacity ids, and after request R it may keep any such subset of
//     S ∪ R. Every policy run by Simulate is one schedule; so is one that
//     declines to admit (it evicts the new ids at once).
//   - Count every resident id of R as a hit, prefix or not. Prefix hits are
//     never more than these counted hits, in any schedule.
//   - Belady's MIN maximises counted hits over all schedules (the classic
//     exchange argument; ids of one request share their next use, so the
//     batching does not break it).
//   - In a chained trace every request holding an id also holds all of its
//     ancestors, so an ancestor's next use is never later than its
//     descendant's, and ties go against the descendant. OPT's resident set is
//     therefore always closed under ancestors, and its counted hits are prefix
//     hits.
//
// So OPT's prefix hits are at least those of every schedule under the same
// rules: an upper bound for LRU, FIFO, S3-FIFO and any other policy (with or
// without selective admission) that holds at most capacity blocks between
// requests, and never above [Infinite]. TestOPTIsOptimal checks it against an
// exhaustive search over every eviction choice on small random traces. On a
// trace that is not chained OPT is only a strong clairvoyant heuristic: its
// schedule is still a legal one, but another may get more prefix hits.
// [PrefixIDs] renames a trace's ids by prefix, as a cache keyed by chained
// block hashes tells blocks apart: the result is chained, and OPT over it
// is exact for such a cache (the demo's reference).
//
// # Usage
//
//	reqs, _, err := trace.ReadFile("conversation_trace.jsonl", trace.Options{})
//	if err != nil { ... }
//	lru, err := cachesim.Simulate(reqs, 4096, policy.LRU, cachesim.Options{})
//	if err != nil { ... }
//	opt := cachesim.OPT(reqs, 4096)
//	ideal := cachesim.Infinite(reqs)
//	fmt.Printf("LRU %.2f%% of OPT %.2f%% (ideal %.2f%%)\n",
//		100*lru.HitRatio, 100*opt.HitRatio, 100*ideal.HitRatio)
//
// Everything here is single-threaded and allocates only per run; run
// simulations in parallel goroutines on separate inputs if needed (the
// requests are only read).
package cachesim
