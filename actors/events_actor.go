package actors

import (
	"context"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"go.uber.org/zap"

	"github.com/kvtier/kvtier/events"
	"github.com/kvtier/kvtier/messages"
)

// EventSender takes frames for the sockets without blocking; false drops
// one (events.Server does this).
type EventSender interface {
	Publish(events.Frame) bool
}

// EventsConfig configures the KV-event publisher's actor.
type EventsConfig struct {
	Publisher *events.Publisher // owned by the actor from now on
	// Server sends the frames; nil publishes to the replay buffer only.
	Server EventSender
	Clock  func() time.Time // the batches' timestamps (default time.Now)
	Log    *zap.Logger
}

// EventsActor is the thin actor over events.Publisher: the tiers' residency
// changes come in as messages.Residency (from the index, which relays the
// GPU's through the pinned actor and adds the pinned and disk tiers'; from
// the GPU directly when there is no tier below; from the remote actor),
// each becomes one
// numbered batch, handed to the Server's queue without waiting; a full
// queue drops the batch (counted, and a gap subscribers see) but the
// replay buffer keeps it.
type EventsActor struct {
	cfg   EventsConfig
	p     *events.Publisher
	run   *eventsRun // shared by every incarnation, as p is
	clock func() time.Time
}

// eventsRun is what the incarnations of one events actor share besides
// the Publisher: whether the run has started, and the counts its stats
// report. Only the actor (one incarnation at a time) touches it.
type eventsRun struct {
	started   bool
	published uint64
	dropped   uint64
}

type eventsReplay struct {
	from  uint64
	reply chan<- []events.Frame
}

type eventsSnapshot struct{ reply chan<- events.Frame }

// NewEventsActor returns the actor's producer. Every actor it makes (the
// first and any the supervisor restarts) owns the same Publisher, so the
// run starts (AllBlocksCleared) once: a restarted actor goes on with the
// Publisher's numbering and residency, which its subscribers still hold.
func NewEventsActor(cfg EventsConfig) actor.Producer {
	run := &eventsRun{}
	return func() actor.Actor {
		clock := cfg.Clock
		if clock == nil {
			clock = time.Now
		}
		return &EventsActor{cfg: cfg, p: cfg.Publisher, run: run, clock: clock}
	}
}

// Receive implements actor.Actor.
func (a *EventsActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		// A restart publishes nothing: AllBlocksCleared would make the
		// subscribers forget blocks the Publisher counts as announced.
		if !a.run.started {
			a.run.started = true
			a.send(a.p.Start(a.clock()))
		}
	case *messages.Residency:
		if f, ok := a.p.Apply(m, a.clock()); ok {
			a.send(f)
		}
	case *messages.EventsSync:
		seq, ok := a.p.LastSeq()
		m.Reply <- messages.EventsSeq{Seq: seq, OK: ok}
	case *eventsReplay:
		m.reply <- a.p.Replay(m.from)
	case *eventsSnapshot:
		m.reply <- a.p.Snapshot(a.clock())
	case *messages.EventsStatsRequest:
		s := messages.EventStats{Published: a.run.published, Dropped: a.run.dropped, Resident: map[string]int{}}
		if d, ok := a.cfg.Server.(interface{ SubscriberDrops() uint64 }); ok {
			s.SubscriberDrops = d.SubscriberDrops()
		}
		s.LastSeq, s.HasSeq = a.p.LastSeq()
		for _, md := range events.Mediums {
			s.Resident[string(md)] = a.p.Count(md)
		}
		m.Reply <- s
	case *actor.Stopping:
		// The node's tiers are going away: consumers drop what they knew
		// of it (what its disk keeps is announced again when it reopens).
		a.send(a.p.Start(a.clock()))
	case *actor.Stopped, *actor.Restarting:
	default:
		a.cfg.Log.Warn("events actor: unexpected message", zap.String("type", typeName(m)))
	}
}

func (a *EventsActor) send(f events.Frame) {
	a.run.published++
	if a.cfg.Server != nil && !a.cfg.Server.Publish(f) {
		a.run.dropped++
	}
}

// EventsSource answers the replay socket by asking the actor. The socket
// is bound before the actor is spawned (the actor sends on it from its
// start), so requests wait for Bind.
type EventsSource struct {
	system *actor.ActorSystem
	pid    *actor.PID
	ready  chan struct{}
}

// NewEventsSource returns a source for an actor of sys not spawned yet.
func NewEventsSource(sys *actor.ActorSystem) *EventsSource {
	return &EventsSource{system: sys, ready: make(chan struct{})}
}

// Bind names the actor; call it once.
func (s *EventsSource) Bind(pid *actor.PID) {
	s.pid = pid
	close(s.ready)
}

func (s *EventsSource) send(ctx context.Context, msg any) error {
	select {
	case <-s.ready:
		s.system.Root.Send(s.pid, msg)
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Replay implements events.Source.
func (s *EventsSource) Replay(ctx context.Context, from uint64) ([]events.Frame, error) {
	reply := make(chan []events.Frame, 1)
	if err := s.send(ctx, &eventsReplay{from: from, reply: reply}); err != nil {
		return nil, err
	}
	select {
	case fs := <-reply:
		return fs, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Snapshot implements events.Source.
func (s *EventsSource) Snapshot(ctx context.Context) (events.Frame, error) {
	reply := make(chan events.Frame, 1)
	if err := s.send(ctx, &eventsSnapshot{reply: reply}); err != nil {
		return events.Frame{}, err
	}
	select {
	case f := <-reply:
		return f, nil
	case <-ctx.Done():
		return events.Frame{}, ctx.Err()
	}
}
