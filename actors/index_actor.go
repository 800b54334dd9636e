package actors

import (
	"fmt"
	"maps"
	"slices"

	"github.com/asynkron/protoactor-go/actor"
	"go.uber.org/zap"

	"github.com/kvtier/kvtier/messages"
)

// IndexActor owns the prefix index: block hash -> the set of tiers below the GPU
// that hold the block. The GPU actor is the authority for its own blocks.
type IndexActor struct {
	log       *zap.Logger
	residency map[uint64]messages.Tier
	// order is the node's own tiers below the GPU, top first, as the
	// Manager configured them: a block is served from the first that holds
	// it.
	order []messages.Tier
	// pos is each tier's place in order, from 1 (0: not in it), indexed
	// by Tier.Index; known is the set of them.
	pos     [messages.NumTiers]int
	known   messages.Tier
	lookups uint64
	// remote, when set, is the shared tier's actor: the part of a chain no
	// local tier holds is looked up there (one round trip per Lookup).
	remote *actor.PID
	// remoteActor is Remote as configured, watched: remote is cleared when
	// the tier goes out of service, remoteActor never.
	remoteActor *actor.PID
	nextID      uint64
	pending     map[uint64]*remotePending
	// gpu and pinned hear of blocks that left the tiers below them
	// (messages.BelowGone), once IndexWatch named them: the GPU when a
	// block left every tier in order, pinned (the first) when it left
	// every tier below it.
	gpu, pinned *actor.PID
	// missDisk hears of the blocks requests came to the disk for and it
	// lacked (messages.Missed, from the GPU's messages.Demand), once
	// IndexWatch named it.
	missDisk *actor.PID
	// events, when set, is the KV-event publisher: the index forwards the
	// pinned and disk tiers' changes to it, in the order it applies them.
	events *actor.PID
	// down are the tiers messages.TiersDown took out of service: their
	// additions are ignored from then on.
	down messages.Tier
	// busy is the Lookup being answered, so that a failure half-way
	// through still answers it (as finding nothing below).
	busy *busyLookup
	// lookupFault is IndexConfig.lookupFault.
	lookupFault func(*messages.Lookup)
}

type busyLookup struct {
	to     *actor.PID
	reply  chan *messages.LookupResult // Lookup.Reply, instead of to
	id     uint64
	chains int
}

// answer sends res to whoever asked: the reply channel, or the sender.
func answer(ctx actor.Context, to *actor.PID, reply chan *messages.LookupResult, res *messages.LookupResult) {
	switch {
	case reply != nil:
		reply <- res
	case to != nil:
		ctx.Send(to, res)
	}
}

// IndexWatch names the tiers the index tells when blocks leave the tiers
// below them (messages.BelowGone), and the disk tier when its eviction
// policy learns from misses (messages.Missed); any PID may be nil.
type IndexWatch struct {
	GPU, Pinned *actor.PID
	// MissDisk is the disk actor itself, not a fan-out over it and the
	// remote tier. The pinned tier is not told of its misses: its blocks
	// are written ahead of need while still on the GPU, and with misses its
	// Adaptive policy measured worse (see policy.MissObserver).
	MissDisk *actor.PID
}

type remotePending struct {
	to     *actor.PID
	reply  chan *messages.LookupResult // Lookup.Reply, instead of to
	res    *messages.LookupResult
	chains []int // indexes of res.Tiers asked about, in RemoteLookup order
}

// IndexConfig configures the index actor.
type IndexConfig struct {
	Log *zap.Logger
	// Tiers are the node's own tiers below the GPU, top first (pinned
	// memory, then the disk when there is one): the order lookups serve
	// blocks from. Each is a single tier, neither the GPU nor the shared
	// remote tier, which Remote answers for. The first is pinned memory,
	// the staging area of every tier below it: IndexWatch.Pinned hears
	// when a block left every tier after it.
	Tiers []messages.Tier
	// Remote (the shared tier's actor) and Events (the KV-event publisher)
	// may be nil.
	Remote, Events *actor.PID
	// lookupFault, set by tests, runs at the start of every lookup: a
	// panic there is the index failing half-way through one.
	lookupFault func(*messages.Lookup)
}

