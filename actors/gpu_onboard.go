package actors

import (
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"go.uber.org/zap"

	"github.com/kvtier/kvtier/blockpool"
	"github.com/kvtier/kvtier/gpu"
	"github.com/kvtier/kvtier/messages"
	"github.com/kvtier/kvtier/prefixhash"
)

// fetchOp is one onboarding: blocks [first, first+len(blocks)) of a sequence.
type fetchOp struct {
	w       *waiter
	first   int
	blocks  []blockpool.BlockID
	hashes  []uint64
	digests []prefixhash.Digest
	slots   []int
	late    bool
	copied  bool
	// deleted: a Delete of the chain came while the load was in flight;
	// only the first keep blocks are published, the rest are a miss.
	deleted bool
	keep    int
	timer   *time.Timer
	ev      *gpu.Event // the copy, once enqueued
}

// fetchGranted copies the granted leading run up; the rest of the op missed.
func (a *GPUActor) fetchGranted(ctx actor.Context, g *messages.FetchGrant) {
	op, ok := a.fetches[g.ID]
	if !ok || op.late {
		// The load already timed out: give the references straight back.
		ctx.Send(a.cfg.Pinned, &messages.FetchRelease{Slots: g.Slots})
		if ok {
			for _, id := range op.blocks {
				a.pool.Unpin(id)
			}
			a.endFetch(g.ID, op)
		}
		return
	}
	op.slots = g.Slots
	if n := len(g.Slots); n < len(op.blocks) {
		a.missFrom(op, n, g.Short)
	}
	if len(g.Slots) == 0 {
		a.endFetch(g.ID, op)
		op.w.done(a)
		return
	}
	ops := make([]gpu.CopyOp, len(g.Slots))
	for i := range ops {
		ops[i] = gpu.CopyOp{Block: int(op.blocks[i]), Host: g.Bytes[i]}
	}
	op.ev = a.startCopy(ctx, g.ID, true, gpu.H2D, ops)
}

// missFrom gives up on op's blocks from index n on, for reason why: they stay
// the sequence's, unfindable, to be recomputed. Every block given up is
// counted under its reason, in the outcome and in the tier's stats.
func (a *GPUActor) missFrom(op *fetchOp, n int, why messages.MissReason) {
	for _, id := range op.blocks[n:] {
		a.pool.Unpin(id)
	}
	lost := len(op.blocks) - n
	switch why {
	case messages.MissMismatch:
		op.w.out.Mismatch += lost
		a.stats.Mismatches += uint64(lost)
	case messages.MissLate:
		op.w.out.Late += lost
		a.stats.Timeouts += uint64(lost)
	case messages.MissFailed:
		op.w.out.Failed += lost
		a.stats.Failed += uint64(lost)
	default: // evicted between the lookup and the fetch, or not said
		op.w.out.Evicted += lost
	}
	op.blocks, op.hashes, op.digests = op.blocks[:n], op.hashes[:n], op.digests[:n]
}

func (a *GPUActor) fetchCopied(ctx actor.Context, m *copyDone) {
	op, ok := a.fetches[m.id]
	if !ok {
		a.cfg.Log.Error("gpu actor: copy done for an unknown fetch", zap.Uint64("id", m.id))
		return
	}
	ctx.Send(a.cfg.Pinned, &messages.FetchRelease{Slots: op.slots})
	op.copied = true
	if op.late {
		// The sequence moved on to fresh blocks; the late copy's blocks go back.
		for _, id := range op.blocks {
			a.pool.Unpin(id)
		}
		a.endFetch(m.id, op)
		return
	}
	if m.err != nil {
		a.cfg.Log.Warn("gpu actor: onboard copy failed", zap.Error(m.err))
		a.missFrom(op, 0, messages.MissFailed)
	} else {
		if op.deleted && op.keep < len(op.blocks) {
			a.missFrom(op, op.keep, messages.MissEvicted)
		}
		// The bytes arrived from a record whose digest matched: the blocks
		// hold computed KV of this prefix, so they are committed.
		for _, id := range op.blocks {
			a.pool.Recache(id)
			a.flags[id] |= flagBelow
			a.pool.Unpin(id)
		}
		a.stats.Onboarded += uint64(len(op.blocks))
		op.w.out.ValidTokens = (op.first + len(op.blocks)) * a.bs
		if table, err := a.pool.Table(a.scratch[:0], op.w.seq); err == nil && len(op.blocks) > 0 {
			last := op.first + len(op.blocks) - 1
			if last < len(table) && table[last] == op.blocks[len(op.blocks)-1] {
				_, _ = a.pool.Commit(op.w.seq, op.w.out.ValidTokens, nil)
			}
			a.scratch = table
		}
	}
	a.endFetch(m.id, op)
	op.w.done(a)
}

// fetchLate turns a load that missed its deadline into a miss: the sequence gets
// fresh blocks to recompute into while the copy finishes into the old ones.
func (a *GPUActor) fetchLate(ctx actor.Context, id uint64) {
	op, ok := a.fetches[id]
	if !ok || op.copied || op.late {
		return
	}
	if a.pool.NumFree() < len(op.blocks) {
		return // no blocks to swap in: the load finishes late rather than fail
	}
	op.late = true
	table, err := a.pool.Table(nil, op.w.seq)
	if err == nil {
		for i, old := range op.blocks {
			if op.first+i < len(table) && table[op.first+i] == old {
				if fresh, err := a.pool.Detach(op.w.seq, op.first+i); err == nil {
					table[op.first+i] = fresh
					a.flags[fresh], a.hits[fresh] = 0, 0
				}
			}
		}
		op.w.out.Blocks = table
	}
	op.w.out.Late += len(op.blocks)
	a.stats.Timeouts += uint64(len(op.blocks))
	// The fresh blocks may have evicted cached contents: those leave before the
	// caller is told to write.
	a.offloadEvicted(ctx, op.w)
	op.w.done(a)
}

func (a *GPUActor) endFetch(id uint64, op *fetchOp) {
	if op.timer != nil {
		op.timer.Stop()
	}
	delete(a.fetches, id)
	a.maybeFlushed()
}
