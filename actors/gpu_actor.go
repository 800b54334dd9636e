package actors

import (
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"go.uber.org/zap"

	"github.com/kvtier/kvtier/blockpool"
	"github.com/kvtier/kvtier/gpu"
	"github.com/kvtier/kvtier/gpu/tier"
	"github.com/kvtier/kvtier/messages"
)

// Ingestion says when blocks are written down a tier (AIBrix's L2 ingestion
// policies); see tier.Ingestion.
type Ingestion = tier.Ingestion

// Ingestion policies.
const (
	IngestEvict = tier.IngestEvict
	IngestAll   = tier.IngestAll
	IngestHot   = tier.IngestHot
)

// Errors of the GPU tier, re-exported for the Manager.
var (
	ErrTooLong  = tier.ErrTooLong
	ErrStopped  = tier.ErrStopped
	ErrNotReady = tier.ErrNotReady
)

// GPUConfig configures the GPU pool actor. The actor owns Pool, Arena and Stream.
type GPUConfig struct {
	Pool   *blockpool.Pool
	Arena  gpu.Arena
	Stream gpu.Stream
	// Pinned and Index are nil for a GPU-only manager.
	Pinned, Index *actor.PID
	// Events, when set, is the KV-event publisher: it hears what became
	// findable on the GPU or stopped being (the pool needs Journal on), by
	// way of the pinned actor and the index when there is a pinned tier
	// (around either once it stopped for good: see eventsWay).
	Events *actor.PID

	Ingestion        Ingestion
	HotHits          int
	OffloadThreshold float64 // fraction of blocks holding data above which free cached blocks are offloaded ahead of need
	OffloadAhead     int     // window of free blocks, from the next to be evicted, written down ahead of need
	SerialOffloads   bool    // one offload in flight at a time (tier.Config.SerialOffloads)

	// Double get: ask the lower tiers only when they hold at least
	// DoubleGetMinBlocks blocks of the chain and that is at least
	// DoubleGetMinRatio of the prompt's blocks.
	DoubleGetMinBlocks int
	DoubleGetMinRatio  float64
	// ReportDemand: the index passes the misses of requests, once computed
	// or served by the shared tier, on to a disk that learns from them
	// (tier.Config.ReportDemand).
	ReportDemand bool

	// A load from a lower tier must finish within ReadBase + tokens*ReadPerToken;
	// a late load becomes a miss. Zero ReadPerToken and ReadBase: no deadline.
	ReadBase, ReadPerToken time.Duration

	// Observe, when set, hears of every finished copy (gpu_to_host,
	// host_to_gpu), from the goroutine that waited for it.
	Observe messages.LinkObserver
	// Namespaces are the tenant salts counted apart in TierStats.Tokens.
	Namespaces []string
	// Clock is the tier's clock (default time.Now); deadlines are computed
	// on it.
	Clock func() time.Time

	Log *zap.Logger

	// OnFailure, when set, is called once if the actor fails (panics). Its
	// tier is then stopped, whatever waited on it answered (messages.ErrFailed),
	// and every later message dropped: the state of an event cut short
	// half-way cannot be trusted, so the owner must fail its callers and
	// be closed.
	OnFailure func()
}

// GPUActor is the thin actor over the GPU tier's state machine (gpu/tier):
// it decodes each message into one event, then carries out the Ready the
// event produced — enqueueing copies on the stream, sending to the pinned
// and index actors, arming timers, answering callers — and turns copy
// completions and timer firings back into messages to itself.
type GPUActor struct {
	cfg    GPUConfig
	t      *tier.Tier
	failed *bool // shared by the incarnations: set once one failed
	clock  func() time.Time
	events map[tier.CopyID]*gpu.Event // copies on the stream
	timers map[uint64]*time.Timer     // load deadlines armed
	// pinnedGone and indexGone: that actor stopped for good, and the
	// GPU's changes for the event publisher no longer go through it.
	pinnedGone, indexGone bool
}

