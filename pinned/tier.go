package pinned

import (
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/kvtier/kvtier/messages"
	"github.com/kvtier/kvtier/prefixhash"
)

// ErrTierStopped answers work still waiting when the tier stops.
var ErrTierStopped = fmt.Errorf("kvtier: pinned tier: %w", messages.ErrStopped)

// Peer is where a reply goes: the tier's owner passes the requester (an
// actor PID) with each request and gets it back, untouched, in Ready.Sends.
type Peer any

// TierConfig configures a Tier.
type TierConfig struct {
	Pool *Pool // owned by the Tier from now on
	// WriteQuota bounds slots being filled at once (offloads in flight); an
	// offload over it is denied and counted, never queued.
	WriteQuota int
	// Lower says a tier is below (disk, remote, or both through a fan-out):
	// victims drain to it and misses are read from it.
	Lower bool
	// LowerIngestion says when blocks are written to the tier below:
	// IngestEvict (victims drain before their slot is reused, and FreeTarget
	// slots are kept free ahead of need), IngestAll (every committed block is
	// written through) or IngestHot (after HotHits fetches).
	LowerIngestion messages.Ingestion
	HotHits        int
	FreeTarget     int
	Log            *zap.Logger // nil: zap.NewNop()
}

// Send is a message for a peer that sent the tier a request.
type Send struct {
	To  Peer
	Msg any
}

// Ready is what the tier asks its owner to do after a step, in order:
// index updates, requests to the tier below (whose answers come back as
// LowerWritten and LowerRead), messages to peers, then replies to run.
type Ready struct {
	ToIndex []*messages.IndexUpdate
	ToLower []any // *messages.LowerWrite, *messages.LowerRead
	Sends   []Send
	Replies []func()
}

// Tier is the pinned host tier's logic: a plain, single-threaded state
// machine over a Pool. Its owner (actors.PinnedActor) feeds it one event at a
// time — an offload request, a copy done, a fetch, a release, an answer from
// the tier below, a query, a flush, the clock — then takes Ready and does
// what it says. It never blocks, never does I/O and reads no clock but the
// one SetNow gives it.
//
// # Events
//
//	Offload(req, from)     the GPU offers blocks: slots granted (or denied)
//	OffloadDone(m)         the GPU's copies into granted slots finished
//	Fetch(req, from)       the GPU asks for a prefix: read references granted,
//	                       the part held below read up first
//	Release(slots)         the GPU's copies out of granted slots finished
//	LowerWritten(m)        the tier below has (or refused) drained blocks
//	LowerRead(m)           the tier below filled slots (or did not)
//	BelowGone(hashes)      the tier below dropped blocks
//	Query(m)               exists, prefetch or delete
//	Flush(reply)           answered once the work before it is done
//	Stop()                 answers everything that waits (offers denied,
//	                       reads missed, flushes ErrTierStopped); later
//	                       requests are answered the same way
type Tier struct {
	cfg      TierConfig
	pool     *Pool
	log      *zap.Logger
	now      time.Time
	ready    Ready
	digests  []prefixhash.Digest // by slot: the prefix digest of the block it holds
	chains   []slotChain         // by slot: what the GPU said of its block (keepChain)
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
	drainEp map[int]uint64 // slots out to the tier below

	// Lower tier state.
	nextID   uint64
	draining map[int]bool          // slots sent below: true = draining (Free when done), false = read reference (Release)
	reads    map[uint64]*lowerRead // reads from below in flight
	// lowerGone: the tier below stopped for good (LowerGone); cfg.Lower is
	// false from then on.
	lowerGone bool
	queue     []pendingGrant // offloads waiting for slots to drain
	// A draining slot still holds its block until the tier below has it:
	// fetches are served from it meanwhile, and it is freed after its last
	// reader.
	drainOf  map[uint64]int // hash -> slot, while draining
	drainKey map[int]uint64 // slot -> hash, while draining
	readers  map[int]int    // read references on draining slots
	drained  map[int]bool   // written below, freed once its readers are done
	doomed   map[int]bool   // Filling slots whose chain was deleted: aborted when filled
	readQ    []pendingRead  // reads from below waiting for slots to drain

	// stopped: Stop ran; requests are answered as denied, missed or
	// stopped, and the rest is ignored.
	stopped bool
}

type pendingGrant struct {
	req *messages.OffloadRequest
	to  Peer
	ep  uint64
	// gone marks items whose chain was deleted while the request waited:
	// they are answered as denied and never stored.
	gone []bool
}

