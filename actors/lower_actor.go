package actors

import (
	"maps"
	"slices"

	"github.com/asynkron/protoactor-go/actor"
	"go.uber.org/zap"

	"github.com/kvtier/kvtier/messages"
)

// LowerActor stands below the pinned actor when a node has both a disk
// tier and the shared remote tier, speaking to the pinned actor the same
// protocol either speaks alone. A LowerWrite goes to both, and its slots go
// back once both are done with them; a LowerRead goes to the disk first and
// what the disk missed to the remote tier, under the same deadline. A disk
// that cut the read at the deadline (MissLate) shows that no time is left:
// its misses are then answered late, and the remote tier is not asked.
//
// It watches both tiers' actors. One that stopped for good (protoactor
// stops an actor that keeps failing) is out of service from then on: what
// waited on it is answered as not written / not read, later requests skip
// it, and the index is told (messages.TiersDown) so that lookups no longer
// name it. Answers it sent before it stopped may arrive after that; they are
// recognised by their From and ignored.
type LowerActor struct {
	disk, remote, index *actor.PID
	log                 *zap.Logger
	*lowerBooks
}

// lowerBooks are the requests in flight and the tiers found stopped. They
// outlive a restart (the producer makes them once), so the tiers' answers to
// requests made before it still reach the pinned actor, whose slots would
// otherwise never return.
type lowerBooks struct {
	writes map[int]*lowerWrite // by the request's first slot
	reads  map[uint64]*lowerRead
	nextID uint64
	gone   messages.Tier // tiers whose actor stopped for good
}

type lowerWrite struct {
	to    *actor.PID
	slots []int
	// disk and remote are what each tier wrote (LowerWriteDone.Written).
	disk, remote []uint64
	waiting      messages.Tier // the tiers yet to answer
}

type lowerRead struct {
	to   *actor.PID
	req  *messages.LowerRead
	ok   []bool
	why  []messages.MissReason // per item not ok: why the last tier asked missed it (MissLate: the disk cut the read at its deadline)
	kept []bool                // read from a tier that keeps it on this node (the disk in service)
	miss []int                 // indexes of req.Items sent to the remote tier
	at   messages.Tier         // the tier asked now: Disk, then Remote
}

// NewLowerActor returns the actor's producer. index, when set, hears of a
// tier that stopped for good.
func NewLowerActor(disk, remote, index *actor.PID, log *zap.Logger) actor.Producer {
	books := &lowerBooks{writes: map[int]*lowerWrite{}, reads: map[uint64]*lowerRead{}}
	return func() actor.Actor {
		return &LowerActor{disk: disk, remote: remote, index: index, log: log, lowerBooks: books}
	}
}

// both is the tiers the fan-out speaks for.
const both = messages.Disk | messages.Remote

// Receive implements actor.Actor.
func (a *LowerActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *messages.LowerWrite:
		a.write(ctx, m)
	case *messages.LowerWriteDone:
		a.writeDone(ctx, m)
	case *messages.LowerRead:
		a.nextID++
		n := len(m.Items)
		r := &lowerRead{to: ctx.Sender(), req: m, ok: make([]bool, n), kept: make([]bool, n), why: make([]messages.MissReason, n)}
		for i := range m.Items {
			r.miss = append(r.miss, i)
			r.why[i] = messages.MissEvicted // until a tier says otherwise: none in service holds it
		}
		a.reads[a.nextID] = r
		a.ask(ctx, a.nextID, r, messages.Disk)
	case *messages.LowerReadDone:
		r, ok := a.reads[m.ID]
		if !ok || m.From != r.at {
			a.stray(m.From, "read", zap.Uint64("id", m.ID))
			return
		}
		a.readAnswered(ctx, m.ID, r, m.OK, m.Why)
	case *messages.Flush:
		// Flushes go to the disk and remote actors themselves.
		m.Reply <- nil
	case *actor.Started:
		watch(ctx, a.disk, a.remote)
	case *actor.Terminated:
		switch {
		case m.Who.Equal(a.disk):
			a.tierGone(ctx, messages.Disk)
		case m.Who.Equal(a.remote):
			a.tierGone(ctx, messages.Remote)
		}
	case *actor.DeadLetterResponse:
		// A request that reached a tier after it stopped: its Terminated
		// answers everything that waited on it.
	case *actor.Stopping:
		unwatch(ctx, a.disk, a.remote)
	case *actor.Stopped, *actor.Restarting:
	default:
		a.log.Warn("lower actor: unexpected message", zap.String("type", typeName(m)))
	}
}

func (a *LowerActor) write(ctx actor.Context, m *messages.LowerWrite) {
	w := &lowerWrite{to: ctx.Sender(), waiting: both &^ a.gone}
	for _, it := range m.Items {
		w.slots = append(w.slots, it.Slot)
	}
	if len(w.slots) == 0 || w.waiting == 0 {
		ctx.Send(w.to, &messages.LowerWriteDone{Slots: w.slots, From: both})
		return
	}
	a.writes[w.slots[0]] = w
	if w.waiting&messages.Disk != 0 {
		ctx.Request(a.disk, m)
	}
	if w.waiting&messages.Remote != 0 {
		ctx.Request(a.remote, m)
	}
}

