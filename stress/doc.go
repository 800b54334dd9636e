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
// # The reference engine
//
// TestReferenceEngine runs a real transformer (internal/enginetest) through
// the Manager from many goroutines under copy faults and short load
// deadlines, with chunked prefill, preemption and aborts, and checks every
// logit against a recompute with no cache.
package stress
