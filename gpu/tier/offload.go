package tier

import (
	"maps"
	"reflect"
	"slices"

	"go.uber.org/zap"

	"github.com/kvtier/kvtier/blockpool"
	"github.com/kvtier/kvtier/gpu"
	"github.com/kvtier/kvtier/messages"
	"github.com/kvtier/kvtier/prefixhash"
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
	then   []func()
	slots  []int
	hashes []uint64
}

// offloadEvicted writes down evicted blocks whose contents are nowhere below yet;
// w (the allocation that reuses them) waits for the copy.
// It returns the offload, or nil when nothing needs copying.
func (t *Tier) offloadEvicted(w *waiter) *offloadOp {
	t.dropEvicted()
	if len(t.evicted) == 0 {
		return nil
	}
	if !t.lower() || t.cfg.Ingestion != IngestEvict {
		return nil
	}
	op := &offloadOp{evict: true}
	ch := newChainer(t.bs, 0) // an eviction's tokens are the pool's copies, owned
	for _, e := range t.evicted {
		if t.flags[e.Block]&flagBelow != 0 {
			continue // already written down
		}
		op.blocks = append(op.blocks, e.Block)
		it := messages.OffloadItem{Hash: uint64(e.Hash), Digest: e.Digest, Tokens: t.bs}
		ch.fill(&it, e.Parent, e.HasParent, e.NS, e.Tokens, nil)
		it.Chain.Class = t.class[e.Block] // reset only after this offload (resetBlocks)
		op.items = append(op.items, it)
	}
	if len(op.blocks) == 0 {
		return nil
	}
	if t.pool.Config().Journal {
		for _, it := range op.items {
			t.evictWrites[it.Hash]++
		}
	}
	op.waiters = append(op.waiters, w)
	w.pending++
	t.startOffload(op)
	return op
}

// dropEvicted takes the blocks just evicted into t.evicted and counts them,
// writing none of them down: alone, it forgets their contents, for fresh
// blocks the caller writes into at once; offloadEvicted writes them down.
func (t *Tier) dropEvicted() {
	t.evicted = t.pool.DrainEvicted(t.evicted[:0])
	t.stats.Evictions += uint64(len(t.evicted))
}

// offloadResident writes down blocks still in the pool (free cached or held),
// pinning them for the copy.
func (t *Tier) offloadResident(ids []blockpool.BlockID) {
	if !t.lower() || len(ids) == 0 {
		return
	}
	op := &offloadOp{}
	ch := newChainer(t.bs, len(ids))
	for _, id := range ids {
		// Only committed blocks (cached) hold computed KV to write down.
		h, cached := t.pool.BlockHash(id)
		if !cached || t.flags[id]&(flagBelow|flagMoving) != 0 {
			continue
		}
		d, _ := t.pool.BlockDigest(id)
		t.pool.Pin(id)
		t.flags[id] |= flagMoving
		op.blocks = append(op.blocks, id)
		it := messages.OffloadItem{Hash: uint64(h), Digest: d, Tokens: t.bs}
		if parent, hasParent, ns, ok := t.pool.BlockChain(id); ok {
			ch.fill(&it, parent, hasParent, ns, nil, t.pool.BlockTokens(id))
		}
		it.Chain.Class = t.class[id]
		op.items = append(op.items, it)
	}
	if len(op.blocks) > 0 {
		t.startOffload(op)
	}
}

func (t *Tier) startOffload(op *offloadOp) {
	if op.evict {
		for _, id := range op.blocks {
			t.pool.Pin(id)
		}
	}
	id := t.newID() // now, so that a Flush from here on waits for it
	if t.serialWait() {
		t.serialQueue = append(t.serialQueue, queuedOffload{id: id, op: op})
		return
	}
	t.sendOffload(id, op)
}

// queuedOffload is an offload, or a load's FetchRequest, waiting for the
// offload in flight (Config.SerialOffloads).
type queuedOffload struct {
	id    uint64
	op    *offloadOp
	fetch *messages.FetchRequest // instead of op
}