// NewGPUActor returns the actor's producer.
func NewGPUActor(cfg GPUConfig) actor.Producer {
	clock := cfg.Clock
	if clock == nil {
		clock = time.Now
	}
	if cfg.Log == nil {
		cfg.Log = zap.NewNop()
	}
	// One tier for every incarnation, as it owns the one pool: an
	// incarnation made after a failure finds it stopped and drops its
	// messages (see OnFailure), instead of a fresh tier whose books know
	// nothing of the blocks and waiters of the one before.
	t := tier.New(tier.Config{
		Pool: cfg.Pool, BlockBytes: cfg.Arena.BlockBytes(), Lower: cfg.Pinned != nil,
		Ingestion: cfg.Ingestion, HotHits: cfg.HotHits,
		OffloadThreshold: cfg.OffloadThreshold, OffloadAhead: cfg.OffloadAhead, SerialOffloads: cfg.SerialOffloads,
		DoubleGetMinBlocks: cfg.DoubleGetMinBlocks, DoubleGetMinRatio: cfg.DoubleGetMinRatio, ReportDemand: cfg.ReportDemand,
		ReadBase: cfg.ReadBase, ReadPerToken: cfg.ReadPerToken, Log: cfg.Log,
		Namespaces: cfg.Namespaces,
	})
	failed := new(bool)
	return func() actor.Actor {
		return &GPUActor{
			cfg: cfg, clock: clock, t: t, failed: failed,
			events: map[tier.CopyID]*gpu.Event{},
			timers: map[uint64]*time.Timer{},
		}
	}
}

// copyDone reports a finished copy batch to the actor.
type copyDone struct {
	id  tier.CopyID
	err error
}

type fetchTimeout struct{ id uint64 }

// Receive implements actor.Actor.
func (a *GPUActor) Receive(ctx actor.Context) {
	if *a.failed {
		return // the tier is stopped and its callers failed (OnFailure)
	}
	if _, ok := ctx.Message().(*actor.Restarting); ok {
		a.fail(ctx) // before anything that can panic again, the clock included
		return
	}
	a.t.SetNow(a.clock())
	switch m := ctx.Message().(type) {
	case *messages.AllocateBatch:
		if m.Take() { // false: the caller gave up before it took effect
			a.t.SetCall(&m.Call) // what parks can be withdrawn
			send := func(r *messages.AllocateBatchResult) { m.Reply <- r }
			if m.InOrder {
				a.t.AllocateInOrder(m.Reqs, m.Keys, send)
			} else {
				a.t.AllocateBatch(m.Reqs, m.Keys, send)
			}
			a.t.SetCall(nil)
		}
	case *messages.StepBatch:
		if m.Take() {
			a.t.SetCall(&m.Call)
			a.t.Step(m)
			a.t.SetCall(nil)
		}
	case *messages.CommitBatch:
		if m.Take() {
			a.t.CommitBatch(m.Items, func(r *messages.CommitBatchResult) { m.Reply <- r })
		}
	case *messages.AppendBatch:
		if m.Take() {
			a.t.SetCall(&m.Call)
			a.t.AppendBatch(m.Items, func(r *messages.AppendBatchResult) { m.Reply <- r })
			a.t.SetCall(nil)
		}
	case *messages.Withdraw:
		a.t.Withdraw()
	case *messages.FreeBatch:
		if m.Take() {
			a.t.FreeBatch(m.Seqs, m.Swap, func(r *messages.FreeBatchResult) { m.Reply <- r })
		}
	case *messages.Query:
		if m.Take() {
			a.t.Query(m)
		}
	case *messages.LookupResult:
		a.t.LookupDone(m)
	case *messages.FetchGrant:
		a.t.FetchGranted(m)
	case *messages.OffloadGrant:
		a.t.OffloadGranted(m)
	case *messages.BelowGone:
		a.t.BelowGone(m.Hashes)
	case *copyDone:
		delete(a.events, m.id)
		a.t.CopyDone(m.id, m.err)
	case *fetchTimeout:
		delete(a.timers, m.id)
		a.t.Deadline(m.id)
	case *messages.Flush:
		a.t.Flush(m.Reply)
	case *messages.StatsRequest:
		m.Reply <- a.t.Stats()
	case *messages.ResidencyQuery:
		m.Reply <- map[messages.Tier][]uint64{messages.GPU: a.t.CachedHashes()}
	case *messages.EventsSync:
		// The way the GPU's changes go, behind every one made before. Not
		// the way around a stopped actor (eventsWay): the Manager's
		// EventsSeq says ErrTierDown once one on the way stopped, and a
		// sync sent before the GPU heard of it is lost there.
		switch {
		case a.cfg.Events == nil:
			m.Reply <- messages.EventsSeq{}
		case a.cfg.Pinned != nil:
			ctx.Send(a.cfg.Pinned, m)
		default:
			ctx.Send(a.cfg.Events, m)
		}
	case *actor.Started:
		// Should the pinned or index actor stop for good, nothing sent
		// to them is answered: the tier stops using every tier below.
		watch(ctx, a.cfg.Pinned, a.cfg.Index)
	case *actor.Terminated:
		if m.Who.Equal(a.cfg.Pinned) || m.Who.Equal(a.cfg.Index) {
			a.cfg.Log.Error("gpu actor: a tier below stopped for good; the GPU serves its own blocks alone", zap.String("actor", m.Who.Id))
			a.t.LowerGone()
			a.eventsWayLost(ctx, m.Who)
		}
	case *actor.DeadLetterResponse:
		// A request that reached a stopped actor: its Terminated answers.
	case *actor.Stopping:
		unwatch(ctx, a.cfg.Pinned, a.cfg.Index)
	case *actor.Stopped:
		a.t.Stop()
	default:
		a.cfg.Log.Warn("gpu actor: unexpected message", zap.String("type", typeName(m)))
	}
	a.execute(ctx)
	if invariantsEnabled {
		mustHold(a.t.CheckInvariants())
	}
}

