// Package gpu describes where KV cache bytes live and moves them between
// device memory and host memory: element types, the per-block layout of a
// model's KV cache, bounds-checked tensor views, and a small Device
// abstraction with a host backend (always built) and a CUDA backend (build
// tag cuda).
//
// # Layout
//
// A ModelSpec gives layers, KV heads, head dimension and DType; NewLayout
// turns it and a block size in tokens into byte sizes. A block's host form
// (what stream copies, the pinned tier and disk hold) is laid out
// [layer][kv][token][head][dim], so Layout.Region gives one contiguous
// byte range per (layer, K or V). A Llama-3-8B-like spec costs 128 KiB
// per token.
//
// A layout's Kind places blocks in a device arena (NewKVArena):
// BlockContiguous, [block][layer][kv][token][head][dim], keeps each block
// in its host form, so a tier copy is one memcpy per block;
// LayerSeparate, [layer][kv][block][token][head][dim] as vLLM's
// FlashAttention cache, makes each layer's K and V one dense tensor for a
// kernel, and a tier copy gathers or scatters a block's 2 x Layers regions
// (one cuMemcpy2DAsync per block on CUDA). Layout.ArenaOffset,
// LayerView and LayerTensor locate regions in an arena;
// Arena.RegionOffset, RegionPtr and DevicePtr give their device addresses;
// Arena.ReadRegion and WriteRegion move one (block, layer, K or V, token
// range) synchronously, for a reference engine.
//
// # Views
//
// A TensorView maps indices to byte offsets in a storage of known size.
// NewTensorView refuses any view with an element outside the storage, so
// Address and Slice never need to re-check the storage; they fail with
// ErrShape or ErrOutOfRange on bad arguments. Views never own memory.
//
// # Devices, arenas and streams
//
// A Device hands out an Arena (numBlocks x blockBytes of device memory),
// pinned host buffers (AllocHost) and Streams. A Stream copies whole
// blocks in batches, asynchronously and in order; each batch returns an
// *Event whose Done channel closes when the copies are finished. Batches
// are validated up front: a bad op rejects the whole batch with a
// *CopyError and nothing is enqueued.
//
// Host memory in a CopyOp must lie inside a live buffer from the same
// device's AllocHost, on both backends: the CUDA driver copies
// asynchronously only from page-locked memory it allocated, and the host
// backend refuses the same copies (ErrNotPinned) so that wiring that would
// fail on a GPU fails in tests too. A tier's host pool takes its memory
// from AllocHost (pinned.DeviceAlloc).
//
// Default returns the build's backend. Without tags it is the host
// backend (NewHost): arenas are anonymous mmaps (an allocation the machine
// cannot back fails with ErrOutOfMemory instead of crashing) and each
// stream is a goroutine doing real copies, optionally paced to a
// PCIe-like bandwidth on an injectable Clock, with a fault hook to slow or
// fail batches in tests.
// With -tags cuda it is NewCUDA: cuMemAlloc arenas, cuMemAllocHost
// buffers, cuMemcpy*Async on a CUDA stream and an event per batch.
//
// # Ownership
//
// The caller frees what it allocates (Arena.Free, HostBuffer.Free,
// Stream.Close) or closes the Device, which releases everything. The host
// memory of a CopyOp belongs to the stream until the batch's event is
// done; the ops slice itself is not retained.
//
// # Usage
//
//	dev, err := gpu.Default()
//	if err != nil { ... }
//	defer dev.Close()
//	layout, err := gpu.NewLayout(gpu.Llama3_8B, 16) // 2 MiB blocks
//	arena, err := dev.NewArena(1024, layout.BlockBytes())
//	stream, err := dev.NewStream(arena)
//	buf, err := dev.AllocHost(32 * layout.BlockBytes())
//	ops := []gpu.CopyOp{{Block: 7, Host: buf.Bytes()[:layout.BlockBytes()]}}
//	ev, err := stream.CopyD2H(ops) // offload block 7
//	if err := ev.Wait(ctx); err != nil { ... }
package gpu
