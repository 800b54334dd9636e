// Package pinned is kvtier's host memory tier: a fixed pool of page-aligned
// slots, one KV block each, carved out of one pinned (page-locked) mapping.
//
// A Pool is a plain, non-thread-safe value. One owner (the host tier's
// actor) calls it; copy workers only touch the bytes of slots the owner
// handed them, under the ownership rules below. The pool never copies data
// and never talks to a GPU or a disk: it decides which slot holds which key
// and which keys to evict, and the caller moves the bytes.
//
// # Sections
//
//   - Memory: New maps Config.CapacityBytes of anonymous memory and tries to
//     mlock it when Config.Lock is set; a lock failure is reported by Locked,
//     not returned as an error. Config.Alloc replaces the allocator:
//     DeviceAlloc(dev) takes the memory from a gpu.Device's AllocHost
//     (cuMemAllocHost on CUDA), which a pool must do when its slots are the
//     host side of the device's stream copies. Each slot starts on a page
//     boundary.
//   - Slot lifecycle: every slot is in exactly one State; see below.
//   - Readers: Acquire takes a read reference on a Resident slot and counts a
//     hit (or a miss); Release drops it. A slot with readers is never evicted;
//     removing it dooms it until the last reader leaves.
//   - Eviction: the pool orders Resident slots with a policy.Policy (Adaptive by
//     default, or LRU, FIFO, S3-FIFO, ARC); CommitClass tells one that reads
//     hints (policy.Hinted) the class of the request that brought the block
//     in, which the Tier takes from the GPU's offload (BlockChain.Class) and
//     passes down with the block. Evict moves victims to Draining so the caller
//     can copy their bytes to a lower tier before calling Free; EvictOne frees
//     at once for a tier with nowhere to move them.
//   - Checks: CheckInvariants walks all state. Building with -tags invariants
//     runs it after every mutating call and panics on the first violation.
//   - The tier: Tier is the host tier's whole logic over a Pool — offload
//     grants, fetches, drains to the tier below and reads from it, deletes,
//     flush epochs, stats — as a plain state machine: its owner
//     (actors.PinnedActor) feeds it one event at a time and does what its
//     Ready says (see Tier for the events). It reads no clock but SetNow's.
//
// # Slot lifecycle
//
//	Free --Reserve--> Filling --Commit--> Resident --Evict--> Draining --Free--> Free
//	                  Filling --Abort---> Free
//	                                      Resident --Remove--> Free (no readers)
//	                                      Resident --Remove--> Doomed (readers) --last Release--> Free
//
// Every transition is O(1); Evict is O(1) per victim plus the slots with
// readers that the policy skips.
//
// # Ownership of slot bytes
//
// Bytes(slot) returns the slot's memory. Who may touch it depends on the
// slot's state:
//
//   - Filling: exactly one writer (the copy worker the owner gave the slot to)
//     may write it until the owner calls Commit or Abort.
//   - Resident: readable by copy workers while they hold a reader reference
//     (from Acquire) and until they Release it. Nobody writes it.
//   - Doomed: as Resident, for the readers that still hold references.
//   - Draining: readable (to copy to a lower tier) until the owner calls Free.
//   - Free: nobody; Bytes panics.
//
// # Errors and panics
//
// Expected outcomes the caller branches on are sentinel errors: ErrNoSpace
// (evict or deny), ErrExists. Bad configuration is a *ConfigError; memory
// the allocator cannot provide (ENOMEM) is ErrAlloc, never a crash.
// Contract violations (a transition from the wrong state, Release without a
// reader, an out-of-range slot, any use after Close) panic with a
// "kvtier: pinned:" prefix.
//
// # Usage
//
//	pool, err := pinned.New(pinned.Config{
//		CapacityBytes: 1 << 30,
//		SlotBytes:     blockBytes,
//		Policy:        policy.S3FIFO,
//		Alloc:         pinned.DeviceAlloc(dev), // slots are dev's copy targets
//	})
//	if err != nil {
//		return err
//	}
//	defer pool.Close()
//
//	slot, err := pool.Reserve(key)
//	if errors.Is(err, pinned.ErrNoSpace) {
//		for _, v := range pool.Evict(1) {
//			// copy pool.Bytes(v.Slot) to disk, then:
//			pool.Free(v.Slot)
//		}
//		slot, err = pool.Reserve(key)
//	}
//	if err != nil {
//		return err
//	}
//	copy(pool.Bytes(slot), block) // or a device-to-host copy
//	pool.Commit(slot)
//
//	if slot, ok := pool.Acquire(key); ok {
//		use(pool.Bytes(slot))
//		pool.Release(slot)
//	}
package pinned
