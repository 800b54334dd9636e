package actors

import (
	"errors"

	"github.com/asynkron/protoactor-go/actor"
	"go.uber.org/zap"

	"github.com/kvtier/kvtier/disk"
	"github.com/kvtier/kvtier/messages"
)

// diskWriteReq tracks one LowerWrite until every item has finished.
type diskWriteReq struct {
	seq    uint64
	sender *actor.PID
	slots  []int // every item's slot, returned in LowerWriteDone
	// announce is the hashes published, minus those that left the disk
	// again before the request finished; it goes to the index as Added and
	// back as LowerWriteDone.Written.
	announce []uint64
	pending  int // items handed to workers, and earlier requests waited on, not yet completed
	// after are later requests that skipped a hash this one writes: each
	// answers only once this one has announced it, so the block is on the
	// disk, for the index and the event stream, before the slot that held
	// it above is given back.
	after []*diskWriteReq
}

// waitFor makes req wait for the earlier request that is writing hash h or
// has written it without announcing it yet, if any.
func (a *DiskActor) waitFor(req *diskWriteReq, h uint64) {
	owner := a.writing[h]
	if owner == nil {
		owner = a.unannounced[h]
	}
	if owner != nil && owner != req {
		owner.after = append(owner.after, req)
		req.pending++
	}
}

// write plans every item of m and hands the planned ones to the workers.
// Items already on disk are skipped; items over the quota or with no
// evictable slot are denied. Victims evicted to make room leave the index
// at once.
func (a *DiskActor) write(ctx actor.Context, m *messages.LowerWrite) {
	req := &diskWriteReq{seq: a.writeSeq, sender: ctx.Sender(), slots: make([]int, len(m.Items))}
	a.writeSeq++
	a.writes[req.seq] = req
	if a.stopped {
		for i, it := range m.Items {
			req.slots[i] = it.Slot
		}
		a.stats.denied += uint64(len(m.Items))
		a.replyWrite(ctx, req)
		return
	}
	var evicted []uint64
	for i, it := range m.Items {
		req.slots[i] = it.Slot
		a.undoom(it.Hash, it.Digest)
		if m, ok := a.store.Meta(it.Hash); ok && m.Digest == it.Digest {
			a.stats.skipped++
			a.waitFor(req, it.Hash)
			continue
		}
		if a.writesInFlight >= a.cfg.WriteQuota {
			a.stats.denied++
			continue
		}
		if it.Tokens < 0 {
			a.stats.failed++
			a.log.Error("disk actor: write with a negative token count", zap.Uint64("hash", it.Hash), zap.Int("tokens", it.Tokens))
			continue
		}
		if len(it.Bytes) > a.store.PayloadBytes() {
			a.stats.failed++
			a.log.Error("disk actor: payload larger than a disk slot",
				zap.Uint64("hash", it.Hash), zap.Int("bytes", len(it.Bytes)), zap.Int("max", a.store.PayloadBytes()))
			continue
		}
		op, err := a.store.PlanWrite(disk.Meta{
			Hash: it.Hash, Parent: it.Parent, Namespace: it.Namespace, Tokens: it.Tokens, Digest: it.Digest, Chain: chainOf(&it), Class: it.Class,
		})
		switch {
		case errors.Is(err, disk.ErrExists):
			if m, ok := a.store.WritingMeta(it.Hash); ok && m.Digest == it.Digest {
				// being written by an earlier request
				a.stats.skipped++
				a.waitFor(req, it.Hash)
				continue
			}
			// Another prefix's block under the hash, being written or read:
			// not written now. Not reported written either: pinned memory
			// keeps a block written through, and of a drain it drops it
			// tells the GPU (IndexUpdate.Dropped), as the index lists the
			// hash on the disk for the other prefix.
			a.stats.denied++
			continue
		case errors.Is(err, disk.ErrNoSpace):
			a.stats.denied++
			continue
		case err != nil:
			a.stats.failed++
			a.log.Warn("disk actor: plan write", zap.Uint64("hash", it.Hash), zap.Error(err))
			continue
		}
		if v, ok := op.Victim(); ok { // v.Hash == it.Hash: another prefix's block, displaced
			evicted = append(evicted, v.Hash)
		}
		a.writesInFlight++
		req.pending++
		a.writing[it.Hash] = req
		a.workers.submit(&diskJob{write: op, payload: it.Bytes, wreq: req})
	}
	a.forget(ctx, evicted)
	if req.pending == 0 {
		a.replyWrite(ctx, req)
	}
}

// finishWrite completes one written item and answers its request when it
// was the last.
func (a *DiskActor) finishWrite(ctx actor.Context, j *diskJob) {
	err := j.err
	if j.cancelled {
		err = ErrDiskStopped
	}
	a.store.CompleteWrite(j.write, err)
	if a.cfg.writeFault != nil {
		a.cfg.writeFault(j.write.Meta().Hash)
	}
	a.writesInFlight--
	if v, ok := j.write.Victim(); ok {
		a.victimGone(v.Hash, j.write.Scrubbed())
	}
	req := j.wreq
	h := j.write.Meta().Hash
	if a.writing[h] == req {
		delete(a.writing, h)
	}
	switch {
	case a.removeLanded(h, err == nil): // deleted while it was written
	case err == nil:
		a.stats.written++
		req.announce = append(req.announce, h)
		a.unannounced[h] = req
	case !j.cancelled:
		a.stats.failed++
	}
	req.pending--
	if req.pending == 0 {
		a.replyWrite(ctx, req)
	}
}

// replyWrite announces the request's surviving writes to the index, returns
// every slot to the requester and releases waiting flushes.
func (a *DiskActor) replyWrite(ctx actor.Context, req *diskWriteReq) {
	for _, h := range req.announce {
		delete(a.unannounced, h)
	}
	if len(req.announce) > 0 {
		ctx.Send(a.cfg.Index, &messages.IndexUpdate{Tier: messages.Disk, Added: req.announce})
	}
	delete(a.writes, req.seq)
	if req.sender != nil {
		// Written is what the index heard of and still holds: a block that
		// landed and left again before this answer (evicted by a later
		// write's plan, or deleted) was never announced, and no BelowGone
		// would ever correct a "held below" mark for it.
		ctx.Send(req.sender, &messages.LowerWriteDone{Slots: req.slots, Written: req.announce, From: messages.Disk})
	} else {
		a.log.Warn("disk actor: LowerWrite without a sender (use ctx.Request); slots not returned",
			zap.Int("slots", len(req.slots)))
	}
	for _, next := range req.after {
		if next.pending--; next.pending == 0 {
			a.replyWrite(ctx, next)
		}
	}
	req.after = nil
	a.answerFlushers()
}