// sendFetch sends a load's FetchRequest, behind the offloads in flight or
// waiting when Config.SerialOffloads is set: the pinned tier then sees every
// offload's commit and every load's reads in one order on every run.
func (t *Tier) sendFetch(req *messages.FetchRequest) {
	if !t.lower() {
		return // LowerGone: the load is answered as missed there
	}
	if t.serialWait() {
		t.serialQueue = append(t.serialQueue, queuedOffload{fetch: req})
		return
	}
	t.fetchOut(req)
}

// fetchOut sends a load's request to the pinned tier, noting when (for
// noteAnswerLag).
func (t *Tier) fetchOut(req *messages.FetchRequest) {
	if op := t.fetches[req.ID]; op != nil {
		op.sentAt = t.now
	}
	t.toPinned(req)
}

// serialWait reports whether, under Config.SerialOffloads, a new offload or
// load request must queue: an offload is in flight or others wait already.
func (t *Tier) serialWait() bool {
	return t.cfg.SerialOffloads && (len(t.offload) > 0 || len(t.serialQueue) > 0)
}

// sendOffload registers op under id and offers its blocks to the pinned tier.
func (t *Tier) sendOffload(id uint64, op *offloadOp) {
	t.offload[id] = op
	t.toPinned(&messages.OffloadRequest{ID: id, Items: op.items})
}

// offloadGranted starts the device-to-host copy of the granted blocks.
func (t *Tier) offloadGranted(g *messages.OffloadGrant) {
	op, ok := t.offload[g.ID]
	if !ok {
		if t.cfg.Lower {
			t.cfg.Log.Error("gpu tier: grant for an unknown offload", zap.Uint64("id", g.ID))
			return
		}
		// An offer LowerGone gave up on, granted by a pinned tier still
		// running (the index was what stopped): its slots go back, or
		// they would stay filling, and the pinned tier's flushes waiting,
		// for ever.
		var slots []int
		for _, s := range g.Slots {
			if s >= 0 {
				slots = append(slots, s)
			}
		}
		if len(slots) > 0 {
			t.toPinned(&messages.OffloadDone{Slots: slots, Hashes: make([]uint64, len(slots)), Err: ErrLowerGone})
		}
		return
	}
	var ops []gpu.CopyOp
	keep := op.blocks[:0]
	for i, slot := range g.Slots {
		id := op.blocks[i]
		switch slot {
		case messages.SlotDenied:
			t.stats.Denied++
			t.releaseOffloadBlock(op, id, false)
		case messages.SlotExists:
			t.releaseOffloadBlock(op, id, true)
		default:
			t.othersNotBelow(op.items[i])
			ops = append(ops, gpu.CopyOp{Block: int(id), Host: g.Bytes[i]})
			op.slots = append(op.slots, slot)
			op.hashes = append(op.hashes, op.items[i].Hash)
			keep = append(keep, id)
		}
	}
	op.blocks = keep
	if len(ops) > 0 {
		t.copy(g.ID, false, gpu.D2H, ops, t.pendingFences(op.blocks))
	}
	t.thenOffload(op)
	if len(ops) == 0 {
		t.finishOffload(g.ID, op)
	}
}

// thenOffload runs what waited for op's copy to be enqueued, or to be
// found unnecessary.
func (t *Tier) thenOffload(op *offloadOp) {
	for _, f := range op.then {
		f()
	}
	op.then = nil
}

func (t *Tier) offloadCopied(id uint64, err error) {
	op, ok := t.offload[id]
	if !ok {
		t.cfg.Log.Error("gpu tier: copy done for an unknown offload", zap.Uint64("id", id))
		return
	}
	t.toPinned(&messages.OffloadDone{Slots: op.slots, Hashes: op.hashes, Err: err})
	if err != nil {
		t.stats.Failed += uint64(len(op.blocks))
		t.cfg.Log.Warn("gpu tier: offload copy failed", zap.Error(err))
	} else {
		t.stats.Offloaded += uint64(len(op.blocks))
	}
	for _, b := range op.blocks {
		t.releaseOffloadBlock(op, b, err == nil)
	}
	t.finishOffload(id, op)
}

