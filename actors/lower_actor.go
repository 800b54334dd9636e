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
	// fault, in tests, is called at named points of the handlers and may
	// panic there, as a defect would.
	fault func(point string)
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
	return newLowerActor(disk, remote, index, log, nil)
}

func newLowerActor(disk, remote, index *actor.PID, log *zap.Logger, fault func(string)) actor.Producer {
	books := &lowerBooks{writes: map[int]*lowerWrite{}, reads: map[uint64]*lowerRead{}, fault: fault}
	return func() actor.Actor {
		return &LowerActor{disk: disk, remote: remote, index: index, log: log, lowerBooks: books}
	}
}

// both is the tiers the fan-out speaks for.
const both = messages.Disk | messages.Remote

// Receive implements actor.Actor.
//
// A handler that panics (a defect) would drop its message, and with it
// the pinned slots that message was to give back: salvage first answers
// what the message leaves that no tier will answer, then the panic goes on
// to protoactor, which restarts the actor over the same books.
func (a *LowerActor) Receive(ctx actor.Context) {
	defer func() {
		if p := recover(); p != nil {
			a.salvage(ctx, ctx.Message(), p)
			panic(p)
		}
	}()
	switch m := ctx.Message().(type) {
	case *messages.LowerWrite:
		a.write(ctx, m)
	case *messages.LowerWriteDone:
		a.writeDone(ctx, m)
	case *messages.LowerRead:
		a.read(ctx, m)
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
	w := &lowerWrite{to: ctx.Sender(), slots: writeSlots(m)}
	to := both &^ a.gone
	if len(w.slots) == 0 || to == 0 {
		a.reply(ctx, w.to, &messages.LowerWriteDone{Slots: w.slots, From: both})
		return
	}
	a.writes[w.slots[0]] = w
	a.at("write")
	// A tier is waited for once it has the request: a panic between
	// the two leaves salvage only the tiers that will answer.
	if to&messages.Disk != 0 {
		ctx.Request(a.disk, m)
		w.waiting |= messages.Disk
	}
	a.at("write:disk")
	if to&messages.Remote != 0 {
		ctx.Request(a.remote, m)
		w.waiting |= messages.Remote
	}
}

func writeSlots(m *messages.LowerWrite) []int {
	slots := make([]int, 0, len(m.Items))
	for _, it := range m.Items {
		slots = append(slots, it.Slot)
	}
	return slots
}

// read starts a LowerRead at the disk.
func (a *LowerActor) read(ctx actor.Context, m *messages.LowerRead) {
	a.nextID++
	n := len(m.Items)
	r := &lowerRead{to: ctx.Sender(), req: m, ok: make([]bool, n), kept: make([]bool, n), why: make([]messages.MissReason, n)}
	for i := range m.Items {
		r.miss = append(r.miss, i)
		r.why[i] = messages.MissEvicted // until a tier says otherwise: none in service holds it
	}
	a.reads[a.nextID] = r
	a.at("read")
	a.ask(ctx, a.nextID, r, messages.Disk)
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
	a.at("writeDone")
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
	a.reply(ctx, w.to, &messages.LowerWriteDone{Slots: w.slots, Written: written, From: both})
}

// ask sends r's misses to the first tier in service from tier on, or
// answers r when none is left.
func (a *LowerActor) ask(ctx actor.Context, id uint64, r *lowerRead, tier messages.Tier) {
	// r.at changes once the tier has the request: a panic between the two
	// leaves r with the tier that answered last, for salvage.
	if tier == messages.Disk && a.gone&messages.Disk == 0 {
		ctx.Request(a.disk, &messages.LowerRead{ID: id, Items: r.req.Items, Deadline: r.req.Deadline})
		r.at = messages.Disk
		return
	}
	if a.gone&messages.Remote == 0 && len(r.miss) > 0 {
		items := make([]messages.LowerReadItem, len(r.miss))
		for j, i := range r.miss {
			items[j] = r.req.Items[i]
		}
		ctx.Request(a.remote, &messages.LowerRead{ID: id, Items: items, Deadline: r.req.Deadline})
		r.at = messages.Remote
		return
	}
	delete(a.reads, id)
	a.reply(ctx, r.to, &messages.LowerReadDone{ID: r.req.ID, OK: r.ok, From: both, Kept: r.kept, Why: r.why})
}

// readAnswered takes the answer of the tier r is at: OK and Why as in
// LowerReadDone (nil: the tier stopped for good, every item failed).
func (a *LowerActor) readAnswered(ctx actor.Context, id uint64, r *lowerRead, ok []bool, why []messages.MissReason) {
	a.at("readDone")
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
	a.answerGone(ctx, tier)
}

// answerGone answers, for a tier out of service, what waited on it.
func (a *LowerActor) answerGone(ctx actor.Context, tier messages.Tier) {
	a.at("gone")
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

// at is a point a test may make panic (lowerBooks.fault).
func (a *LowerActor) at(point string) {
	if a.fault != nil {
		a.fault(point)
	}
}

// reply sends an answer to the actor that asked; a request sent with no
// sender (a defect of the caller) has nobody to answer.
func (a *LowerActor) reply(ctx actor.Context, to *actor.PID, m any) {
	if to == nil {
		a.log.Error("lower actor: a request with no sender cannot be answered", zap.String("type", typeName(m)))
		return
	}
	ctx.Send(to, m)
}

// salvage runs when the handler of m panicked with p. It answers what m
// leaves that no tier will answer, so the pinned actor gets its slots back:
// a write or read no tier has yet, a write whose last tier's answer was m.
// Slots a tier may still use stay with that tier until its answer; what
// the handler wrote is not trusted (a write is answered as not written
// below, a read as missed, so nothing half-recorded is served). A second
// panic here is logged and dropped: the first goes on either way.
func (a *LowerActor) salvage(ctx actor.Context, m any, p any) {
	a.log.Error("lower actor: a handler panicked; answering what its message left waiting",
		zap.String("type", typeName(m)), zap.Any("panic", p), zap.Stack("stack"))
	defer func() {
		if q := recover(); q != nil {
			a.log.Error("lower actor: salvage panicked too", zap.Any("panic", q))
		}
	}()
	switch m := m.(type) {
	case *messages.LowerWrite:
		slots := writeSlots(m)
		if len(slots) == 0 {
			return
		}
		w, ok := a.writes[slots[0]]
		if !ok {
			a.reply(ctx, ctx.Sender(), &messages.LowerWriteDone{Slots: slots, From: both})
			return
		}
		if w.waiting == 0 {
			a.finishWrite(ctx, w)
		}
	case *messages.LowerWriteDone:
		if len(m.Slots) == 0 {
			return
		}
		if w, ok := a.writes[m.Slots[0]]; ok && w.waiting&m.From != 0 {
			if w.waiting &^= m.From; w.waiting == 0 {
				a.finishWrite(ctx, w)
			}
		}
	case *messages.LowerRead:
		r, ok := a.reads[a.nextID]
		if !ok || r.req != m {
			// Not recorded: no tier has it.
			a.reply(ctx, ctx.Sender(), readFailed(m.ID, len(m.Items), both))
			return
		}
		if r.at == 0 {
			a.failRead(ctx, a.nextID, r)
		}
	case *messages.LowerReadDone:
		if r, ok := a.reads[m.ID]; ok && r.at == m.From {
			a.failRead(ctx, m.ID, r)
		}
	case *actor.Terminated:
		for _, t := range []messages.Tier{messages.Disk, messages.Remote} {
			if a.gone&t != 0 {
				a.answerGone(ctx, t)
			}
		}
	}
}

// finishWrite answers w, which no tier holds any more, as written nowhere.
func (a *LowerActor) finishWrite(ctx actor.Context, w *lowerWrite) {
	delete(a.writes, w.slots[0])
	a.reply(ctx, w.to, &messages.LowerWriteDone{Slots: w.slots, From: both})
}

// failRead answers r, which no tier holds any more, as missed.
func (a *LowerActor) failRead(ctx actor.Context, id uint64, r *lowerRead) {
	delete(a.reads, id)
	a.reply(ctx, r.to, readFailed(r.req.ID, len(r.req.Items), both))
}

// readFailed is the LowerReadDone of tier from for read id of n items,
// every one failed; the fan-out's (from both) also says none is kept.
func readFailed(id uint64, n int, from messages.Tier) *messages.LowerReadDone {
	done := &messages.LowerReadDone{ID: id, OK: make([]bool, n), From: from, Why: make([]messages.MissReason, n)}
	if from == both {
		done.Kept = make([]bool, n)
	}
	for i := range done.Why {
		done.Why[i] = messages.MissFailed
	}
	return done
}
