package actors

import (
	"errors"
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"go.uber.org/zap"

	"github.com/kvtier/kvtier/messages"
	"github.com/kvtier/kvtier/pinned"
	"github.com/kvtier/kvtier/prefixhash"
)

var errPinnedStopped = fmt.Errorf("kvtier: pinned tier: %w", messages.ErrStopped)

// PinnedConfig configures the pinned pool actor.
type PinnedConfig struct {
	Pool  *pinned.Pool // owned by the actor from now on
	Index *actor.PID
	// WriteQuota bounds slots being filled at once (offloads in flight); an
	// offload over it is denied and counted, never queued.
	WriteQuota int
	// Disk is the disk tier actor below; nil for none.
	Disk *actor.PID
	// DiskIngestion says when pinned blocks are written to disk: IngestEvict
	// (victims drain to disk before their slot is reused; the actor keeps
	// FreeTarget slots free ahead of need), IngestAll (every committed block
	// is written through) or IngestHot (after HotHits fetches).
	DiskIngestion Ingestion
	HotHits       int
	FreeTarget    int
	Log           *zap.Logger
}

// PinnedActor owns the pinned host pool: slot allocation, eviction (its policy is
// the pool's) and read references handed to the GPU actor's copy workers.
type PinnedActor struct {
	cfg      PinnedConfig
	pool     *pinned.Pool
	digests  []prefixhash.Digest // by slot: the prefix digest of the block it holds
	inFlight int
	flushers []flushWaiter
	stats    messages.TierStats

	// Flush epochs: every piece of work in flight carries the epoch of the
	// request that caused it; a Flush waits for the epochs up to its own, so
	// work arriving after it cannot starve it.
	epoch   uint64
	cause   uint64 // epoch of the work being handled now
	pending map[uint64]int
	fillEp  map[int]uint64 // granted (Filling) slots
	drainEp map[int]uint64 // slots out to disk

	// Disk tier state.
	nextID   uint64
	draining map[int]bool          // slots sent to disk: true = draining (Free when done), false = read reference (Release)
	reads    map[uint64]*diskFetch // disk reads in flight
	queue    []pendingGrant        // offloads waiting for slots to drain to disk
	// A draining slot still holds its block until the disk has it: fetches are
	// served from it meanwhile, and it is freed after its last reader.
	drainOf  map[uint64]int // hash -> slot, while draining
	drainKey map[int]uint64 // slot -> hash, while draining
	readers  map[int]int    // read references on draining slots
	drained  map[int]bool   // written to disk, freed once its readers are done
	doomed   map[int]bool   // Filling slots whose chain was deleted: aborted when filled
	readQ    []pendingRead  // disk reads waiting for slots to drain
}

type pendingGrant struct {
	req *messages.OffloadRequest
	to  *actor.PID
	ep  uint64
	// gone marks items whose chain was deleted while the request waited:
	// they are answered SlotExists-free, as denied, and never stored.
	gone []bool
}

type flushWaiter struct {
	reply chan error
	ep    uint64
}

// NewPinnedActor returns the actor's producer.
func NewPinnedActor(cfg PinnedConfig) actor.Producer {
	return func() actor.Actor {
		return &PinnedActor{cfg: cfg, pool: cfg.Pool, digests: make([]prefixhash.Digest, cfg.Pool.NumSlots()), stats: messages.TierStats{Tier: messages.Pinned, Extra: map[string]float64{}},
			draining: map[int]bool{}, reads: map[uint64]*diskFetch{},
			pending: map[uint64]int{}, fillEp: map[int]uint64{}, drainEp: map[int]uint64{},
			drainOf: map[uint64]int{}, drainKey: map[int]uint64{}, readers: map[int]int{}, drained: map[int]bool{}, doomed: map[int]bool{}}
	}
}