type flushWaiter struct {
	reply chan<- error
	ep    uint64
}

// NewTier returns a Tier over cfg.Pool, which it owns from now on.
func NewTier(cfg TierConfig) *Tier {
	log := cfg.Log
	if log == nil {
		log = zap.NewNop()
	}
	return &Tier{cfg: cfg, pool: cfg.Pool, log: log, digests: make([]prefixhash.Digest, cfg.Pool.NumSlots()),
		stats:    messages.TierStats{Tier: messages.Pinned, Extra: map[string]float64{}},
		draining: map[int]bool{}, reads: map[uint64]*lowerRead{},
		pending: map[uint64]int{}, fillEp: map[int]uint64{}, drainEp: map[int]uint64{},
		drainOf: map[uint64]int{}, drainKey: map[int]uint64{}, readers: map[int]int{}, drained: map[int]bool{}, doomed: map[int]bool{}}
}

// SetNow sets the tier's clock (read deadlines are compared with it).
func (t *Tier) SetNow(now time.Time) { t.now = now }

// Ready returns what the events since the last call ask for and forgets it.
// Flushes whose work is done are answered in it.
func (t *Tier) Ready() Ready {
	t.maybeFlushed()
	r := t.ready
	t.ready = Ready{}
	return r
}

// event starts an event: new work belongs to the current flush epoch.
func (t *Tier) event() { t.cause = t.epoch }

func (t *Tier) toIndex(m *messages.IndexUpdate) { t.ready.ToIndex = append(t.ready.ToIndex, m) }
func (t *Tier) send(to Peer, m any)             { t.ready.Sends = append(t.ready.Sends, Send{To: to, Msg: m}) }
func (t *Tier) reply(f func())                  { t.ready.Replies = append(t.ready.Replies, f) }

// Offload queues the GPU's offer and grants slots as they can be had.
func (t *Tier) Offload(m *messages.OffloadRequest, from Peer) {
	if t.stopped {
		t.send(from, denyAll(m))
		return
	}
	t.event()
	t.queue = append(t.queue, pendingGrant{req: m, to: from, ep: t.cause})
	t.begin(t.cause)
	t.serveGrants()
	t.drain(0)
	t.maybeFlushed()
}

// grant reserves a Filling slot per item, evicting resident slots when the pool is
// full. Items over the quota, or with no evictable slot, are denied.
func (t *Tier) grant(m *messages.OffloadRequest, gone []bool) *messages.OffloadGrant {
	g := &messages.OffloadGrant{ID: m.ID, Slots: make([]int, len(m.Items)), Bytes: make([][]byte, len(m.Items))}
	var evicted []uint64
	for i, it := range m.Items {
		if i < len(gone) && gone[i] {
			g.Slots[i] = messages.SlotDenied
			continue
		}
		// Held already, resident or draining below: the GPU may count it as
		// stored, unless another prefix holds the hash.
		slot, other := t.held(it.Hash)
		if other && t.digests[slot] == it.Digest {
			g.Slots[i] = messages.SlotExists
			continue
		}
		if other {
			t.stats.Mismatches++
		}
		if t.inFlight >= t.cfg.WriteQuota {
			g.Slots[i] = messages.SlotDenied
			t.stats.Denied++
			continue
		}
		// Displaced only for an offer past the quota check: a denied one
		// would drop the resident block for nothing.
		if other && !t.displace(it.Hash, &evicted) {
			g.Slots[i] = messages.SlotDenied
			continue
		}
		slot, err := t.reserve(it.Hash, &evicted)
		switch {
		case errors.Is(err, ErrExists):
			// Filling: another offer's copy or a read from below is in
			// flight, and it may fail. Denied, the GPU keeps its block and
			// offers it again when it lets it go.
			g.Slots[i] = messages.SlotDenied
		case err != nil:
			g.Slots[i] = messages.SlotDenied
			t.stats.Denied++
		default:
			g.Slots[i] = slot
			g.Bytes[i] = t.pool.Bytes(slot)
			t.digests[slot] = it.Digest
			t.keepChain(slot, &m.Items[i])
			t.inFlight++
			t.fillEp[slot] = t.cause
			t.begin(t.cause)
		}
	}
	if len(evicted) > 0 {
		t.toIndex(&messages.IndexUpdate{Tier: messages.Pinned, Remove: evicted})
	}
	return g
}