// NewIndexActor returns the actor's producer (one actor per producer: its
// state outlives a restart), or an error for a Tiers list
// that is empty, does not start with pinned memory, repeats a tier, or names
// a set, an unknown tier, the GPU or the remote tier.
func NewIndexActor(cfg IndexConfig) (actor.Producer, error) {
	if len(cfg.Tiers) == 0 || cfg.Tiers[0] != messages.Pinned {
		return nil, fmt.Errorf("kvtier: index actor: tiers %v: want pinned memory first", cfg.Tiers)
	}
	var seen messages.Tier
	var pos [messages.NumTiers]int
	for i, t := range cfg.Tiers {
		if t == 0 || t&(t-1) != 0 || t >= 1<<messages.NumTiers || t&(messages.GPU|messages.Remote) != 0 || seen&t != 0 {
			return nil, fmt.Errorf("kvtier: index actor: tier %d of %v: want each of pinned or disk once", i, cfg.Tiers)
		}
		seen |= t
		pos[t.Index()] = i + 1
	}
	if cfg.Log == nil {
		cfg.Log = zap.NewNop()
	}
	order := append([]messages.Tier(nil), cfg.Tiers...)
	// One instance for every incarnation: a restart keeps the residency,
	// the lookups waiting on the remote tier and the PIDs IndexWatch named
	// (a fresh index would leave allocations waiting for ever and forget
	// whom to tell of blocks leaving). An update the failure cut short may
	// leave an entry that is wrong; that costs a miss, never a wrong block,
	// as every tier verifies what it serves.
	a := &IndexActor{log: cfg.Log, residency: make(map[uint64]messages.Tier), order: order, pos: pos, known: seen,
		remote: cfg.Remote, remoteActor: cfg.Remote, events: cfg.Events, pending: map[uint64]*remotePending{}, lookupFault: cfg.lookupFault}
	return func() actor.Actor { return a }, nil
}

// sendMisses tells the disk tier, when IndexWatch named it, of blocks that
// requests came to it for and it lacked (messages.Demand: neither it nor
// pinned memory held them; a pinned hit never reaches the disk).
func (a *IndexActor) sendMisses(ctx actor.Context, m *messages.Demand) {
	if a.missDisk == nil || a.pos[messages.Disk.Index()] == 0 || len(m.Hashes) == 0 {
		return
	}
	ctx.Send(a.missDisk, &messages.Missed{Hashes: m.Hashes})
}

// Receive implements actor.Actor.
func (a *IndexActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *IndexWatch:
		a.gpu, a.pinned = m.GPU, m.Pinned
		a.missDisk = m.MissDisk
	case *messages.Residency: // the GPU's, relayed by the pinned actor
		if a.events != nil {
			ctx.Send(a.events, m)
		}
	case *messages.EventsSync:
		if a.events != nil {
			ctx.Send(a.events, m)
		} else {
			m.Reply <- messages.EventsSeq{}
		}
	case *messages.IndexUpdate:
		if m.Tier&^a.known != 0 || m.Tier == 0 {
			a.log.Warn("index actor: update from a tier not configured below the GPU, ignored", zap.Stringer("tier", m.Tier))
			return
		}
		a.update(ctx, m)
	case *messages.TiersDown:
		a.tiersDown(ctx, m.Tiers)
	case *messages.Demand:
		a.sendMisses(ctx, m)
	case *messages.Lookup:
		a.busy = &busyLookup{to: ctx.Sender(), reply: m.Reply, id: m.ID, chains: len(m.Chains)}
		a.lookup(ctx, m)
		a.busy = nil // not deferred: a panic must leave it for Restarting
	case *messages.RemoteLookupResult:
		p, ok := a.pending[m.ID]
		if !ok {
			a.log.Error("index actor: remote lookup result for an unknown request", zap.Uint64("id", m.ID))
			return
		}
		delete(a.pending, m.ID)
		for j, i := range p.chains {
			if j < len(m.Found) {
				for range m.Found[j] {
					p.res.Tiers[i] = append(p.res.Tiers[i], messages.Remote)
				}
			}
		}
		answer(ctx, p.to, p.reply, p.res)
	case *actor.Started:
		watch(ctx, a.remoteActor)
	case *actor.Terminated:
		if a.remoteActor != nil && m.Who.Equal(a.remoteActor) {
			a.remoteGone(ctx)
		}
	case *actor.Restarting:
		if b := a.busy; b != nil {
			a.busy = nil
			answer(ctx, b.to, b.reply, &messages.LookupResult{ID: b.id, Tiers: make([][]messages.Tier, b.chains), Unanswered: true})
		}
	case *actor.DeadLetterResponse:
		// A lookup that reached the remote tier after it stopped: its
		// Terminated answers it.
	case *messages.ResidencyQuery:
		out := map[messages.Tier][]uint64{}
		for h, t := range a.residency {
			for _, tier := range a.order {
				if t&tier != 0 {
					out[tier] = append(out[tier], h)
				}
			}
		}
		m.Reply <- out
	case *messages.StatsRequest:
		m.Reply <- messages.TierStats{UsedBlocks: len(a.residency), Extra: map[string]float64{"lookups": float64(a.lookups)}}
	case *actor.Stopping:
		unwatch(ctx, a.remoteActor)
	case *actor.Stopped:
	default:
		a.log.Warn("index actor: unexpected message", zap.String("type", typeName(m)))
	}
}