// Receive implements actor.Actor.
func (a *PinnedActor) Receive(ctx actor.Context) {
	a.cause = a.epoch
	defer a.maybeFlushed()
	if invariantsEnabled {
		defer func() { mustHold(a.checkPinned()) }()
	}
	switch m := ctx.Message().(type) {
	case *messages.OffloadRequest:
		a.queue = append(a.queue, pendingGrant{req: m, to: ctx.Sender(), ep: a.cause})
		a.begin(a.cause)
		a.serveGrants(ctx)
		a.drain(ctx, 0)
	case *messages.OffloadDone:
		a.finishOffload(ctx, m)
	case *messages.FetchRequest:
		a.fetch(ctx, m)
	case *messages.DiskWriteDone:
		a.diskWritten(ctx, m)
	case *messages.DiskReadDone:
		a.diskRead(ctx, m)
	case *messages.BelowGone:
		for _, h := range m.Hashes {
			if slot, ok := a.pool.Lookup(h); ok {
				a.pool.SetBelow(slot, false)
			}
		}
	case *messages.FetchRelease:
		for _, s := range m.Slots {
			a.release(s)
		}
	case *messages.PinnedQuery:
		if r := a.query(ctx, m); r != nil {
			m.Reply <- r
		}
	case *messages.Flush:
		a.flushers = append(a.flushers, flushWaiter{reply: m.Reply, ep: a.epoch})
		a.epoch++
		a.maybeFlushed()
	case *messages.StatsRequest:
		m.Reply <- a.snapshot()
	case *actor.Started, *actor.Stopping, *actor.Restarting:
	case *actor.Stopped:
		for _, f := range a.flushers {
			f.reply <- errPinnedStopped
		}
		a.flushers = nil
	default:
		a.cfg.Log.Warn("pinned actor: unexpected message", zap.String("type", typeName(m)))
	}
}

// grant reserves a Filling slot per item, evicting resident slots when the pool is
// full. Items over the quota, or with no evictable slot, are denied.
func (a *PinnedActor) grant(ctx actor.Context, m *messages.OffloadRequest, gone []bool) *messages.OffloadGrant {
	g := &messages.OffloadGrant{ID: m.ID, Slots: make([]int, len(m.Items)), Bytes: make([][]byte, len(m.Items))}
	var evicted []uint64
	for i, it := range m.Items {
		if i < len(gone) && gone[i] {
			g.Slots[i] = messages.SlotDenied
			continue
		}
		if _, ok := a.pool.Lookup(it.Hash); ok {
			g.Slots[i] = messages.SlotExists
			continue
		}
		if a.inFlight >= a.cfg.WriteQuota {
			g.Slots[i] = messages.SlotDenied
			a.stats.Denied++
			continue
		}
		slot, err := a.reserve(ctx, it.Hash, &evicted)
		switch {
		case errors.Is(err, pinned.ErrExists):
			g.Slots[i] = messages.SlotExists
		case err != nil:
			g.Slots[i] = messages.SlotDenied
			a.stats.Denied++
		default:
			g.Slots[i] = slot
			g.Bytes[i] = a.pool.Bytes(slot)
			a.digests[slot] = it.Digest
			a.inFlight++
			a.fillEp[slot] = a.cause
			a.begin(a.cause)
		}
	}
	if len(evicted) > 0 {
		ctx.Send(a.cfg.Index, &messages.IndexUpdate{Tier: messages.Pinned, Remove: evicted})
	}
	return g
}

// serveGrants answers queued offload requests in order. With a disk tier below,
// a request that needs more slots than are free waits while victims drain to
// disk; it is answered (with denials for what still does not fit) once nothing
// is draining.
func (a *PinnedActor) serveGrants(ctx actor.Context) {
	for len(a.queue) > 0 {
		q := a.queue[0]
		a.cause = q.ep
		if a.cfg.Disk != nil {
			need := 0
			for _, it := range q.req.Items {
				if _, ok := a.pool.Lookup(it.Hash); !ok {
					need++
				}
			}
			need = min(need, a.cfg.WriteQuota-a.inFlight)
			if free := a.pool.Stats().Free; need > free {
				if a.drainingCount() == 0 {
					a.drain(ctx, need-free)
				}
				if a.drainingCount() > 0 {
					return // DiskWriteDone frees slots and calls again
				}
			}
		}
		ctx.Send(q.to, a.grant(ctx, q.req, q.gone))
		a.queue = a.queue[1:]
		a.end(q.ep)
	}
}

// reserve takes a Filling slot for h. When the pool is full the policy's victim
// goes: at once with no disk tier, or when the disk already holds it (a clean
// victim); a dirty victim drains to disk and this reservation fails.
func (a *PinnedActor) reserve(ctx actor.Context, h uint64, evicted *[]uint64) (int, error) {
	slot, err := a.pool.Reserve(h)
	if !errors.Is(err, pinned.ErrNoSpace) {
		return slot, err
	}
	if a.cfg.Disk == nil {
		if k, ok := a.pool.EvictOne(); ok {
			*evicted = append(*evicted, k)
			a.stats.Evictions++
			slot, err = a.pool.Reserve(h)
		}
		return slot, err
	}
	victims := a.pool.Evict(1)
	if len(victims) == 0 {
		return slot, err
	}
	v := victims[0]
	if !a.pool.Below(v.Slot) {
		a.drainVictims(ctx, victims)
		return slot, err
	}
	a.pool.Free(v.Slot)
	*evicted = append(*evicted, v.Key)
	a.stats.Evictions++
	return a.pool.Reserve(h)
}