func (a *LowerActor) writeDone(ctx actor.Context, m *messages.LowerWriteDone) {
	if len(m.Slots) == 0 {
		return
	}
	w, ok := a.writes[m.Slots[0]]
	if !ok || (m.From != messages.Disk && m.From != messages.Remote) || w.waiting&m.From == 0 {
		a.stray(m.From, "write", zap.Int("slot", m.Slots[0]))
		return
	}
	if m.From == messages.Disk {
		w.disk = m.Written
	} else {
		w.remote = m.Written
	}
	a.answered(ctx, w, m.From)
}

// answered records that tier is done with w, and answers the pinned actor
// once both are. Written is the disk's alone while the disk is in service:
// a block only the remote tier took is still drained to the disk when it
// leaves pinned memory, rather than kept nowhere on this node.
func (a *LowerActor) answered(ctx actor.Context, w *lowerWrite, tier messages.Tier) {
	if w.waiting &^= tier; w.waiting != 0 {
		return
	}
	delete(a.writes, w.slots[0])
	written := w.disk
	if a.gone&messages.Disk != 0 {
		written = w.remote
	}
	ctx.Send(w.to, &messages.LowerWriteDone{Slots: w.slots, Written: written, From: both})
}

// ask sends r's misses to the first tier in service from tier on, or
// answers r when none is left.
func (a *LowerActor) ask(ctx actor.Context, id uint64, r *lowerRead, tier messages.Tier) {
	if tier == messages.Disk && a.gone&messages.Disk == 0 {
		r.at = messages.Disk
		ctx.Request(a.disk, &messages.LowerRead{ID: id, Items: r.req.Items, Deadline: r.req.Deadline})
		return
	}
	if a.gone&messages.Remote == 0 && len(r.miss) > 0 {
		items := make([]messages.LowerReadItem, len(r.miss))
		for j, i := range r.miss {
			items[j] = r.req.Items[i]
		}
		r.at = messages.Remote
		ctx.Request(a.remote, &messages.LowerRead{ID: id, Items: items, Deadline: r.req.Deadline})
		return
	}
	delete(a.reads, id)
	ctx.Send(r.to, &messages.LowerReadDone{ID: r.req.ID, OK: r.ok, From: both, Kept: r.kept, Why: r.why})
}

// readAnswered takes the answer of the tier r is at: OK and Why as in
// LowerReadDone (nil: the tier stopped for good, every item failed).
func (a *LowerActor) readAnswered(ctx actor.Context, id uint64, r *lowerRead, ok []bool, why []messages.MissReason) {
	var miss []int
	late := false // the tier cut the read at its deadline
	// A block read from the disk stays there; one from the remote tier is
	// kept on this node only when there is no disk to drain it to.
	kept := r.at == messages.Disk || a.gone&messages.Disk != 0
	for j, i := range r.miss {
		if j < len(ok) && ok[j] {
			r.ok[i] = true
			r.kept[i] = kept
			r.why[i] = messages.MissNone
		} else {
			miss = append(miss, i)
			r.why[i] = messages.MissFailed
			if j < len(why) {
				r.why[i] = why[j]
			}
			late = late || r.why[i] == messages.MissLate
		}
	}
	r.miss = miss
	if r.at == messages.Disk {
		if !late {
			a.ask(ctx, id, r, messages.Remote)
			return
		}
		// The deadline has passed: the remote tier would answer every
		// miss late, after a round trip for nothing.
		for _, i := range miss {
			r.why[i] = messages.MissLate
		}
	}
	r.miss = nil
	a.ask(ctx, id, r, 0)
}

// tierGone takes a tier whose actor stopped for good out of service.
func (a *LowerActor) tierGone(ctx actor.Context, tier messages.Tier) {
	if a.gone&tier != 0 {
		return
	}
	a.gone |= tier
	a.log.Error("lower actor: a tier's actor stopped for good; it is out of service", zap.Stringer("tier", tier))
	if a.index != nil {
		ctx.Send(a.index, &messages.TiersDown{Tiers: tier})
	}
	for _, s := range slices.Sorted(maps.Keys(a.writes)) { // in one order on every run
		if w := a.writes[s]; w.waiting&tier != 0 {
			a.answered(ctx, w, tier)
		}
	}
	for _, id := range slices.Sorted(maps.Keys(a.reads)) {
		if r := a.reads[id]; r.at == tier {
			a.readAnswered(ctx, id, r, nil, nil)
		}
	}
}

// stray logs an answer that matches no request: an error, unless it comes
// from a tier found stopped, whose requests were answered for it.
func (a *LowerActor) stray(from messages.Tier, kind string, f zap.Field) {
	if from != 0 && a.gone&from == from {
		a.log.Debug("lower actor: late answer from a tier out of service", zap.String("kind", kind), zap.Stringer("tier", from), f)
		return
	}
	a.log.Error("lower actor: answer for an unknown request", zap.String("kind", kind), zap.Stringer("tier", from), f)
}