// lookup answers m from the residency, asking the remote tier (one round
// trip for the batch) about what no local tier holds.
func (a *IndexActor) lookup(ctx actor.Context, m *messages.Lookup) {
	a.lookups++
	if a.lookupFault != nil {
		a.lookupFault(m)
	}
	res := &messages.LookupResult{ID: m.ID, Tiers: make([][]messages.Tier, len(m.Chains))}
	var ask *messages.RemoteLookup
	var p *remotePending
	for i, chain := range m.Chains {
		res.Tiers[i] = a.leadingRun(chain)
		if n := len(res.Tiers[i]); a.remote != nil && n < len(chain) && i < len(m.Digests) && len(m.Digests[i]) == len(chain) {
			if ask == nil {
				a.nextID++
				ask = &messages.RemoteLookup{ID: a.nextID}
				p = &remotePending{to: ctx.Sender(), reply: m.Reply, res: res}
			}
			ask.Digests = append(ask.Digests, m.Digests[i][n:])
			p.chains = append(p.chains, i)
		}
	}
	if ask == nil {
		answer(ctx, ctx.Sender(), m.Reply, res)
		return
	}
	a.pending[ask.ID] = p
	ctx.Request(a.remote, ask)
}

// remoteGone stops asking the shared tier, whose actor stopped for good:
// lookups waiting on it are answered with what the node's own tiers hold.
func (a *IndexActor) remoteGone(ctx actor.Context) {
	a.log.Error("index actor: the remote tier's actor stopped for good; lookups no longer ask it")
	a.remote = nil
	for _, id := range slices.Sorted(maps.Keys(a.pending)) {
		p := a.pending[id]
		delete(a.pending, id)
		answer(ctx, p.to, p.reply, p.res)
	}
}

// update applies one tier's changes: announced to the event publisher in the
// order applied, and BelowGone to the pinned tier and the GPU for blocks
// that left every tier below them, and to the GPU for blocks dropped on
// their way down (m.Dropped) and for every block a tier after pinned
// memory let go of (see dropsBelow). A tier that is down adds nothing.
func (a *IndexActor) update(ctx actor.Context, m *messages.IndexUpdate) {
	if m.Tier&a.down != 0 && len(m.Added) > 0 {
		m = &messages.IndexUpdate{Tier: m.Tier, Remove: m.Remove, Dropped: m.Dropped}
	}
	if a.events != nil {
		ctx.Send(a.events, residencyOf(m))
	}
	for _, h := range m.Added {
		a.residency[h] |= m.Tier
	}
	below := a.known &^ a.order[0] // every tier after the first
	drops := a.dropsBelow(m.Tier)
	var leftBelow, leftAll []uint64
	for _, h := range m.Remove {
		was := a.residency[h]
		t := was &^ m.Tier
		if t == 0 {
			delete(a.residency, h)
		} else {
			a.residency[h] = t
		}
		if was&below != 0 && t&below == 0 {
			leftBelow = append(leftBelow, h)
		}
		if (was != 0 && t == 0) || (drops && was&m.Tier != 0) {
			leftAll = append(leftAll, h)
		}
	}
	// A block dropped on its way down may leave the hash listed below
	// under another prefix's block: the GPU forgets its copy anyway.
	for _, h := range m.Dropped {
		if !slices.Contains(leftAll, h) {
			leftAll = append(leftAll, h)
		}
	}
	if len(leftBelow) > 0 && a.pinned != nil {
		ctx.Send(a.pinned, &messages.BelowGone{Hashes: leftBelow})
	}
	if len(leftAll) > 0 && a.gpu != nil {
		ctx.Send(a.gpu, &messages.BelowGone{Hashes: leftAll})
	}
}