// othersNotBelow takes flagBelow off the blocks that hold its hash with
// another digest (a forged 64-bit collision): pinned memory keeps one block
// per hash, and a slot granted for it means that a block of another prefix
// it held under the hash was displaced (pinned.Tier.displace), or that it
// held none. Those blocks are written down again when they leave (at worst
// once more than needed), instead of dropped as held below.
func (t *Tier) othersNotBelow(it messages.OffloadItem) {
	ids := t.pool.Holders(t.scratch[:0], prefixhash.Hash(it.Hash))
	t.scratch = ids[:0]
	for _, id := range ids {
		if d, ok := t.pool.BlockDigest(id); !ok || d != it.Digest {
			t.flags[id] &^= flagBelow
		}
	}
}

// releaseOffloadBlock ends a block's part in an offload: flags (for blocks that
// still hold what was copied) and the copy's pin.
func (t *Tier) releaseOffloadBlock(op *offloadOp, id blockpool.BlockID, below bool) {
	if !op.evict {
		t.flags[id] &^= flagMoving
		if _, cached := t.pool.BlockHash(id); below && cached { // not deleted meanwhile
			t.flags[id] |= flagBelow
		}
	}
	t.pool.Unpin(id)
}

func (t *Tier) finishOffload(id uint64, op *offloadOp) {
	delete(t.offload, id)
	// After this offload's OffloadDone (already in ToPinned), before
	// anything below can start another: the loads queued behind it, then the
	// next offload.
	for len(t.serialQueue) > 0 && len(t.offload) == 0 {
		next := t.serialQueue[0]
		t.serialQueue = t.serialQueue[1:]
		switch {
		case next.fetch != nil:
			t.fetchOut(next.fetch)
		case len(next.op.blocks) == 0: // its chain was deleted while it waited
			t.thenOffload(next.op) // no copy to wait for
			t.finishOffload(next.id, next.op)
		default:
			t.sendOffload(next.id, next.op)
		}
	}
	if op.evict {
		t.evictWritesDone(op.items)
	}
	for _, w := range op.waiters {
		w.done(t)
	}
	if !op.evict && len(t.parked) > 0 {
		t.retryParked()
	}
	t.maybeFlushed()
}

// evictWritesDone ends the writes down of evicted blocks for the event
// stream (the pool's Journal on): a removal held back while the blocks were
// written down goes out now, after their OffloadDone, unless a block serves
// the hash again or another write of it is still in flight.
func (t *Tier) evictWritesDone(items []messages.OffloadItem) {
	if !t.pool.Config().Journal {
		return
	}
	var gone []messages.ResidencyChange
	for _, it := range items {
		h := it.Hash
		if t.evictWrites[h]--; t.evictWrites[h] > 0 {
			continue
		}
		delete(t.evictWrites, h)
		if !t.held[h] {
			continue
		}
		delete(t.held, h)
		if _, ok := t.pool.Lookup(prefixhash.Hash(h)); !ok {
			gone = append(gone, messages.ResidencyChange{Hash: h})
		}
	}
	if len(gone) > 0 {
		if t.out.ResidencyAfter == nil {
			t.out.ResidencyAfter = &messages.Residency{Tier: messages.GPU}
		}
		t.out.ResidencyAfter.Changes = append(t.out.ResidencyAfter.Changes, gone...)
	}
}

// dropQueuedOffloads takes the blocks of a deleted chain out of the offloads
// still waiting their turn (Config.SerialOffloads): once sent, the pinned
// tier would store and publish them after its own delete has run. chain maps
// the chain's hashes to their digests. An offload left with no block is
// finished when its turn comes, without a request.
func (t *Tier) dropQueuedOffloads(chain map[uint64]prefixhash.Digest) {
	for _, q := range t.serialQueue {
		op := q.op
		if op == nil {
			continue
		}
		var dropped []messages.OffloadItem
		keep := 0
		for i, it := range op.items {
			if d, ok := chain[it.Hash]; ok && d == it.Digest {
				t.releaseOffloadBlock(op, op.blocks[i], false)
				dropped = append(dropped, it)
				continue
			}
			op.blocks[keep], op.items[keep] = op.blocks[i], it
			keep++
		}
		op.blocks, op.items = op.blocks[:keep], op.items[:keep]
		if op.evict {
			t.evictWritesDone(dropped)
		}
	}
}

