// Package stress holds kvtier's race-detector stress tests: many goroutines drive
// one Manager through random allocate, append, free, exists, delete and prefetch
// calls over shared prompt stems and several tenants, with a reference model
// checked after every Flush barrier and faults injected through the GPU device.
//
// # Running
//
//	go test -race ./stress/
//
// The short run is the CI run. Knobs, read from the environment:
//
//	KVTIER_STRESS_GOROUTINES  goroutines per test (default 64)
//	KVTIER_STRESS_OPS         operations per goroutine per phase (default 100)
//	KVTIER_SOAK=1             run TestSoak, the long run
//	KVTIER_SOAK_OPS           operations of the soak in all (default 1e6)
//	KVTIER_STRESS_DEADLINE_S  seconds one test may run (default 120, 360 with -tags invariants)
//
// # Data integrity under concurrency
//
// A block is findable only once its sequence commits it: Allocate and Append
// hand out blocks that no one else can hit until Commit says their tokens
// are computed, and Free discards blocks never committed. A worker writes
// the blocks it computes, then commits; so every GPU hit another worker gets
// is a committed block whose bytes were written before the Commit message
// that published it, and the actor's messages order the write before the
// reader's read. Workers still raise a per-hash counter for each block hash
// of their prompt before Allocate and lower it once they have written and
// committed what they compute; a reader that finds a hit block's counter
// above zero skips checking it (counted as skipped while written). Under
// commit-before-cache this is only conservative: it never hides a wrong
// block from the onboard checks, which always run, since offloads read only
// committed blocks. Appended tokens are unique to their sequence and never
// committed, so the blocks Append fills (whose ids the API returns, and
// which are never written) are never hit by anyone.
//
// # Forged collisions
//
// TestForgedCollisions mixes into the load prompts forged with
// internal/xxforge so that their chained 64-bit block hashes equal a
// victim stem's: in the victim tenant's own namespace (only the tokens
// tell the blocks apart on the GPU) and from the next tenant's (the
// namespace and the SHA-256 prefix digest tell them apart). Forged token
// ids lie far outside any vocabulary (VocabSize 0 accepts them). Every
// block a reader is given, a GPU hit or a load from pinned memory or disk,
// must hold its own prefix's bytes, which follow its tokens and not its
// hash; the collisions must reach the digest checks below the GPU (counted
// mismatches); and afterwards each tenant's victim prompts and the forged
// prompts sharing their hashes both hit on the GPU, whichever committed
// first. The forger derives the Manager's namespace keys as manager.go
// does and checks them against Residency, so a change there fails loudly.
// Below the GPU the victim's write displaces a squatter's block in pinned
// memory (TestForgedSquatterBelowTheGPU).
//
// # Engines ahead of their KV
//
// TestEarlyCommitsAndLateWrites runs workers that act as an engine which
// enqueues its work at once. Some commit before their allocation's Ready:
// while loads from below are in flight (copies up are slowed at random)
// the commit must be refused with ErrNotReady and nothing else may refuse
// it, an accepted commit must find Ready complete when there were loads,
// and a refused one changes nothing the later checks see. Others commit
// while their blocks still hold poison, naming a fence they signal once the
// real bytes are written: every commit writes through to pinned memory
// (IngestAll), so a copy down that did not wait for the fence would store
// the poison, and a later load would bring it back (the failure says so).
//
// # Probes
//
// After its last phase each concurrent run probes, from one goroutine, the
// quiescent state the load left: the GPU free queue gives up blocks that
// hold nothing cached before cached ones, and those least recently freed
// first; with a disk tier, the misses its eviction policy hears (the
// index passing on the GPU's demand) are exactly a sequence's computed
// misses, once, at its first commit past what the cache gave it. Neither
// shows in the random load itself, whose hits and misses nothing predicts.
//
// # Deadlines
//
// Every test arms a deadline (2 minutes, 6 under the invariants build;
// KVTIER_STRESS_DEADLINE_S overrides it): a test still running then ends
// the binary with a panic that names it and sums up where every goroutine
// waits, instead of running on to go test's -timeout. TestSoak arms one per
// phase.
//
// # The reference engine
//
// TestReferenceEngine runs a real transformer (internal/enginetest) through
// the Manager from many goroutines under copy faults and short load
// deadlines, with chunked prefill, preemption and aborts, and checks every
// logit against a recompute with no cache.
package stress