// fail stops the tier after the actor panicked. The flag is set and the
// owner told first, whatever happens next: a second panic here must not
// leave callers waiting (the next incarnation drops every message). The
// half-finished event's staged output is dropped by Tier.Fail; what the
// stop answers goes out.
func (a *GPUActor) fail(ctx actor.Context) {
	*a.failed = true
	if a.cfg.OnFailure != nil {
		defer a.cfg.OnFailure()
	}
	a.cfg.Log.Error("gpu actor: failed; its tier stops and the Manager serves nothing more")
	a.t.Fail(messages.ErrFailed)
	a.execute(ctx) // answers what waited on the tier
}

// execute carries out the tier's Ready, in its documented order.
func (a *GPUActor) execute(ctx actor.Context) {
	if !a.t.HasReady() {
		return
	}
	r := a.t.Ready()
	self, sys := ctx.Self(), ctx.ActorSystem()
	for _, c := range r.Copies {
		start, observe := time.Now(), a.cfg.Observe
		done := func(ok bool) { // the batch's link observation
			if observe == nil {
				return
			}
			link := messages.LinkHostToGPU
			if c.Dir == gpu.D2H {
				link = messages.LinkGPUToHost
			}
			blocks, n := 0, int64(0)
			if ok { // a batch that failed moved nothing the tiers use
				blocks = len(c.Ops)
				for _, op := range c.Ops {
					n += int64(len(op.Host))
				}
			}
			observe(link, blocks, n, time.Since(start), ok)
		}
		ev, err := a.enqueue(c)
		if err != nil {
			done(false) // refused at enqueue: a failed transfer too
			sys.Root.Send(self, &copyDone{id: c.CopyID, err: err})
			continue
		}
		a.events[c.CopyID] = ev
		go func() {
			<-ev.Done()
			done(ev.Err() == nil)
			sys.Root.Send(self, &copyDone{id: c.CopyID, err: ev.Err()})
		}()
	}
	for _, msg := range r.ToPinned {
		ctx.Request(a.cfg.Pinned, msg)
	}
	for _, msg := range r.ToIndex {
		ctx.Request(a.cfg.Index, msg)
	}
	// After ToPinned: a block the event evicted right after its write down
	// ended (the OffloadDone above) is stored below before it leaves the
	// GPU. A block's store here comes before any OffloadDone of it, which
	// only a later event can send.
	a.residency(ctx, r.Residency)
	a.residency(ctx, r.ResidencyAfter)
	for _, id := range r.CancelTimers {
		if tm, ok := a.timers[id]; ok {
			tm.Stop()
			delete(a.timers, id)
		}
	}
	for _, tm := range r.Timers {
		id := tm.ID
		d := tm.At.Sub(a.clock())
		if tm.Again {
			d = max(d, tier.MinRearm)
		}
		a.timers[id] = time.AfterFunc(d, func() { sys.Root.Send(self, &fetchTimeout{id: id}) })
	}
	for _, reply := range r.Replies {
		reply.Reply()
	}
	// After Stop: callers whose blocks copies still touch are answered once
	// those copies have left the stream, off the actor.
	for _, s := range r.Stopped {
		var evs []*gpu.Event
		for _, id := range s.Copies {
			if ev := a.events[id]; ev != nil {
				evs = append(evs, ev)
			}
		}
		go func() {
			for _, ev := range evs {
				<-ev.Done()
			}
			s.Complete()
		}()
	}
}

