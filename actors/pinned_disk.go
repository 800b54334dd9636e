package actors

import (
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"go.uber.org/zap"

	"github.com/kvtier/kvtier/messages"
	"github.com/kvtier/kvtier/pinned"
	"github.com/kvtier/kvtier/prefixhash"
)

type pendingRead struct {
	f        *diskFetch
	hashes   []uint64
	digests  []prefixhash.Digest
	deadline time.Time
}

// diskFetch is a fetch or prefetch waiting for blocks to come up from disk.
type diskFetch struct {
	replyTo  *actor.PID           // the GPU actor, for a fetch
	grant    *messages.FetchGrant // the pinned part, granted already
	items    []messages.DiskReadItem
	digests  []prefixhash.Digest // per item: what the block must be
	deadline time.Time
	prefetch chan *messages.QueryResult
	have     int    // leading blocks already in pinned memory (prefetch)
	deleted  bool   // a Delete aborted some of its slots
	ep       uint64 // flush epoch
}

func (a *PinnedActor) drainingCount() int {
	n := 0
	for _, d := range a.draining {
		if d {
			n++
		}
	}
	return n
}

// drain evicts victims chosen by the policy to disk, where they are written and
// then freed: extra of them now, plus enough to keep FreeTarget slots free
// ahead of need. Under IngestAll and IngestHot victims are already on disk or
// not wanted there; they are still written (the disk skips what it holds), so no
// victim is lost for lack of time.
func (a *PinnedActor) drain(ctx actor.Context, extra int) {
	if a.cfg.Disk == nil {
		return
	}
	n := max(extra, 0)
	if free := a.pool.Stats().Free + a.drainingCount(); free < a.cfg.FreeTarget {
		n = max(n, a.cfg.FreeTarget-free)
	}
	if n == 0 {
		return
	}
	a.drainVictims(ctx, a.pool.Evict(n))
}

// drainVictims writes evicted (Draining) slots to disk; DiskWriteDone frees them.
func (a *PinnedActor) drainVictims(ctx actor.Context, victims []pinned.Victim) {
	if len(victims) == 0 {
		return
	}
	w := &messages.DiskWrite{Items: make([]messages.DiskWriteItem, len(victims))}
	for i, v := range victims {
		w.Items[i] = messages.DiskWriteItem{Hash: v.Key, Slot: v.Slot, Bytes: a.pool.Bytes(v.Slot), Digest: a.digests[v.Slot]}
		a.draining[v.Slot] = true
		a.drainEp[v.Slot] = a.cause
		a.begin(a.cause)
		// The index keeps saying "pinned" until the disk has the block: it
		// is served from the draining slot meanwhile.
		a.drainOf[v.Key], a.drainKey[v.Slot] = v.Slot, v.Key
	}
	a.stats.Evictions += uint64(len(victims))
	ctx.Request(a.cfg.Disk, w)
}

// writeThrough writes resident blocks to disk, holding read references on their
// slots until the disk actor is done with them.
func (a *PinnedActor) writeThrough(ctx actor.Context, hashes []uint64) {
	w := &messages.DiskWrite{}
	for _, h := range hashes {
		slot, ok := a.pool.Lookup(h)
		if !ok || a.pool.Below(slot) {
			continue
		}
		if _, pending := a.draining[slot]; pending {
			continue
		}
		slot, _ = a.pool.Acquire(h)
		a.draining[slot] = false
		a.drainEp[slot] = a.cause
		a.begin(a.cause)
		w.Items = append(w.Items, messages.DiskWriteItem{Hash: h, Slot: slot, Bytes: a.pool.Bytes(slot), Digest: a.digests[slot]})
	}
	if len(w.Items) > 0 {
		ctx.Request(a.cfg.Disk, w)
	}
}

// diskWritten returns the slots of a finished DiskWrite.
func (a *PinnedActor) diskWritten(ctx actor.Context, m *messages.DiskWriteDone) {
	if len(m.Written) > 0 {
		written := make(map[uint64]bool, len(m.Written))
		for _, h := range m.Written {
			written[h] = true
		}
		for _, s := range m.Slots {
			// The slots are still held (draining or read): they hold what
			// was written.
			if a.pool.State(s) != pinned.StateFree && written[a.pool.Key(s)] {
				a.pool.SetBelow(s, true)
			}
		}
	}
	a.stats.Offloaded += uint64(len(m.Written))
	defer a.serveGrants(ctx)
	defer a.serveReads(ctx)
	a.cause = a.minEp(a.drainEp, m.Slots)
	var removed []uint64
	for _, s := range m.Slots {
		drain, ok := a.draining[s]
		if !ok {
			a.cfg.Log.Error("pinned actor: disk returned a slot it was not given", zap.Int("slot", s))
			continue
		}
		delete(a.draining, s)
		a.end(a.drainEp[s])
		delete(a.drainEp, s)
		if !drain {
			a.pool.Release(s)
			continue
		}
		k := a.drainKey[s]
		if a.drainOf[k] == s { // not deleted meanwhile
			delete(a.drainOf, k)
		}
		delete(a.drainKey, s)
		removed = append(removed, k)
		if a.readers[s] > 0 {
			a.drained[s] = true
		} else {
			a.pool.Free(s)
		}
	}
	if len(removed) > 0 {
		ctx.Send(a.cfg.Index, &messages.IndexUpdate{Tier: messages.Pinned, Remove: removed})
	}
	a.maybeFlushed()
}

