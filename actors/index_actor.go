package actors

import (
	"github.com/asynkron/protoactor-go/actor"
	"go.uber.org/zap"

	"github.com/kvtier/kvtier/messages"
)

// IndexActor owns the prefix index: block hash -> the set of tiers below the GPU
// that hold the block. The GPU actor is the authority for its own blocks.
type IndexActor struct {
	log       *zap.Logger
	residency map[uint64]messages.Tier
	lookups   uint64
}

// NewIndexActor returns the actor's producer.
func NewIndexActor(log *zap.Logger) actor.Producer {
	return func() actor.Actor {
		return &IndexActor{log: log, residency: make(map[uint64]messages.Tier)}
	}
}

// Receive implements actor.Actor.
func (a *IndexActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *messages.IndexUpdate:
		for _, h := range m.Added {
			a.residency[h] |= m.Tier
		}
		for _, h := range m.Remove {
			if t := a.residency[h] &^ m.Tier; t == 0 {
				delete(a.residency, h)
			} else {
				a.residency[h] = t
			}
		}
	case *messages.Lookup:
		a.lookups++
		res := &messages.LookupResult{ID: m.ID, Tiers: make([][]messages.Tier, len(m.Chains))}
		for i, chain := range m.Chains {
			res.Tiers[i] = a.leadingRun(chain)
		}
		ctx.Respond(res)
	case *messages.StatsRequest:
		m.Reply <- messages.TierStats{UsedBlocks: len(a.residency), Extra: map[string]float64{"lookups": float64(a.lookups)}}
	case *actor.Started, *actor.Stopping, *actor.Stopped, *actor.Restarting:
	default:
		a.log.Warn("index actor: unexpected message", zap.String("type", typeName(m)))
	}
}

// leadingRun returns the tier of each hash of the chain's leading run held below
// the GPU, preferring pinned memory.
func (a *IndexActor) leadingRun(chain []uint64) []messages.Tier {
	var out []messages.Tier
	for _, h := range chain {
		t := a.residency[h]
		switch {
		case t&messages.Pinned != 0:
			out = append(out, messages.Pinned)
		case t&messages.Disk != 0:
			out = append(out, messages.Disk)
		default:
			return out
		}
	}
	return out
}