// residency sends the GPU's changes to the event publisher: through the
// pinned actor and the index when they exist, behind the OffloadDones sent
// before, so a block written down is stored in pinned memory before the
// GPU's removal of it reaches the publisher.
func (a *GPUActor) residency(ctx actor.Context, r *messages.Residency) {
	if r != nil && a.cfg.Events != nil {
		ctx.Send(a.eventsWay(), r)
	}
}

// eventsWay is the actor the GPU's changes for the event publisher go to:
// the pinned actor, which relays them to the index behind its own index
// updates; the index, once the pinned actor stopped for good; the
// publisher, once the index did or with no tier below.
func (a *GPUActor) eventsWay() *actor.PID {
	switch {
	case a.cfg.Pinned == nil || a.indexGone:
		return a.cfg.Events
	case a.pinnedGone:
		return a.cfg.Index
	default:
		return a.cfg.Pinned
	}
}

// eventsWayLost takes gone (the pinned actor or the index, stopped for
// good) off the events' way and carries out what LowerGone readied. What
// gone held on its way to the publisher is lost, and the tiers below no
// longer serve (LowerGone), so the publisher then hears by the new way
// that they hold nothing — from the index, which drops their entries and
// ignores their later additions (messages.TiersDown), or straight when
// the index is gone — and the GPU's whole residency.
func (a *GPUActor) eventsWayLost(ctx actor.Context, gone *actor.PID) {
	if gone.Equal(a.cfg.Pinned) {
		a.pinnedGone = true
	} else {
		a.indexGone = true
	}
	a.execute(ctx)
	if a.cfg.Events == nil {
		return
	}
	way := a.eventsWay()
	if way.Equal(a.cfg.Index) {
		ctx.Send(way, &messages.TiersDown{Tiers: messages.Pinned | messages.Disk | messages.Remote})
	} else {
		for _, t := range []messages.Tier{messages.Pinned, messages.Disk} {
			ctx.Send(way, &messages.Residency{Tier: t, Full: true})
		}
	}
	if r := a.t.FullResidency(); r != nil {
		ctx.Send(way, r)
	}
}

// enqueue puts one batch on the stream behind its fences.
func (a *GPUActor) enqueue(c tier.Copy) (*gpu.Event, error) {
	for _, f := range c.Fences {
		if err := a.cfg.Stream.WaitFence(f); err != nil {
			return nil, fmt.Errorf("kvtier: copy waiting on a commit's fence: %w", err)
		}
	}
	if c.Dir == gpu.D2H {
		return a.cfg.Stream.CopyD2H(c.Ops)
	}
	return a.cfg.Stream.CopyH2D(c.Ops)
}

// CheckPool runs the owned pool's invariant walk; for the invariants build and tests.
func (a *GPUActor) CheckPool() error { return a.t.CheckPool() }