// pendingFences returns the fences of the blocks' commits that are not done
// yet, each once: the copy that reads the blocks down waits on them, so it
// reads the KV the engine finished computing, and a copy up into blocks a
// freed sequence's work may still write waits on them, so that work cannot
// land over the loaded bytes.
func (t *Tier) pendingFences(blocks []blockpool.BlockID) []gpu.Fence {
	var waited []gpu.Fence
	for _, id := range blocks {
		f := t.fence[id]
		if f == nil {
			continue
		}
		if gpu.FenceDone(f) {
			t.fence[id] = nil
			continue
		}
		waited = addFence(waited, f)
	}
	return waited
}

// readersToo adds to fences, each once, the fences of work of freed
// sequences that may still read blocks (readFences).
func (t *Tier) readersToo(fences []gpu.Fence, blocks []blockpool.BlockID) []gpu.Fence {
	for _, id := range blocks {
		fs := pending(t.readFences[id])
		t.readFences[id] = fs
		for _, f := range fs {
			fences = addFence(fences, f)
		}
	}
	return fences
}

// sameFence reports whether a and b are one fence, without the panic that
// == gives on a fence type that is not comparable.
func sameFence(a, b gpu.Fence) bool {
	ta := reflect.TypeOf(a)
	return ta == reflect.TypeOf(b) && ta.Comparable() && a == b
}

// BelowGone forgets that blocks holding these hashes have a copy below: no
// lower tier holds one any more, so they are written down again when they
// are evicted. Loads of these hashes in flight land not held below: pinned
// memory may have served them from the copy that is gone. A hash matches
// candidates only (every block holding it), so at worst a block is written
// down once more.
func (t *Tier) BelowGone(hashes []uint64) {
	var ids []blockpool.BlockID
	for _, h := range hashes {
		ids = t.pool.Holders(ids[:0], prefixhash.Hash(h))
		for _, id := range ids {
			t.flags[id] &^= flagBelow
		}
	}
	if len(t.fetches) == 0 {
		return
	}
	gone := make(map[uint64]bool, len(hashes))
	for _, h := range hashes {
		gone[h] = true
	}
	for _, op := range t.fetches {
		for i, h := range op.hashes {
			if !gone[h] {
				continue
			}
			if op.belowGone == nil {
				op.belowGone = make([]bool, len(op.hashes))
			}
			op.belowGone[i] = true
		}
	}
}

// LowerGone takes every tier below the GPU out of service, for good: the
// actor of the pinned tier or of the prefix index stopped, so nothing asked
// of them will be answered. Lookups waiting are answered as finding nothing
// below, offers not yet granted are denied, loads not yet granted miss
// (MissFailed); copies under way finish as they would. From then on no
// lookup, offload or load is sent: the GPU serves its own blocks alone. A
// grant that still comes for an offer given up is handed back
// (OffloadDone with ErrLowerGone), as a late fetch grant is.
func (t *Tier) LowerGone() {
	if t.stopped || !t.cfg.Lower {
		return
	}
	t.cfg.Lower = false
	queued := t.serialQueue
	t.serialQueue = nil
	for _, q := range queued {
		if q.op != nil { // never offered: denied as the pinned tier would
			t.offload[q.id] = q.op
		}
	}
	for _, id := range slices.Sorted(maps.Keys(t.lookups)) {
		t.lookupDone(&messages.LookupResult{ID: id, Tiers: make([][]messages.Tier, len(t.lookups[id].waiting)), Unanswered: true})
	}
	for _, id := range slices.Sorted(maps.Keys(t.offload)) {
		if op := t.offload[id]; op != nil && len(op.slots) == 0 {
			g := &messages.OffloadGrant{ID: id, Slots: make([]int, len(op.items)), Bytes: make([][]byte, len(op.items))}
			for i := range g.Slots {
				g.Slots[i] = messages.SlotDenied
			}
			t.offloadGranted(g)
		}
	}
	for _, id := range slices.Sorted(maps.Keys(t.fetches)) {
		if op := t.fetches[id]; op != nil && op.slots == nil && !op.copied {
			t.fetchGranted(&messages.FetchGrant{ID: id, Short: messages.MissFailed})
		}
	}
	t.maybeFlushed()
}
