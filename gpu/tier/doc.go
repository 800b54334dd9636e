// Package tier is the GPU tier's logic: a plain, single-threaded state
// machine over the block pool (blockpool) that decides allocation, commit,
// eviction, offload to the pinned tier below and loads from it. It never
// touches a stream, a goroutine, a timer or the wall clock: each event it is
// fed queues what must happen in a Ready, which its executor (the GPU actor
// in actors/) carries out and answers with further events — raft's
// Ready/Advance shape. Tests drive it directly, deterministically.
//
// # Events
//
//	caller requests     AllocateBatch, AllocateInOrder, Step, CommitBatch, AppendBatch, FreeBatch, Query, Flush
//	answers from below  LookupDone (prefix index), FetchGranted, OffloadGranted (pinned tier)
//	completions         CopyDone (a copy batch from Ready.Copies left the stream)
//	time                SetNow (the clock, before each event), Deadline (a Ready.Timers timer fired)
//	end                 Stop
//
// # Ready
//
// After one or more events, Ready returns, in the order they must be done:
// Copies to enqueue on the stream (each behind the fences of the commits
// whose blocks it reads or overwrites), messages for the pinned tier and for the prefix
// index, Timers to arm and cancel, Replies to run (answers to callers, and
// completions of allocations' Ready), and, after Stop, callers to answer
// once the copies they wait on have left the stream.
//
// # Conversations with the tier below
//
//	write:  OffloadRequest -> OffloadGrant (slots) -> copy D2H -> CopyDone -> OffloadDone
//	read:   FetchRequest (with a deadline) -> FetchGrant (slots) -> copy H2D -> CopyDone -> FetchRelease
//	late:   Deadline before CopyDone: the sequence gets fresh blocks to recompute into;
//	        the copy still lands in the old ones, which are released when it does.
//	split:  under a deadline, a load whose leading run pinned memory holds and whose
//	        rest is on disk or remote sends two FetchRequests (a timer each); the later
//	        part publishes only after the earlier one published all of its blocks, and
//	        is given up when the earlier one falls short.
//	cut:    a part that reads below asks for an earlier deadline than its own (askBy:
//	        less the measured copy-up time of its blocks and lag of a late answer);
//	        the tiers below answer by then with the leading blocks they have read,
//	        which are copied up in time and count.
//
// # Conversation with the prefix index
//
//	Lookup -> LookupResult (each chain's run below) -> allocation; with
//	Config.ReportDemand, Demand (the looked-up blocks neither pinned memory
//	nor the disk held) once the engine computed them (the sequence's first
//	commit past what the cache gave it) or the shared tier's copies landed;
//	the index tells the disk of them.
//
// # Block state kept here
//
// Beside the pool's own states (free, free-cached, held; see blockpool),
// each block carries: below (a copy of its committed bytes is in the
// pinned tier or under it; cleared by BelowGone, which also keeps a load of
// the hash in flight from setting it when it lands), moving (an offload of it is in flight; the pool pins it),
// a hit count (IngestHot) and the fence of the last commit that covered
// its tokens, which copies down from it and copies up into it once it was
// taken again wait on.
package tier