// displace evicts the resident block of another prefix that holds h (a
// 64-bit collision: forged, as no honest one is expected) so that the
// block offered now can take its place. A slot keeps one block per hash;
// were the first writer kept, a tenant that forged a victim's chain and
// wrote it first would keep the victim's KV out of pinned memory for as
// long as it kept its own there (stress TestForgedSquatterBelowTheGPU).
// The newer write wins instead, as recency would have it: two prompts
// colliding take turns, and neither is ever served the other's bytes (the
// digests are compared on every fetch). A block draining below or still
// filling is not displaced (false: the offer is denied); readers of the
// displaced one finish with it (Pool.Remove).
func (t *Tier) displace(h uint64, evicted *[]uint64) bool {
	if slot, ok := t.pool.Lookup(h); !ok || (t.pool.at(slot).refs > 0 && len(t.pool.free) == 0) {
		// Draining or filling; or read, its slot not freed at once, and no
		// free slot for the offer: displaced, it would be lost for an offer
		// that is denied.
		return false
	}
	t.pool.Remove(h)
	*evicted = append(*evicted, h)
	t.stats.Evictions++
	return true
}

// held returns the slot holding h: resident, or draining below and still
// served from pinned memory.
func (t *Tier) held(h uint64) (int, bool) {
	if slot, ok := t.pool.Lookup(h); ok {
		return slot, true
	}
	slot, ok := t.drainOf[h]
	return slot, ok
}

// serveGrants answers queued offload requests in order. With a tier below, a
// request that needs more slots than are free waits while victims drain; it
// is answered (with denials for what still does not fit) once nothing is
// draining.
func (t *Tier) serveGrants() {
	for len(t.queue) > 0 {
		q := t.queue[0]
		t.cause = q.ep
		if t.cfg.Lower {
			need := 0
			for _, it := range q.req.Items {
				if _, ok := t.held(it.Hash); !ok {
					need++
				}
			}
			need = min(need, t.cfg.WriteQuota-t.inFlight)
			if free := t.pool.Stats().Free; need > free {
				if t.drainingCount() == 0 {
					t.drain(need - free)
				}
				if t.drainingCount() > 0 {
					return // LowerWritten frees slots and calls again
				}
			}
		}
		t.send(q.to, t.grant(q.req, q.gone))
		t.queue[0] = pendingGrant{} // the array outlives the slice: let the request go
		t.queue = t.queue[1:]
		t.end(q.ep)
	}
}

// reserve takes a Filling slot for h. When the pool is full the policy's victim
// goes: at once with no tier below, or when the tier below already holds it (a
// clean victim); a dirty victim drains below and this reservation fails.
func (t *Tier) reserve(h uint64, evicted *[]uint64) (int, error) {
	slot, err := t.pool.Reserve(h)
	if !errors.Is(err, ErrNoSpace) {
		return slot, err
	}
	if !t.cfg.Lower {
		if k, ok := t.pool.EvictOne(); ok {
			*evicted = append(*evicted, k)
			t.stats.Evictions++
			slot, err = t.pool.Reserve(h)
		}
		return slot, err
	}
	victims := t.pool.Evict(1)
	if len(victims) == 0 {
		return slot, err
	}
	v := victims[0]
	if !t.pool.Below(v.Slot) {
		t.drainVictims(victims)
		return slot, err
	}
	t.pool.Free(v.Slot)
	*evicted = append(*evicted, v.Key)
	t.stats.Evictions++
	return t.pool.Reserve(h)
}

// OffloadDone commits (or aborts) the slots the GPU's copies filled.
func (t *Tier) OffloadDone(m *messages.OffloadDone) {
	if t.stopped {
		return
	}
	t.event()
	var added []uint64
	t.cause = t.minEp(t.fillEp, m.Slots)
	for _, s := range m.Slots {
		t.end(t.fillEp[s])
		delete(t.fillEp, s)
	}
	for i, s := range m.Slots {
		if t.doomed[s] {
			delete(t.doomed, s)
			t.pool.Abort(s)
			continue
		}
		if m.Err == nil {
			t.pool.CommitClass(s, t.slotClass(s)) // granted by Offer: its chain is this block's
			added = append(added, m.Hashes[i])
		} else {
			t.pool.Abort(s)
			t.stats.Failed++
		}
	}
	t.inFlight -= len(m.Slots)
	if len(added) > 0 {
		t.toIndex(&messages.IndexUpdate{Tier: messages.Pinned, Added: added})
		if t.cfg.Lower && t.cfg.LowerIngestion == messages.IngestAll {
			t.writeThrough(added)
		}
	}
	t.drain(0)
	t.maybeFlushed()
}