func (a *PinnedActor) finishOffload(ctx actor.Context, m *messages.OffloadDone) {
	var added []uint64
	a.cause = a.minEp(a.fillEp, m.Slots)
	for _, s := range m.Slots {
		a.end(a.fillEp[s])
		delete(a.fillEp, s)
	}
	for i, s := range m.Slots {
		if a.doomed[s] {
			delete(a.doomed, s)
			a.pool.Abort(s)
			continue
		}
		if m.Err == nil {
			a.pool.Commit(s)
			added = append(added, m.Hashes[i])
			a.stats.Offloaded++
		} else {
			a.pool.Abort(s)
			a.stats.Failed++
		}
	}
	a.inFlight -= len(m.Slots)
	if len(added) > 0 {
		ctx.Send(a.cfg.Index, &messages.IndexUpdate{Tier: messages.Pinned, Added: added})
		if a.cfg.Disk != nil && a.cfg.DiskIngestion == IngestAll {
			a.writeThrough(ctx, added)
		}
	}
	a.drain(ctx, 0)
	a.maybeFlushed()
}

func (a *PinnedActor) maybeFlushed() {
	keep := a.flushers[:0]
	for _, f := range a.flushers {
		if a.settled(f.ep) {
			f.reply <- nil
		} else {
			keep = append(keep, f)
		}
	}
	a.flushers = keep
}

// settled says whether no work of epoch ep or earlier is in flight.
func (a *PinnedActor) settled(ep uint64) bool {
	for e, n := range a.pending {
		if e <= ep && n > 0 {
			return false
		}
	}
	return true
}

func (a *PinnedActor) begin(ep uint64) { a.pending[ep]++ }

func (a *PinnedActor) end(ep uint64) {
	if a.pending[ep]--; a.pending[ep] <= 0 {
		if a.pending[ep] < 0 {
			panic("kvtier: pinned actor: flush epoch count below zero")
		}
		delete(a.pending, ep)
	}
}

// minEp is the earliest epoch among slots in eps (a.epoch when none is there).
func (a *PinnedActor) minEp(eps map[int]uint64, slots []int) uint64 {
	ep := a.epoch
	for _, s := range slots {
		if e, ok := eps[s]; ok && e < ep {
			ep = e
		}
	}
	return ep
}

// fetch takes read references on the leading run of hashes held here whose
// digests match; when a disk tier is below, the rest of the run is read from
// disk into fresh slots first, under the request's deadline, and the grant goes
// out when it is done. A block held under its hash with another digest (another
// prefix, namespace or model) ends the run: it is never served.
func (a *PinnedActor) fetch(ctx actor.Context, m *messages.FetchRequest) {
	g := &messages.FetchGrant{ID: m.ID}
	n := 0
	for i, h := range m.Hashes {
		slot, ok := a.pool.Acquire(h)
		if !ok {
			if slot, ok = a.drainOf[h]; !ok {
				break
			}
			a.readers[slot]++ // a draining slot still holds the block
		}
		if i >= len(m.Digests) || a.digests[slot] != m.Digests[i] {
			a.release(slot)
			a.stats.Mismatches++
			a.stats.Misses += uint64(len(m.Hashes) - n)
			g.Short = messages.MissMismatch
			ctx.Send(ctx.Sender(), g)
			return
		}
		a.stats.Hits++
		g.Slots = append(g.Slots, slot)
		g.Bytes = append(g.Bytes, a.pool.Bytes(slot))
		a.touchHot(ctx, h, slot)
		n++
	}
	rest := m.Hashes[n:]
	if len(rest) == 0 || a.cfg.Disk == nil {
		a.stats.Misses += uint64(len(rest))
		if len(rest) > 0 {
			g.Short = messages.MissEvicted
		}
		ctx.Send(ctx.Sender(), g)
		return
	}
	a.readFromDisk(ctx, &diskFetch{replyTo: ctx.Sender(), grant: g}, rest, m.Digests[n:], m.Deadline)
}

