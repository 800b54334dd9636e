package actors

import (
	"fmt"
	"reflect"
	"slices"

	"github.com/asynkron/protoactor-go/actor"
	"go.uber.org/zap"

	"github.com/kvtier/kvtier/blockpool"
	"github.com/kvtier/kvtier/gpu"
	"github.com/kvtier/kvtier/messages"
)

// offloadOp writes blocks down; waiters are allocations that reuse evicted
// blocks and must not write them before the copy is out.
type offloadOp struct {
	blocks  []blockpool.BlockID
	items   []messages.OffloadItem
	evict   bool // the blocks were evicted: their flags are not theirs any more
	waiters []*waiter
	// then runs once the copy is enqueued (or found unnecessary): a load into
	// the same blocks is enqueued after it, so stream order puts it behind.
	then   []func(actor.Context)
	slots  []int
	hashes []uint64
	ev     *gpu.Event // the copy, once enqueued
}

// offloadEvicted writes down evicted blocks whose contents are nowhere below yet;
// w (the allocation that reuses them) waits for the copy.
// It returns the offload, or nil when nothing needs copying.
func (a *GPUActor) offloadEvicted(ctx actor.Context, w *waiter) *offloadOp {
	a.evicted = a.pool.DrainEvicted(a.evicted[:0])
	if len(a.evicted) == 0 {
		return nil
	}
	a.stats.Evictions += uint64(len(a.evicted))
	if !a.lower() || a.cfg.Ingestion != IngestEvict {
		return nil
	}
	op := &offloadOp{evict: true}
	for _, e := range a.evicted {
		if a.flags[e.Block]&flagBelow != 0 {
			continue // already written down
		}
		op.blocks = append(op.blocks, e.Block)
		op.items = append(op.items, messages.OffloadItem{Hash: uint64(e.Hash), Digest: e.Digest, Tokens: a.bs})
	}
	if len(op.blocks) == 0 {
		return nil
	}
	op.waiters = append(op.waiters, w)
	w.pending++
	a.startOffload(ctx, op)
	return op
}

// offloadResident writes down blocks still in the pool (free cached or held),
// pinning them for the copy.
func (a *GPUActor) offloadResident(ctx actor.Context, ids []blockpool.BlockID) {
	if !a.lower() || len(ids) == 0 {
		return
	}
	op := &offloadOp{}
	for _, id := range ids {
		// Only committed blocks (cached) hold computed KV to write down.
		h, cached := a.pool.BlockHash(id)
		if !cached || a.flags[id]&(flagBelow|flagMoving) != 0 {
			continue
		}
		d, _ := a.pool.BlockDigest(id)
		a.pool.Pin(id)
		a.flags[id] |= flagMoving
		op.blocks = append(op.blocks, id)
		op.items = append(op.items, messages.OffloadItem{Hash: uint64(h), Digest: d, Tokens: a.bs})
	}
	if len(op.blocks) > 0 {
		a.startOffload(ctx, op)
	}
}

func (a *GPUActor) startOffload(ctx actor.Context, op *offloadOp) {
	if op.evict {
		for _, id := range op.blocks {
			a.pool.Pin(id)
		}
	}
	id := a.newID()
	a.offload[id] = op
	ctx.Request(a.cfg.Pinned, &messages.OffloadRequest{ID: id, Items: op.items})
}

// offloadGranted starts the device-to-host copy of the granted blocks.
func (a *GPUActor) offloadGranted(ctx actor.Context, g *messages.OffloadGrant) {
	op, ok := a.offload[g.ID]
	if !ok {
		a.cfg.Log.Error("gpu actor: grant for an unknown offload", zap.Uint64("id", g.ID))
		return
	}
	var ops []gpu.CopyOp
	keep := op.blocks[:0]
	for i, slot := range g.Slots {
		id := op.blocks[i]
		switch slot {
		case messages.SlotDenied:
			a.stats.Denied++
			a.releaseOffloadBlock(op, id, false)
		case messages.SlotExists:
			a.releaseOffloadBlock(op, id, true)
		default:
			ops = append(ops, gpu.CopyOp{Block: int(id), Host: g.Bytes[i]})
			op.slots = append(op.slots, slot)
			op.hashes = append(op.hashes, op.items[i].Hash)
			keep = append(keep, id)
		}
	}
	op.blocks = keep
	if len(ops) > 0 {
		if err := a.waitFences(op.blocks); err != nil {
			ctx.Send(ctx.Self(), &copyDone{id: g.ID, err: err})
		} else {
			op.ev = a.startCopy(ctx, g.ID, false, gpu.D2H, ops)
		}
	}
	for _, f := range op.then {
		f(ctx)
	}
	op.then = nil
	if len(ops) == 0 {
		a.finishOffload(ctx, g.ID, op)
	}
}

func (a *GPUActor) offloadCopied(ctx actor.Context, m *copyDone) {
	op, ok := a.offload[m.id]
	if !ok {
		a.cfg.Log.Error("gpu actor: copy done for an unknown offload", zap.Uint64("id", m.id))
		return
	}
	ctx.Send(a.cfg.Pinned, &messages.OffloadDone{Slots: op.slots, Hashes: op.hashes, Err: m.err})
	if m.err != nil {
		a.stats.Failed += uint64(len(op.blocks))
		a.cfg.Log.Warn("gpu actor: offload copy failed", zap.Error(m.err))
	} else {
		a.stats.Offloaded += uint64(len(op.blocks))
	}
	for _, id := range op.blocks {
		a.releaseOffloadBlock(op, id, m.err == nil)
	}
	a.finishOffload(ctx, m.id, op)
}

// releaseOffloadBlock ends a block's part in an offload: flags (for blocks that
// still hold what was copied) and the copy's pin.
func (a *GPUActor) releaseOffloadBlock(op *offloadOp, id blockpool.BlockID, below bool) {
	if !op.evict {
		a.flags[id] &^= flagMoving
		if _, cached := a.pool.BlockHash(id); below && cached { // not deleted meanwhile
			a.flags[id] |= flagBelow
		}
	}
	a.pool.Unpin(id)
}

func (a *GPUActor) finishOffload(ctx actor.Context, id uint64, op *offloadOp) {
	delete(a.offload, id)
	for _, w := range op.waiters {
		w.done(a)
	}
	if !op.evict && len(a.parked) > 0 {
		a.retryParked(ctx)
	}
	a.maybeFlushed()
}

// waitFences makes the copy stream wait, before the next copy, on the
// fences of the blocks' commits that are not done yet (each fence once):
// the copy then reads the KV the engine finished computing.
func (a *GPUActor) waitFences(blocks []blockpool.BlockID) error {
	var waited []gpu.Fence
	for _, id := range blocks {
		f := a.fence[id]
		if f == nil {
			continue
		}
		if gpu.FenceDone(f) {
			a.fence[id] = nil
			continue
		}
		if slices.ContainsFunc(waited, func(w gpu.Fence) bool { return sameFence(w, f) }) {
			continue
		}
		if err := a.cfg.Stream.WaitFence(f); err != nil {
			return fmt.Errorf("kvtier: offload waiting on the commit's fence: %w", err)
		}
		waited = append(waited, f)
	}
	return nil
}

// sameFence reports whether a and b are one fence, without the panic that
// == gives on a fence type that is not comparable.
func sameFence(a, b gpu.Fence) bool {
	t := reflect.TypeOf(a)
	return t == reflect.TypeOf(b) && t.Comparable() && a == b
}
