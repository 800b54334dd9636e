// Package kvtier manages the KV cache of an LLM inference server across memory
// tiers: GPU memory, pinned host memory, local disk and a Redis tier shared by
// many nodes.
//
// A Manager is an embedded actor system: separate actors own the GPU block pool,
// the pinned host pool, the disk tier and the prefix index and exchange
// messages, so allocation, eviction and copies proceed across goroutines with no
// shared lock. The Manager's methods are safe for concurrent use; each takes a
// context and sends one message per call: the batch forms and Step carry a whole
// scheduler step.
//
// # Allocation and onboarding
//
// Allocate gives a sequence its block table. Leading blocks already on the GPU are
// shared; blocks that continue the prefix below the GPU are copied up
// (onboarded), from disk through pinned memory under one deadline. The result
// counts its leading tokens per tier in Tokens, a TierTokens indexed by
// Tier.Index: Tokens.Of(GPU) are ready, Tokens.Below() are loading (each
// counted under the tier it comes from); Ready completes when the copies are
// done and reports how many tokens hold valid KV. A load that misses its
// deadline becomes a miss to recompute (counted), never an error: the outcome
// then carries a new block table whose late blocks were swapped for fresh
// ones, since the late copy still finishes into the old ones.
//
// # Offload
//
// Under the default ingestion policy (IngestEvict) a cached GPU block's bytes go
// to pinned memory before the block is reused, and ahead of need once the GPU's
// blocks are more than OffloadThreshold full. IngestAll writes blocks through as
// soon as their sequence moves past them; IngestHot after HotHits hits. Writes run
// under an in-flight quota: over it a write is skipped and counted as denied;
// allocation never waits on the quota. The pinned tier drains its victims to the
// disk tier ahead of need; the disk tier keeps every acknowledged block across a
// restart and verifies every read. Swap preempts a sequence by writing its full
// blocks down and freeing it.
//
// # Contract
//
// The caller writes a block's KV after Allocate (or Append) gives it the block
// and after Ready completes, then calls Commit with the number of computed
// tokens. Only committed blocks are hits for other sequences, written to lower
// tiers, or swapped out; Free discards blocks never committed (an abort).
//
// A prompt that is a whole number of blocks and fully cached gets
// ValidTokens = len(prompt), which leaves the engine no token to compute the
// first output's logits from. To keep one, as vLLM caps a hit one token
// short, allocate with AllocRequest.MaxHitTokens = len(prompt)-1: the hit is
// rounded down to whole blocks, so the last block is fresh and recomputed
// (for a one-token prompt pass -1, serving none: 0 means no cap).
//
// A GPU
// hit is verified token by token along its whole prefix in its namespace
// (salt, ModelID, LoRA, layout); every block below the GPU carries a SHA-256
// digest of its namespace and whole prefix, verified before it is served.
//
// On a GPU the engine commits once its kernels are enqueued, naming the
// forward pass's fence (CommitItem.After): a *gpu.CUDAFence over an event
// recorded on the compute stream. The blocks are hits at once, since the
// engine's later kernels run after its own, and every copy that reads them
// to a lower tier waits for the fence on the copy stream (cuStreamWaitEvent),
// so it reads finished KV; a copy up into a block a freed sequence held
// waits for the fence of the last commit that covered the block's tokens
// and for that of the freed sequence's last commit, so its pass can
// neither write over the loaded bytes nor attend to them in place of its
// own prefix (to abort a sequence whose pass commits nothing, commit 0
// tokens naming the pass's fence, then Free). An engine whose writes are not work on a CUDA
// stream (one computing on the CPU) signals a gpu.SignalFence made for the
// Manager's device (Manager.Device), on either backend; on the host backend
// any gpu.Fence works. A commit naming a fence the device cannot wait on fails with
// gpu.ErrBadFence and commits nothing. A fence never signalled holds Flush
// and Close until their contexts end; the copy is then dropped.
//
// # Ownership
//
// Allocate, AllocateBatch, AllocateInOrder, Append, AppendBatch and Step
// read the token slices of their requests while the call runs, without
// copying them (for 512-token blocks the copy cost as much as the
// allocation): the caller must not modify them until the call returns,
// however it returns. Once it has returned, the Manager holds no reference
// to them. Results are the caller's.
//
// # Usage
//
//	m, err := kvtier.New(kvtier.Config{GPUBlocks: 4096, BlockTokens: 16, PinnedBytes: 8 << 30})
//	if err != nil { ... }
//	defer m.Close(ctx)
//	res, err := m.Allocate(ctx, kvtier.AllocRequest{Seq: 1, Tokens: prompt, MaxHitTokens: len(prompt) - 1})
//	<-res.Ready.Done() // then compute from res.Ready.Outcome().ValidTokens
//	err = m.Commit(ctx, 1, kvtier.AllTokens) // the prompt's KV is written
//	blocks, err := m.Append(ctx, 1, []int64{tok}) // decode: new block ids, if any
//	// ... the forward pass over tok writes its KV ...
//	err = m.Commit(ctx, 1, kvtier.AllTokens) // only then: tok's KV is written
//	err = m.Free(ctx, 1)
package kvtier
