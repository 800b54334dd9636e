package pinned

import (
	"maps"
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/kvtier/kvtier/messages"
	"github.com/kvtier/kvtier/prefixhash"
)

// The tier below: victims drain to it, misses are read from it.

func (t *Tier) toLower(m any) { t.ready.ToLower = append(t.ready.ToLower, m) }

type pendingRead struct {
	f        *lowerRead
	hashes   []uint64
	digests  []prefixhash.Digest
	deadline time.Time
}

// lowerRead is a fetch or prefetch waiting for blocks to come up from the
// tier below.
type lowerRead struct {
	replyTo  Peer                 // the GPU tier, for a fetch
	grant    *messages.FetchGrant // the pinned part, granted already
	items    []messages.LowerReadItem
	digests  []prefixhash.Digest // per item: what the block must be
	deadline time.Time
	prefetch chan *messages.QueryResult
	have     int    // leading blocks already in pinned memory (prefetch)
	asked    int    // blocks asked of the tier below, before any cut
	cut      int    // of them, blocks a Delete cut or that got no slot to read into
	deleted  bool   // a Delete aborted some of its slots
	ep       uint64 // flush epoch
	// startedLate: the read below began at or after its deadline (it
	// waited in readQ), so it is refused whole, not cut.
	startedLate bool
}

