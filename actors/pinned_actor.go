package actors

import (
	"time"

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
	// Disk is the actor of the tier below (disk, remote, or a fan-out to
	// both); nil for none. The pinned actor watches it: should it stop for
	// good, what waited on it is answered (pinned.Tier.LowerGone) and the
	// index takes LowerTiers out of service. That reuses the slots lent to
	// it, so it must be the actor doing the I/O on them, which ends that
	// I/O before it stops (the disk and remote actors do); a fan-out must
	// never stop for good (the Manager gives it a restarting guardian).
	Disk *actor.PID
	// LowerTiers are the tiers reached through Disk (default: the disk and
	// the remote tier).
	LowerTiers messages.Tier
	// DiskIngestion says when pinned blocks are written below: IngestEvict
	// (victims drain before their slot is reused; the actor keeps FreeTarget
	// slots free ahead of need), IngestAll (every committed block is written
	// through) or IngestHot (after HotHits fetches).
	DiskIngestion Ingestion
	HotHits       int
	FreeTarget    int
	Log           *zap.Logger
	// Clock is the tier's clock (nil: time.Now).
	Clock func() time.Time
}

// PinnedActor is the thin shell over the pinned tier's state machine
// (pinned.Tier): it feeds each message to the Tier, then sends what the
// Tier's Ready says — index updates, requests to the tier below, grants to
// the GPU actor — and runs its replies.
type PinnedActor struct {
	cfg   PinnedConfig
	t     *pinned.Tier
	clock func() time.Time
}

// NewPinnedActor returns the actor's producer.
//
// The Tier is made once and outlives a restart: an incarnation that
// panicked leaves it half-way through an event, so Restarting stops it
// (everything waiting is answered) and the next incarnation keeps answering
// from the stopped Tier (offers denied, fetches missed, flushes
// ErrTierStopped), and the prefix index takes this tier and those below it
// out of service (messages.TiersDown). Their blocks are never served again;
// the GPU recomputes them, and nothing waits for ever on a pool whose books
// are lost. So one producer spawns one actor, as it owns one Pool.
func NewPinnedActor(cfg PinnedConfig) actor.Producer {
	if cfg.Log == nil {
		cfg.Log = zap.NewNop()
	}
	if cfg.LowerTiers == 0 {
		cfg.LowerTiers = messages.Disk | messages.Remote
	}
	clock := cfg.Clock
	if clock == nil {
		clock = time.Now
	}
	t := pinned.NewTier(pinned.TierConfig{
		Pool: cfg.Pool, WriteQuota: cfg.WriteQuota, Lower: cfg.Disk != nil, LowerIngestion: cfg.DiskIngestion,
		HotHits: cfg.HotHits, FreeTarget: cfg.FreeTarget, Log: cfg.Log})
	return func() actor.Actor { return &PinnedActor{cfg: cfg, clock: clock, t: t} }
}

// Receive implements actor.Actor.
func (a *PinnedActor) Receive(ctx actor.Context) {
	a.t.SetNow(a.clock())
	switch m := ctx.Message().(type) {
	case *messages.OffloadRequest:
		a.t.Offload(m, ctx.Sender())
	case *messages.OffloadDone:
		a.t.OffloadDone(m)
	case *messages.FetchRequest:
		a.t.Fetch(m, ctx.Sender())
	case *messages.FetchRelease:
		a.t.Release(m.Slots)
	case *messages.LowerWriteDone:
		a.t.LowerWritten(m)
	case *messages.LowerReadDone:
		a.t.LowerRead(m)
	case *messages.BelowGone:
		a.t.BelowGone(m.Hashes)
	case *messages.Residency, *messages.EventsSync:
		// The GPU's changes (and a sync behind them), on their way to the
		// event publisher: relayed in order with this tier's own index
		// updates.
		ctx.Send(a.cfg.Index, m)
	case *messages.PinnedQuery:
		a.t.Query(m)
	case *messages.Flush:
		a.t.Flush(m.Reply)
	case *messages.StatsRequest:
		m.Reply <- a.t.Stats()
	case *actor.Started:
		watch(ctx, a.cfg.Disk)
	case *actor.Terminated:
		if a.cfg.Disk != nil && m.Who.Equal(a.cfg.Disk) {
			a.cfg.Log.Error("pinned actor: the tier below stopped for good; it is out of service", zap.Stringer("tiers", a.cfg.LowerTiers))
			a.t.LowerGone()
			ctx.Send(a.cfg.Index, &messages.TiersDown{Tiers: a.cfg.LowerTiers})
		}
	case *actor.DeadLetterResponse:
		// A request that reached the tier below after it stopped: its
		// Terminated answers what waited on it.
	case *actor.Stopping:
		unwatch(ctx, a.cfg.Disk)
	case *actor.Restarting:
		a.cfg.Log.Error("pinned actor: restarting after a failure; the pinned tier stops serving")
		a.t.Stop()
		// Every tier below is reached through this one: the index stops
		// sending lookups to any of them.
		ctx.Send(a.cfg.Index, &messages.TiersDown{Tiers: messages.Pinned | messages.Disk | messages.Remote})
	case *actor.Stopped:
		a.t.Stop()
	default:
		a.cfg.Log.Warn("pinned actor: unexpected message", zap.String("type", typeName(m)))
	}
	a.execute(ctx)
	if invariantsEnabled {
		mustHold(a.t.CheckInvariants())
	}
}

// execute does what the Tier's Ready says.
func (a *PinnedActor) execute(ctx actor.Context) {
	r := a.t.Ready()
	for _, m := range r.ToIndex {
		ctx.Send(a.cfg.Index, m)
	}
	for _, m := range r.ToLower {
		ctx.Request(a.cfg.Disk, m) // the answer comes back to this actor
	}
	for _, s := range r.Sends {
		if pid, ok := s.To.(*actor.PID); ok && pid != nil {
			ctx.Send(pid, s.Msg)
		} else {
			a.cfg.Log.Error("pinned actor: a reply with no sender to go to", zap.String("type", typeName(s.Msg)))
		}
	}
	for _, f := range r.Replies {
		f()
	}
}