// readFromDisk reserves Filling slots for hashes and asks the disk actor to fill
// them; diskRead finishes the fetch or prefetch.
func (a *PinnedActor) readFromDisk(ctx actor.Context, f *diskFetch, hashes []uint64, digests []prefixhash.Digest, deadline time.Time) {
	f.ep = a.cause
	a.begin(f.ep)
	a.readQ = append(a.readQ, pendingRead{f, hashes, digests, deadline})
	a.serveReads(ctx)
}

// serveReads starts queued disk reads in order, each once it has a free slot
// per block: short of that, victims drain to disk first (diskWritten calls
// again). A read starts with what fits when nothing more can drain.
func (a *PinnedActor) serveReads(ctx actor.Context) {
	for len(a.readQ) > 0 {
		r := a.readQ[0]
		a.cause = r.f.ep
		if free := a.pool.Stats().Free; len(r.hashes) > free {
			if a.drainingCount() == 0 {
				a.drain(ctx, len(r.hashes)-free)
			}
			if a.drainingCount() > 0 {
				return
			}
		}
		a.readQ = a.readQ[1:]
		a.startRead(ctx, r.f, r.hashes, r.digests, r.deadline)
	}
}

func (a *PinnedActor) startRead(ctx actor.Context, f *diskFetch, hashes []uint64, digests []prefixhash.Digest, deadline time.Time) {
	var evicted []uint64
	f.deadline = deadline
	for i, h := range hashes {
		slot, err := a.reserve(ctx, h, &evicted)
		if err != nil {
			break
		}
		a.digests[slot] = digests[i] // what the slot will hold if the read verifies
		f.items = append(f.items, messages.DiskReadItem{Hash: h, Slot: slot, Bytes: a.pool.Bytes(slot), Digest: digests[i]})
		f.digests = append(f.digests, digests[i])
	}
	if len(evicted) > 0 {
		ctx.Send(a.cfg.Index, &messages.IndexUpdate{Tier: messages.Pinned, Remove: evicted})
	}
	a.cfg.Log.Debug("pinned actor: disk read", zap.Int("blocks", len(hashes)), zap.Int("slots", len(f.items)),
		zap.Int("free", a.pool.Stats().Free), zap.Int("draining", a.drainingCount()))
	if len(f.items) == 0 {
		a.finishFetch(ctx, f, nil)
		return
	}
	a.nextID++
	a.reads[a.nextID] = f
	ctx.Request(a.cfg.Disk, &messages.DiskRead{ID: a.nextID, Items: f.items, Deadline: deadline})
}

// diskRead commits what arrived from disk and finishes the fetch.
func (a *PinnedActor) diskRead(ctx actor.Context, m *messages.DiskReadDone) {
	f, ok := a.reads[m.ID]
	if !ok {
		a.cfg.Log.Error("pinned actor: disk read done for an unknown read", zap.Uint64("id", m.ID))
		return
	}
	delete(a.reads, m.ID)
	a.cause = f.ep
	var added []uint64
	got := make([]bool, len(f.items))
	for i, it := range f.items {
		if a.doomed[it.Slot] { // the chain was deleted while it was read
			delete(a.doomed, it.Slot)
			a.pool.Abort(it.Slot)
			f.deleted = true
			continue
		}
		if i < len(m.OK) && m.OK[i] {
			got[i] = true
			a.digests[it.Slot] = f.digests[i]
			a.pool.Commit(it.Slot)
			a.pool.SetBelow(it.Slot, true) // read from the disk, which keeps it
			added = append(added, it.Hash)
			a.stats.Onboarded++
		} else {
			a.pool.Abort(it.Slot)
		}
	}
	if len(added) > 0 {
		ctx.Send(a.cfg.Index, &messages.IndexUpdate{Tier: messages.Pinned, Added: added})
	}
	a.finishFetch(ctx, f, got)
	a.maybeFlushed()
}

func (a *PinnedActor) finishFetch(ctx actor.Context, f *diskFetch, ok []bool) {
	defer a.end(f.ep)
	if f.prefetch != nil {
		n := f.have
		for i := range f.items {
			if i >= len(ok) || !ok[i] {
				break
			}
			n++
		}
		f.prefetch <- &messages.QueryResult{PinnedTokens: n}
		return
	}
	g := f.grant
	if len(f.items) == 0 {
		g.Short = messages.MissEvicted // no slot could be had for the read
	}
	for i, it := range f.items {
		if i >= len(ok) || !ok[i] {
			a.stats.Misses += uint64(len(f.items) - i)
			g.Short = messages.MissFailed
			if f.deleted {
				g.Short = messages.MissEvicted
			} else if !f.deadline.IsZero() && !time.Now().Before(f.deadline) {
				g.Short = messages.MissLate
			}
			break
		}
		slot, _ := a.pool.Acquire(it.Hash)
		g.Slots = append(g.Slots, slot)
		g.Bytes = append(g.Bytes, a.pool.Bytes(slot))
	}
	ctx.Send(f.replyTo, g)
}

// touchHot counts a fetch of h, held in slot, and writes it through to disk
// at HotHits. The count lives with the slot's contents.
func (a *PinnedActor) touchHot(ctx actor.Context, h uint64, slot int) {
	if a.cfg.Disk == nil || a.cfg.DiskIngestion != IngestHot {
		return
	}
	if a.pool.CountFetch(slot)%a.cfg.HotHits == 0 { // again every HotHits fetches, should a write be denied
		a.writeThrough(ctx, []uint64{h})
	}
}