// Flush answers reply once all work that came before it is done.
func (t *Tier) Flush(reply chan<- error) {
	if t.stopped {
		t.reply(func() { reply <- ErrTierStopped })
		return
	}
	t.event()
	t.flushers = append(t.flushers, flushWaiter{reply: reply, ep: t.epoch})
	t.epoch++
	t.maybeFlushed()
}

func (t *Tier) maybeFlushed() {
	keep := t.flushers[:0]
	for _, f := range t.flushers {
		if t.settled(f.ep) {
			r := f.reply
			t.reply(func() { r <- nil })
		} else {
			keep = append(keep, f)
		}
	}
	t.flushers = keep
}

// settled says whether no work of epoch ep or earlier is in flight.
func (t *Tier) settled(ep uint64) bool {
	for e, n := range t.pending {
		if e <= ep && n > 0 {
			return false
		}
	}
	return true
}

func (t *Tier) begin(ep uint64) { t.pending[ep]++ }

func (t *Tier) end(ep uint64) {
	if t.pending[ep]--; t.pending[ep] <= 0 {
		if t.pending[ep] < 0 {
			panic("kvtier: pinned tier: flush epoch count below zero")
		}
		delete(t.pending, ep)
	}
}

// minEp is the earliest epoch among slots in eps (t.epoch when none is there).
func (t *Tier) minEp(eps map[int]uint64, slots []int) uint64 {
	ep := t.epoch
	for _, s := range slots {
		if e, ok := eps[s]; ok && e < ep {
			ep = e
		}
	}
	return ep
}

// Fetch takes read references on the leading run of hashes held here whose
// digests match; with a tier below, the rest of the run is read from it into
// fresh slots first, under the request's deadline, and the grant goes out
// when it is done. A block held under its hash with another digest (another
// prefix, namespace or model) ends the run: it is never served.
func (t *Tier) Fetch(m *messages.FetchRequest, from Peer) {
	t.event()
	defer t.maybeFlushed()
	g := &messages.FetchGrant{ID: m.ID}
	if t.stopped {
		g.Short = messages.MissFailed
		t.send(from, g)
		return
	}
	if len(m.Digests) != len(m.Hashes) {
		// Nothing can be verified against a digest that is not there.
		t.log.Error("pinned tier: fetch with a digest per hash missing",
			zap.Int("hashes", len(m.Hashes)), zap.Int("digests", len(m.Digests)))
		t.stats.Mismatches++
		t.stats.Misses += uint64(len(m.Hashes))
		g.Short = messages.MissMismatch
		t.send(from, g)
		return
	}
	n := 0
	for i, h := range m.Hashes {
		slot, ok := t.pool.Acquire(h)
		if !ok {
			if slot, ok = t.drainOf[h]; !ok {
				break
			}
			t.readers[slot]++ // a draining slot still holds the block
		}
		if i >= len(m.Digests) || t.digests[slot] != m.Digests[i] {
			t.release(slot)
			t.stats.Mismatches++
			t.stats.Misses += uint64(len(m.Hashes) - n)
			g.Short = messages.MissMismatch
			t.send(from, g)
			return
		}
		t.stats.Hits++
		g.Slots = append(g.Slots, slot)
		g.Bytes = append(g.Bytes, t.pool.Bytes(slot))
		t.touchHot(h, slot)
		n++
	}
	rest := m.Hashes[n:]
	if len(rest) == 0 || !t.cfg.Lower {
		t.stats.Misses += uint64(len(rest))
		if len(rest) > 0 {
			g.Short = messages.MissEvicted
		}
		t.send(from, g)
		return
	}
	t.readFromLower(&lowerRead{replyTo: from, grant: g}, rest, m.Digests[n:], m.Deadline)
}

// Release drops the read references of a finished fetch.
func (t *Tier) Release(slots []int) {
	if t.stopped {
		return
	}
	t.event()
	for _, s := range slots {
		t.release(s)
	}
	t.maybeFlushed()
}