// release drops a fetch's read reference on slot: on a resident slot through
// the pool, on a draining one here (freeing it after the last reader once the
// disk has the block).
func (a *PinnedActor) release(slot int) {
	n, ok := a.readers[slot]
	if !ok {
		a.pool.Release(slot)
		return
	}
	if n--; n > 0 {
		a.readers[slot] = n
		return
	}
	delete(a.readers, slot)
	if a.drained[slot] {
		delete(a.drained, slot)
		a.pool.Free(slot)
	}
}

func (a *PinnedActor) query(ctx actor.Context, m *messages.PinnedQuery) *messages.QueryResult {
	res := &messages.QueryResult{}
	switch m.Kind {
	case messages.QueryDelete:
		removed := a.deleteChain(m.Hashes, m.Digests)
		res.Deleted = len(removed)
		if len(removed) > 0 {
			ctx.Send(a.cfg.Index, &messages.IndexUpdate{Tier: messages.Pinned, Remove: removed})
		}
	case messages.QueryPrefetch, messages.QueryExists:
		// The leading run held here with matching digests (resident, or
		// draining to disk and still readable), in blocks (the Manager
		// converts).
		for i, h := range m.Hashes {
			slot, resident := a.pool.Lookup(h)
			if !resident {
				if slot, resident = a.drainOf[h]; !resident {
					break
				}
			}
			if i >= len(m.Digests) || a.digests[slot] != m.Digests[i] {
				break
			}
			res.PinnedTokens++
		}
		if n := res.PinnedTokens; m.Kind == messages.QueryPrefetch && a.cfg.Disk != nil && n < len(m.Hashes) && n < len(m.Digests) {
			f := &diskFetch{prefetch: m.Reply, have: n}
			a.readFromDisk(ctx, f, m.Hashes[n:], m.Digests[n:], time.Time{})
			return nil
		}
	}
	return res
}

// deleteChain drops the chain's blocks held here with matching digests:
// resident ones at once (freed after their last reader), draining ones stop
// being served (the disk's own delete drops their write), and slots still
// filling (an offload or a disk read in flight) are aborted when their fill
// completes instead of becoming resident. It returns the hashes dropped.
func (a *PinnedActor) deleteChain(hashes []uint64, digests []prefixhash.Digest) []uint64 {
	var removed []uint64
	for i, h := range hashes {
		if i >= len(digests) {
			break
		}
		d := digests[i]
		if slot, ok := a.pool.Lookup(h); ok && a.digests[slot] == d {
			a.pool.Remove(h)
			removed = append(removed, h)
		} else if slot, ok := a.drainOf[h]; ok && a.digests[slot] == d {
			delete(a.drainOf, h)
			removed = append(removed, h)
		} else if slot, ok := a.pool.Filling(h); ok && a.digests[slot] == d {
			a.doomed[slot] = true
		}
	}
	if len(a.queue) == 0 && len(a.readQ) == 0 {
		return removed
	}
	chain := make(map[uint64]prefixhash.Digest, len(hashes))
	for i, h := range hashes[:min(len(hashes), len(digests))] {
		chain[h] = digests[i]
	}
	for qi := range a.queue { // offloads waiting for slots: never stored
		q := &a.queue[qi]
		for i, it := range q.req.Items {
			if d, ok := chain[it.Hash]; ok && d == it.Digest {
				if q.gone == nil {
					q.gone = make([]bool, len(q.req.Items))
				}
				q.gone[i] = true
			}
		}
	}
	for ri := range a.readQ { // disk reads not started: cut before the chain
		r := &a.readQ[ri]
		for i, h := range r.hashes {
			if d, ok := chain[h]; ok && d == r.digests[i] {
				r.hashes, r.digests, r.f.deleted = r.hashes[:i], r.digests[:i], true
				break
			}
		}
	}
	return removed
}

func (a *PinnedActor) snapshot() messages.TierStats {
	s := a.stats
	ps := a.pool.Stats()
	s.Blocks = ps.Slots
	s.UsedBlocks = ps.Slots - ps.Free
	s.BytesUsed = ps.BytesUsed
	s.InFlight = a.inFlight
	s.Extra = map[string]float64{"locked": b2f(ps.Locked), "resident": float64(ps.Resident),
		"draining": float64(ps.Draining), "queued_offloads": float64(len(a.queue))}
	return s
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
