// Package schedcache adapts a kvtier Manager to the scheduler's Cache
// interface, so that scheduler.Run replays a trace through the real tiers:
// the GPU block pool, pinned host memory and disk, with real copies between
// them.
//
// # Mapping
//
// Each scheduler call becomes one Manager message: Allocate one
// AllocateInOrder (first come, first served), Append one AppendBatch, Free
// one FreeBatch, Flush one Manager.Flush; FreeFinished (finished sequences)
// one Manager.Step that commits no new tokens but gives each request's blocks
// its class, policy.OutputClass of its output, for the lower tiers' eviction
// policies, and frees them (Options.NoClass: one FreeBatch). The
// Manager's "no space" error (kvtier.ErrNoSpace, a *blockpool.NoSpaceError)
// becomes scheduler.ErrNoBlocks, wrapping the original. Append and Commit
// refuse slices of different lengths with ErrBadArgs, changing nothing. An
// allocation reports
// the result's tokens from each tier (AllocResult.Tokens) in the scheduler's
// per-tier fields; its Ready channel is the
// Manager's completion, and Loaded is the completion's ValidTokens minus the
// GPU tokens: a load that missed the Manager's read deadline or failed leaves
// the rest to recompute.
//
// # Swap
//
// Swap is Manager.Swap: the preempted sequences' full blocks are written down to
// pinned memory and the sequences freed, so a readmission finds its prefix on
// the GPU or in pinned memory and recomputes only the partial last block. A
// Manager with no pinned tier answers scheduler.ErrUnsupported, and the
// scheduler preempts by recomputation.
//
// # Determinism
//
// The Manager's copies run asynchronously: whether a block evicted in one step
// is in pinned memory when the next step looks it up, and whether a load's
// Ready is closed when the scheduler next looks at it, depend on goroutine
// timing. Options.Sync makes Allocate wait for its loads and puts a Flush
// barrier after every call that may start writes, so that a replay on the
// scheduler's logical clock gives the same numbers every time (at the cost of
// a round trip through each tier actor per call). Disable the Manager's wall-clock
// read deadline (kvtier.Config.ReadDeadlineBase < 0) as well; the scheduler's
// Timeout policy then bounds loads on the run's own clock.
//
// Sync cannot order what happens inside one Manager call. Two races remain
// with a disk tier: a disk write quota (kvtier.Config.DiskWriteQuota) that a
// step's writes reach denies a timing-dependent number of them, and when the
// pinned tier is so small that it drains to disk everything it takes in, an
// allocation's disk lookup races the drains its own evictions start. Give
// the disk a quota the run never reaches and the pinned tier room beyond what
// it drains ahead of need (max(OffloadAhead, slots/16) free slots): in the
// tests, 160 and 4,096 pinned slots replay exactly, 48 slots (all drained
// ahead of need with the default OffloadAhead of 64) do not.
//
// Without a disk, GPU + pinned memory does not replay exactly on long traces
// either when the pinned tier runs ARC or Adaptive: on the full Mooncake
// conversation trace the demo's GPU + pinned run (pinned Adaptive) gave
// 14.27-14.76% over nine runs, and with a pinned write quota it never
// reaches still differed between runs. On the trace's first 3,000 requests
// GPU only and GPU + pinned LRU repeat exactly, ARC and Adaptive do not (the
// tokens served from pinned memory differ by about 1%). The race inside one
// call that causes it is partly traced: the pinned tier receives the GPU's
// next offload request before or after the previous offload's commit,
// depending on when the copy ends, and a load's reads before or after a
// commit. With kvtier.Config.SerialOffloads (one offload in flight at a
// time, loads' requests queued behind it) GPU + pinned ARC repeats exactly
// on the full trace (13.80% in two runs) and Adaptive on its first 3,000
// requests (12.68% three times); over the full trace Adaptive still varies
// a little (14.16-14.25%): a grant can find a block still being read, and
// its second-use ranking may rank a block just read by its previous use.
// The embedded sample repeats exactly either way.
//
// # Usage
//
//	m, err := kvtier.New(kvtier.Config{GPUBlocks: 1024, BlockTokens: 512, PinnedBytes: 128 << 20})
//	if err != nil { ... }
//	defer m.Close(ctx)
//	res, err := scheduler.Run(ctx, schedcache.New(m, schedcache.Options{Sync: true}), trace.Sample(), scheduler.Config{})
package schedcache