// release drops a fetch's read reference on slot: on a resident slot through
// the pool, on a draining one here (freeing it after the last reader once the
// tier below has the block).
func (t *Tier) release(slot int) {
	n, ok := t.readers[slot]
	if !ok {
		t.pool.Release(slot)
		return
	}
	if n--; n > 0 {
		t.readers[slot] = n
		return
	}
	delete(t.readers, slot)
	if t.drained[slot] {
		delete(t.drained, slot)
		t.pool.Free(slot)
	}
}

// BelowGone forgets that the tier below holds these blocks: they drain again
// when they are evicted.
func (t *Tier) BelowGone(hashes []uint64) {
	if t.stopped {
		return
	}
	for _, h := range hashes {
		if slot, ok := t.pool.Lookup(h); ok {
			t.pool.SetBelow(slot, false)
		}
	}
}

// Query answers an exists, prefetch or delete query (a prefetch once its
// reads from below are done).
func (t *Tier) Query(m *messages.PinnedQuery) {
	res := &messages.QueryResult{}
	if t.stopped {
		res.Err = ErrTierStopped
		r := m.Reply
		t.reply(func() { r <- res })
		return
	}
	t.event()
	defer t.maybeFlushed()
	switch m.Kind {
	case messages.QueryDelete:
		removed := t.deleteChain(m.Hashes, m.Digests)
		res.Deleted = len(removed)
		if len(removed) > 0 {
			t.toIndex(&messages.IndexUpdate{Tier: messages.Pinned, Remove: removed})
		}
	case messages.QueryPrefetch, messages.QueryExists:
		// The leading run held here with matching digests (resident, or
		// draining below and still readable), in blocks (the Manager
		// converts).
		n := 0
		for i, h := range m.Hashes {
			slot, ok := t.held(h)
			if !ok {
				break
			}
			if i >= len(m.Digests) || t.digests[slot] != m.Digests[i] {
				break
			}
			n++
		}
		res.Tokens[messages.Pinned.Index()] = n
		if m.Kind == messages.QueryPrefetch && t.cfg.Lower && n < len(m.Hashes) && n < len(m.Digests) {
			t.readFromLower(&lowerRead{prefetch: m.Reply, have: n}, m.Hashes[n:], m.Digests[n:], time.Time{})
			return
		}
	}
	r := m.Reply
	t.reply(func() { r <- res })
}

// deleteChain drops the chain's blocks held here with matching digests:
// resident ones at once (freed after their last reader), draining ones stop
// being served (the tier below's own delete drops their write), and slots
// still filling (an offload or a read from below in flight) are aborted when
// their fill completes instead of becoming resident. It returns the hashes
// dropped.
func (t *Tier) deleteChain(hashes []uint64, digests []prefixhash.Digest) []uint64 {
	var removed []uint64
	for i, h := range hashes {
		if i >= len(digests) {
			break
		}
		// A hash may be held in more than one state at once (a copy
		// draining while a read brings it back up): each is dropped.
		d, gone := digests[i], false
		if slot, ok := t.pool.Lookup(h); ok && t.digests[slot] == d {
			t.pool.Remove(h)
			gone = true
		}
		if slot, ok := t.drainOf[h]; ok && t.digests[slot] == d {
			delete(t.drainOf, h)
			gone = true
		}
		if slot, ok := t.pool.Filling(h); ok && t.digests[slot] == d {
			t.doomed[slot] = true
		}
		if gone {
			removed = append(removed, h)
		}
	}
	if len(t.queue) == 0 && len(t.readQ) == 0 {
		return removed
	}
	chain := make(map[uint64]prefixhash.Digest, len(hashes))
	for i, h := range hashes[:min(len(hashes), len(digests))] {
		chain[h] = digests[i]
	}
	for qi := range t.queue { // offloads waiting for slots: never stored
		q := &t.queue[qi]
		for i, it := range q.req.Items {
			if d, ok := chain[it.Hash]; ok && d == it.Digest {
				if q.gone == nil {
					q.gone = make([]bool, len(q.req.Items))
				}
				q.gone[i] = true
			}
		}
	}
	for ri := range t.readQ { // reads not started: cut before the chain
		r := &t.readQ[ri]
		for i, h := range r.hashes {
			if d, ok := chain[h]; ok && d == r.digests[i] {
				r.hashes, r.digests, r.f.deleted = r.hashes[:i], r.digests[:i], true
				break
			}
		}
	}
	return removed
}

