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
// kvtier's contract lets a sequence hit a GPU block that another live sequence
// is still writing: the block is findable from its Allocate on. So a reader may
// check a GPU hit only once its writer is done. Every goroutine raises a
// per-hash counter for each block hash of its prompt before Allocate and lowers
// it once it has written the blocks it computes (at once for the blocks it hit).
// A reader that finds a hit block's counter at zero after its own Ready knows
// the block's writer, whose Allocate came before the reader's, has finished, and
// the atomic counter orders the writer's bytes before the read; a reader that
// finds it above zero skips that block (counted). Blocks onboarded from pinned
// memory are always checked: offloads read only blocks no sequence holds.
// Appended tokens are unique to their sequence, so the blocks Append fills
// (whose ids the API does not return, and which are never written) are never
// hit by anyone.
package stress
