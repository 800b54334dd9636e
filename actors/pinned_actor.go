package actors

import (
	"errors"

	"github.com/asynkron/protoactor-go/actor"
	"go.uber.org/zap"

	"github.com/kvtier/kvtier/messages"
	"github.com/kvtier/kvtier/pinned"
)

// PinnedConfig configures the pinned pool actor.
type PinnedConfig struct {
	Pool  *pinned.Pool // owned by the actor from now on
	Index *actor.PID
	// WriteQuota bounds slots being filled at once (offloads in flight); an
	// offload over it is denied and counted, never queued.
	WriteQuota int
	Log        *zap.Logger
}

// PinnedActor owns the pinned host pool: slot allocation, eviction (its policy is
// the pool's) and read references handed to the GPU actor's copy workers.
type PinnedActor struct {
	cfg      PinnedConfig
	pool     *pinned.Pool
	inFlight int
	flushers []chan error
	stats    messages.TierStats
}

// NewPinnedActor returns the actor's producer.
func NewPinnedActor(cfg PinnedConfig) actor.Producer {
	return func() actor.Actor {
		return &PinnedActor{cfg: cfg, pool: cfg.Pool, stats: messages.TierStats{Tier: messages.Pinned}}
	}
}

// Receive implements actor.Actor.
func (a *PinnedActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *messages.OffloadRequest:
		ctx.Respond(a.grant(ctx, m))
	case *messages.OffloadDone:
		a.finishOffload(ctx, m)
	case *messages.FetchRequest:
		ctx.Respond(a.fetch(m))
	case *messages.FetchRelease:
		for _, s := range m.Slots {
			a.pool.Release(s)
		}
	case *messages.PinnedQuery:
		m.Reply <- a.query(ctx, m)
	case *messages.Flush:
		if a.inFlight == 0 {
			m.Reply <- nil
		} else {
			a.flushers = append(a.flushers, m.Reply)
		}
	case *messages.StatsRequest:
		m.Reply <- a.snapshot()
	case *actor.Started, *actor.Stopping, *actor.Restarting:
	case *actor.Stopped:
		for _, f := range a.flushers {
			f <- errors.New("kvtier: pinned actor stopped")
		}
		a.flushers = nil
	default:
		a.cfg.Log.Warn("pinned actor: unexpected message", zap.String("type", typeName(m)))
	}
}

// grant reserves a Filling slot per item, evicting resident slots when the pool is
// full. Items over the quota, or with no evictable slot, are denied.
func (a *PinnedActor) grant(ctx actor.Context, m *messages.OffloadRequest) *messages.OffloadGrant {
	g := &messages.OffloadGrant{ID: m.ID, Slots: make([]int, len(m.Items)), Bytes: make([][]byte, len(m.Items))}
	var evicted []uint64
	for i, it := range m.Items {
		if _, ok := a.pool.Lookup(it.Hash); ok {
			g.Slots[i] = messages.SlotExists
			continue
		}
		if a.inFlight >= a.cfg.WriteQuota {
			g.Slots[i] = messages.SlotDenied
			a.stats.Denied++
			continue
		}
		slot, err := a.pool.Reserve(it.Hash)
		if errors.Is(err, pinned.ErrNoSpace) {
			if k, ok := a.pool.EvictOne(); ok {
				evicted = append(evicted, k)
				a.stats.Evictions++
				slot, err = a.pool.Reserve(it.Hash)
			}
		}
		switch {
		case errors.Is(err, pinned.ErrExists):
			g.Slots[i] = messages.SlotExists
		case err != nil:
			g.Slots[i] = messages.SlotDenied
			a.stats.Denied++
		default:
			g.Slots[i] = slot
			g.Bytes[i] = a.pool.Bytes(slot)
			a.inFlight++
		}
	}
	if len(evicted) > 0 {
		ctx.Send(a.cfg.Index, &messages.IndexUpdate{Tier: messages.Pinned, Remove: evicted})
	}
	return g
}

func (a *PinnedActor) finishOffload(ctx actor.Context, m *messages.OffloadDone) {
	var added []uint64
	for i, s := range m.Slots {
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
	}
	if a.inFlight == 0 {
		for _, f := range a.flushers {
			f <- nil
		}
		a.flushers = nil
	}
}

// fetch takes read references on the leading run of hashes held here.
func (a *PinnedActor) fetch(m *messages.FetchRequest) *messages.FetchGrant {
	g := &messages.FetchGrant{ID: m.ID}
	for _, h := range m.Hashes {
		slot, ok := a.pool.Acquire(h)
		if !ok {
			a.stats.Misses++
			break
		}
		a.stats.Hits++
		g.Slots = append(g.Slots, slot)
		g.Bytes = append(g.Bytes, a.pool.Bytes(slot))
	}
	return g
}

func (a *PinnedActor) query(ctx actor.Context, m *messages.PinnedQuery) *messages.QueryResult {
	res := &messages.QueryResult{}
	switch m.Kind {
	case messages.QueryDelete:
		var removed []uint64
		for _, h := range m.Hashes {
			if a.pool.Remove(h) {
				removed = append(removed, h)
			}
		}
		res.Deleted = len(removed)
		if len(removed) > 0 {
			ctx.Send(a.cfg.Index, &messages.IndexUpdate{Tier: messages.Pinned, Remove: removed})
		}
	case messages.QueryPrefetch, messages.QueryExists:
		// Count the leading run held here; with no tier below pinned memory there
		// is nothing to bring up.
		for _, h := range m.Hashes {
			if _, ok := a.pool.Lookup(h); !ok {
				break
			}
			res.PinnedTokens++ // in blocks; the Manager converts
		}
	}
	return res
}

func (a *PinnedActor) snapshot() messages.TierStats {
	s := a.stats
	ps := a.pool.Stats()
	s.Blocks = ps.Slots
	s.UsedBlocks = ps.Slots - ps.Free
	s.BytesUsed = ps.BytesUsed
	s.InFlight = a.inFlight
	s.Extra = map[string]float64{"locked": b2f(ps.Locked), "resident": float64(ps.Resident)}
	return s
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