// Stop answers everything that waits: offers waiting for slots are denied,
// fetches waiting for reads from below get what pinned memory already
// granted them (the rest missed, failed), prefetches their leading run here,
// flushes ErrTierStopped. Slots the GPU or the tier below may still be
// copying into are left as they are. From then on requests are answered the
// same way and the rest is ignored: the tier serves nothing more.
func (t *Tier) Stop() {
	if t.stopped {
		return
	}
	t.stopped = true
	for _, q := range t.queue {
		t.send(q.to, denyAll(q.req))
	}
	t.queue = nil
	reads := make([]*lowerRead, 0, len(t.readQ)+len(t.reads))
	for _, r := range t.readQ {
		reads = append(reads, r.f)
	}
	for _, f := range t.reads {
		reads = append(reads, f)
	}
	t.readQ, t.reads = nil, map[uint64]*lowerRead{}
	for _, f := range reads {
		if f.prefetch != nil {
			r, res := f.prefetch, &messages.QueryResult{}
			res.Tokens[messages.Pinned.Index()] = f.have
			t.reply(func() { r <- res })
			continue
		}
		f.grant.Short = messages.MissFailed
		t.send(f.replyTo, f.grant)
	}
	for _, f := range t.flushers {
		r := f.reply
		t.reply(func() { r <- ErrTierStopped })
	}
	t.flushers = nil
}

// denyAll is the grant of none of m's items.
func denyAll(m *messages.OffloadRequest) *messages.OffloadGrant {
	g := &messages.OffloadGrant{ID: m.ID, Slots: make([]int, len(m.Items)), Bytes: make([][]byte, len(m.Items))}
	for i := range g.Slots {
		g.Slots[i] = messages.SlotDenied
	}
	return g
}

// Stats returns the tier's counters and occupancy.
func (t *Tier) Stats() messages.TierStats {
	s := t.stats
	ps := t.pool.Stats()
	s.Blocks = ps.Slots
	s.UsedBlocks = ps.Slots - ps.Free
	s.BytesUsed = ps.BytesUsed
	s.InFlight = t.inFlight
	s.Extra = map[string]float64{"locked": b2f(ps.Locked), "resident": float64(ps.Resident),
		"draining": float64(ps.Draining), "queued_offloads": float64(len(t.queue)), "class_hints": float64(ps.ClassHints)}
	return s
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// CheckInvariants walks the whole state: the pool's invariants, and the
// tier's books on slots in flight agree with the pool. Tests and the
// invariants build run it after every event. After Stop the books of work
// in flight are dropped on purpose, and only the pool is checked.
func (t *Tier) CheckInvariants() error {
	if err := t.pool.CheckInvariants(); err != nil || t.stopped {
		return err
	}
	if t.inFlight != len(t.fillEp) {
		return fmt.Errorf("pinned tier: %d offloads in flight, %d slots with an epoch", t.inFlight, len(t.fillEp))
	}
	if len(t.draining) != len(t.drainEp) {
		return fmt.Errorf("pinned tier: %d slots at the disk, %d with an epoch", len(t.draining), len(t.drainEp))
	}
	st := t.pool.Stats()
	if drains := t.drainingCount() + len(t.drained); drains != st.Draining {
		return fmt.Errorf("pinned tier: %d slots draining or awaiting readers by its books, pool says %d", drains, st.Draining)
	}
	// A draining block whose chain was deleted keeps its slot key but is no
	// longer served (it leaves drainOf).
	if len(t.drainOf) > len(t.drainKey) || len(t.drainKey) != t.drainingCount() {
		return fmt.Errorf("pinned tier: %d draining hashes, %d draining slot keys, %d draining slots", len(t.drainOf), len(t.drainKey), t.drainingCount())
	}
	for h, s := range t.drainOf {
		if t.drainKey[s] != h {
			return fmt.Errorf("pinned tier: draining hash %016x points at slot %d, which drains %016x", h, s, t.drainKey[s])
		}
	}
	for s := range t.drained {
		if t.readers[s] == 0 {
			return fmt.Errorf("pinned tier: slot %d waits for readers it does not have", s)
		}
	}
	n := 0
	for _, c := range t.pending {
		n += c
	}
	if want := len(t.fillEp) + len(t.drainEp) + len(t.queue) + len(t.reads) + len(t.readQ); n != want {
		return fmt.Errorf("pinned tier: %d epoch-counted items, %d in flight", n, want)
	}
	return nil
}

// Pool returns the tier's pool, for tests and stats; the Tier owns it.
func (t *Tier) Pool() *Pool { return t.pool }