func (t *Tier) drainingCount() int {
	n := 0
	for _, d := range t.draining {
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
func (t *Tier) drain(extra int) {
	if !t.cfg.Lower {
		return
	}
	n := max(extra, 0)
	if free := t.pool.Stats().Free + t.drainingCount(); free < t.cfg.FreeTarget {
		n = max(n, t.cfg.FreeTarget-free)
	}
	if n == 0 {
		return
	}
	t.drainVictims(t.pool.Evict(n))
}

// drainVictims writes evicted (Draining) slots to disk; LowerWriteDone frees them.
func (t *Tier) drainVictims(victims []Victim) {
	if len(victims) == 0 {
		return
	}
	w := &messages.LowerWrite{Items: make([]messages.LowerWriteItem, len(victims))}
	for i, v := range victims {
		w.Items[i] = t.lowerWriteItem(v.Key, v.Slot)
		t.draining[v.Slot] = true
		t.drainEp[v.Slot] = t.cause
		t.begin(t.cause)
		// The index keeps saying "pinned" until the disk has the block: it
		// is served from the draining slot meanwhile.
		t.drainOf[v.Key], t.drainKey[v.Slot] = v.Slot, v.Key
	}
	t.stats.Evictions += uint64(len(victims))
	t.toLower(w)
}

// writeThrough writes resident blocks to disk, holding read references on their
// slots until the disk actor is done with them.
func (t *Tier) writeThrough(hashes []uint64) {
	w := &messages.LowerWrite{}
	for _, h := range hashes {
		slot, ok := t.pool.Lookup(h)
		if !ok || t.pool.Below(slot) {
			continue
		}
		if _, pending := t.draining[slot]; pending {
			continue
		}
		slot, _ = t.pool.Hold(h) // a copy down is no use of the block
		t.draining[slot] = false
		t.drainEp[slot] = t.cause
		t.begin(t.cause)
		w.Items = append(w.Items, t.lowerWriteItem(h, slot))
	}
	if len(w.Items) > 0 {
		t.toLower(w)
	}
}

// LowerWritten finishes a write below: the drained slots are freed (after
// their last reader), the written-through ones released.
func (t *Tier) LowerWritten(m *messages.LowerWriteDone) {
	if t.stopped {
		return
	}
	if t.lowerGone {
		t.log.Debug("pinned tier: a late write answer from the tier below, out of service", zap.Int("slots", len(m.Slots)))
		return
	}
	t.event()
	t.lowerWritten(m)
}

func (t *Tier) lowerWritten(m *messages.LowerWriteDone) {
	var written map[uint64]bool
	if len(m.Written) > 0 {
		written = make(map[uint64]bool, len(m.Written))
		for _, h := range m.Written {
			written[h] = true
		}
		for _, s := range m.Slots {
			// The slots are still held (draining or read): they hold what
			// was written.
			if t.pool.State(s) != StateFree && written[t.pool.Key(s)] {
				t.pool.SetBelow(s, true)
			}
		}
	}
	t.stats.Offloaded += uint64(len(m.Written))
	defer t.serveGrants()
	defer t.serveReads()
	t.cause = t.minEp(t.drainEp, m.Slots)
	var removed, dropped []uint64
	for _, s := range m.Slots {
		drain, ok := t.draining[s]
		if !ok {
			t.log.Error("pinned tier: disk returned a slot it was not given", zap.Int("slot", s))
			continue
		}
		delete(t.draining, s)
		t.end(t.drainEp[s])
		delete(t.drainEp, s)
		if !drain {
			t.pool.Release(s)
			continue
		}
		k := t.drainKey[s]
		if t.drainOf[k] == s { // not deleted meanwhile
			delete(t.drainOf, k)
		}
		delete(t.drainKey, s)
		if _, resident := t.pool.Lookup(k); !resident { // else served from its other slot
			removed = append(removed, k)
			if !written[k] { // refused below: its KV is gone from every tier below
				dropped = append(dropped, k)
			}
		}
		if t.readers[s] > 0 {
			t.drained[s] = true
		} else {
			t.pool.Free(s)
		}
	}
	if len(removed) > 0 {
		t.toIndex(&messages.IndexUpdate{Tier: messages.Pinned, Remove: removed, Dropped: dropped})
	}
	t.maybeFlushed()
}

// readFromDisk reserves Filling slots for hashes and asks the disk actor to fill
// them; diskRead finishes the fetch or prefetch.
func (t *Tier) readFromLower(f *lowerRead, hashes []uint64, digests []prefixhash.Digest, deadline time.Time) {
	hashes = hashes[:min(len(hashes), len(digests))] // each read is verified against its digest
	f.asked = len(hashes)
	f.ep = t.cause
	t.begin(f.ep)
	t.readQ = append(t.readQ, pendingRead{f, hashes, digests, deadline})
	t.serveReads()
}

// serveReads starts queued disk reads in order, each once it has a free slot
// per block: short of that, victims drain to disk first (diskWritten calls
// again). A read starts with what fits when nothing more can drain.
func (t *Tier) serveReads() {
	for len(t.readQ) > 0 {
		r := t.readQ[0]
		t.cause = r.f.ep
		if free := t.pool.Stats().Free; len(r.hashes) > free {
			if t.drainingCount() == 0 {
				t.drain(len(r.hashes) - free)
			}
			if t.drainingCount() > 0 {
				return
			}
		}
		t.readQ = t.readQ[1:]
		t.startRead(r.f, r.hashes, r.digests, r.deadline)
	}
}

func (t *Tier) startRead(f *lowerRead, hashes []uint64, digests []prefixhash.Digest, deadline time.Time) {
	var evicted []uint64
	f.deadline = deadline
	f.startedLate = !deadline.IsZero() && !t.now.Before(deadline)
	for i, h := range hashes {
		if _, draining := t.drainOf[h]; draining {
			break // still here, on its way down: not a second copy
		}
		slot, err := t.reserve(h, &evicted)
		if err != nil {
			break
		}
		t.digests[slot] = digests[i] // what the slot will hold if the read verifies
		f.items = append(f.items, messages.LowerReadItem{Hash: h, Slot: slot, Bytes: t.pool.Bytes(slot), Digest: digests[i]})
		f.digests = append(f.digests, digests[i])
	}
	f.cut = f.asked - len(f.items) // hashes is what a Delete left of them
	if len(evicted) > 0 {
		t.toIndex(&messages.IndexUpdate{Tier: messages.Pinned, Remove: evicted})
	}
	t.log.Debug("pinned tier: disk read", zap.Int("blocks", len(hashes)), zap.Int("slots", len(f.items)),
		zap.Int("free", t.pool.Stats().Free), zap.Int("draining", t.drainingCount()))
	if len(f.items) == 0 {
		t.finishFetch(f, nil, nil)
		return
	}
	t.nextID++
	t.reads[t.nextID] = f
	t.toLower(&messages.LowerRead{ID: t.nextID, Items: f.items, Deadline: deadline})
}

// LowerRead commits what arrived from below and finishes the fetch or
// prefetch that asked for it.
func (t *Tier) LowerRead(m *messages.LowerReadDone) {
	if t.stopped {
		return
	}
	if t.lowerGone {
		t.log.Debug("pinned tier: a late read answer from the tier below, out of service", zap.Uint64("id", m.ID))
		return
	}
	t.event()
	t.lowerRead(m)
}

func (t *Tier) lowerRead(m *messages.LowerReadDone) {
	f, ok := t.reads[m.ID]
	if !ok {
		t.log.Error("pinned tier: disk read done for an unknown read", zap.Uint64("id", m.ID))
		return
	}
	delete(t.reads, m.ID)
	t.cause = f.ep
	var added []uint64
	got := make([]bool, len(f.items))
	for i, it := range f.items {
		if t.doomed[it.Slot] { // the chain was deleted while it was read
			delete(t.doomed, it.Slot)
			t.pool.Abort(it.Slot)
			f.deleted = true
			continue
		}
		if i < len(m.OK) && m.OK[i] {
			got[i] = true
			t.digests[it.Slot] = f.digests[i]
			t.pool.Commit(it.Slot)
			// Read from a tier below that keeps it (the fan-out says which:
			// one the remote tier served is drained to the disk).
			t.pool.SetBelow(it.Slot, m.Kept == nil || (i < len(m.Kept) && m.Kept[i]))
			added = append(added, it.Hash)
			t.stats.Onboarded++
		} else {
			t.pool.Abort(it.Slot)
		}
	}
	if len(added) > 0 {
		t.toIndex(&messages.IndexUpdate{Tier: messages.Pinned, Added: added})
	}
	t.finishFetch(f, got, m.Why)
	t.maybeFlushed()
}

// finishFetch answers the fetch or prefetch f: ok and why as in
// LowerReadDone (nil ok: nothing arrived).
func (t *Tier) finishFetch(f *lowerRead, ok []bool, why []messages.MissReason) {
	defer t.end(f.ep)
	if f.prefetch != nil {
		n := f.have
		for i := range f.items {
			if i >= len(ok) || !ok[i] {
				break
			}
			n++
		}
		r := f.prefetch
		res := &messages.QueryResult{}
		res.Tokens[messages.Pinned.Index()] = n
		t.reply(func() { r <- res })
		return
	}
	g := f.grant
	if f.cut > 0 {
		g.Short = messages.MissEvicted // deleted, or no slot could be had for the rest
		t.stats.Misses += uint64(f.cut)
	}
	for i, it := range f.items {
		if i >= len(ok) || !ok[i] {
			t.stats.Misses += uint64(len(f.items) - i)
			g.Short = messages.MissFailed
			if i < len(why) && why[i] != messages.MissNone {
				g.Short = why[i]
			}
			// Past the deadline, a failure is the read cut there; a block
			// the tier below did not hold, or held for another prefix, is
			// still that.
			if f.deleted {
				g.Short = messages.MissEvicted
			} else if late := !f.deadline.IsZero() && !t.now.Before(f.deadline); late && (g.Short == messages.MissFailed || g.Short == messages.MissLate) {
				g.Short, g.StartedLate = messages.MissLate, f.startedLate
			}
			break
		}
		slot, _ := t.pool.Acquire(it.Hash)
		g.Slots = append(g.Slots, slot)
		g.Bytes = append(g.Bytes, t.pool.Bytes(slot))
	}
	t.send(f.replyTo, g)
}

// touchHot counts a fetch of h, held in slot, and writes it through to disk
// at HotHits. The count lives with the slot's contents.
func (t *Tier) touchHot(h uint64, slot int) {
	if !t.cfg.Lower || t.cfg.LowerIngestion != messages.IngestHot {
		return
	}
	if t.pool.CountFetch(slot)%t.cfg.HotHits == 0 { // again every HotHits fetches, should a write be denied
		t.writeThrough([]uint64{h})
	}
}

// LowerGone takes the tier below out of service, for good: its actor
// stopped, so nothing it was asked will be answered. Writes in flight end as
// not written (drained slots are freed, their blocks gone from this node;
// written-through ones stay), reads as missed, reads waiting for a slot as
// failed; from now on victims are dropped, not drained, and misses are not
// read from below. Answers the tier sent before it stopped that arrive later
// are ignored: the slots they name may hold other blocks by then.
func (t *Tier) LowerGone() {
	if t.stopped || t.lowerGone || !t.cfg.Lower {
		return
	}
	t.event()
	t.lowerGone, t.cfg.Lower = true, false
	queued := t.readQ
	t.readQ = nil
	for _, r := range queued {
		t.cause = r.f.ep
		if r.f.grant != nil {
			r.f.grant.Short = messages.MissFailed
			t.stats.Misses += uint64(r.f.asked)
		}
		t.finishFetch(r.f, nil, nil)
	}
	for _, id := range slices.Sorted(maps.Keys(t.reads)) {
		t.lowerRead(&messages.LowerReadDone{ID: id})
	}
	if slots := slices.Sorted(maps.Keys(t.draining)); len(slots) > 0 {
		t.lowerWritten(&messages.LowerWriteDone{Slots: slots})
	}
	t.serveGrants()
	t.maybeFlushed()
}