// dropsBelow reports whether tier comes after the first (the disk): each
// of its removals is a drop, and the GPU hears BelowGone for the hash even
// when the hash stays listed on another tier.
//
// The index tracks 64-bit hashes, not prefixes. Pinned memory (the first
// tier) is the staging area of the tiers after it: a removal from it with
// the hash still listed below is the block's move down, and it reports the
// blocks it drops instead (IndexUpdate.Dropped). A tier after it has no
// tier to move a block to: whatever it lets go (its policy's eviction, a
// displacement by another prefix's block, a record found corrupt, a
// delete, the tier going out of service) is gone from it. When the hash
// stays listed elsewhere, the holder there may be another prefix's block
// under the same hash (a forged collision: pinned memory holding a block
// read from the shared tier, say); were the GPU told nothing, it would keep
// its copy of the dropped block marked held below and evict it without a
// copy, its KV held nowhere. The index cannot tell a collision from the
// same block held twice, so it tells the GPU in both cases. The cost, only
// when the other tier holds the same prefix's block (pinned memory holding
// a block the disk evicted), is one offer to pinned memory when the GPU
// lets the block go: pinned memory answers that it holds it already
// (messages.SlotExists), or takes one more copy when it drained it since.
// The shared remote tier is never listed (its blocks are found by lookups),
// so it never keeps a hash listed here.
func (a *IndexActor) dropsBelow(tier messages.Tier) bool {
	return tier&(a.known&^a.order[0]) != 0
}

// tiersDown takes tiers out of service: every entry of theirs is removed
// (as their own updates would), later additions are ignored, and the
// shared tier is asked no more when it is among them.
func (a *IndexActor) tiersDown(ctx actor.Context, tiers messages.Tier) {
	for _, t := range a.order {
		if t&tiers == 0 || t&a.down != 0 {
			continue
		}
		var gone []uint64
		for h, r := range a.residency {
			if r&t != 0 {
				gone = append(gone, h)
			}
		}
		slices.Sort(gone) // the event stream says it in one order on every run
		a.update(ctx, &messages.IndexUpdate{Tier: t, Remove: gone})
	}
	a.down |= tiers & a.known
	if tiers&messages.Remote != 0 {
		a.remote = nil
	}
	a.log.Warn("index actor: tiers out of service", zap.Stringer("tiers", tiers))
}

// leadingRun returns the tier each hash of the chain's leading run is served
// from: the first in order that holds it.
func (a *IndexActor) leadingRun(chain []uint64) []messages.Tier {
	var out []messages.Tier
	for _, h := range chain {
		t := a.residency[h]
		served := messages.Tier(0)
		for _, o := range a.order {
			if t&o != 0 {
				served = o
				break
			}
		}
		if served == 0 {
			return out
		}
		out = append(out, served)
	}
	return out
}

// residencyOf is an index update as the event publisher takes it: the
// additions, with their chains where the tier gave them, then the removals,
// as the index applies them.
func residencyOf(m *messages.IndexUpdate) *messages.Residency {
	r := &messages.Residency{Tier: m.Tier, Changes: make([]messages.ResidencyChange, 0, len(m.Added)+len(m.Remove))}
	for i, h := range m.Added {
		c := messages.ResidencyChange{Stored: true, Hash: h}
		if i < len(m.Chains) && m.Chains[i].Tokens != nil {
			// The tier's own record of the block (the disk's as it reopens).
			ch := &m.Chains[i]
			c.Parent, c.HasParent, c.Tokens, c.LoRA = ch.Parent, ch.HasParent, ch.Tokens, ch.LoRA
		}
		r.Changes = append(r.Changes, c)
	}
	for _, h := range m.Remove {
		r.Changes = append(r.Changes, messages.ResidencyChange{Hash: h})
	}
	return r
}
