package actors

import (
	"github.com/asynkron/protoactor-go/actor"
	"go.uber.org/zap"

	"github.com/kvtier/kvtier/messages"
)

// LowerActor stands below the pinned actor when a node has both a disk
// tier and the shared remote tier, speaking to the pinned actor the same
// protocol either speaks alone. A LowerWrite goes to both, and its slots go
// back once both are done with them; a LowerRead goes to the disk first and
// what the disk missed to the remote tier, under the same deadline.
type LowerActor struct {
	disk, remote *actor.PID
	log          *zap.Logger
	*lowerBooks
}

// lowerBooks are the requests in flight. They outlive a restart (the
// producer makes them once), so the tiers' answers to requests made before
// it still reach the pinned actor, whose slots would otherwise never return.
type lowerBooks struct {
	writes map[int]*lowerWrite // by the request's first slot
	reads  map[uint64]*lowerRead
	nextID uint64
}

type lowerWrite struct {
	to      *actor.PID
	slots   []int
	written []uint64
	waiting int
}

type lowerRead struct {
	to   *actor.PID
	req  *messages.LowerRead
	ok   []bool
	miss []int // indexes of req.Items sent to the remote tier
	step int   // 1: at the disk, 2: at the remote tier
}

// NewLowerActor returns the actor's producer.
func NewLowerActor(disk, remote *actor.PID, log *zap.Logger) actor.Producer {
	books := &lowerBooks{writes: map[int]*lowerWrite{}, reads: map[uint64]*lowerRead{}}
	return func() actor.Actor {
		return &LowerActor{disk: disk, remote: remote, log: log, lowerBooks: books}
	}
}

// Receive implements actor.Actor.
func (a *LowerActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *messages.LowerWrite:
		if len(m.Items) == 0 {
			ctx.Send(ctx.Sender(), &messages.LowerWriteDone{})
			return
		}
		w := &lowerWrite{to: ctx.Sender(), waiting: 2}
		for _, it := range m.Items {
			w.slots = append(w.slots, it.Slot)
		}
		a.writes[w.slots[0]] = w
		ctx.Request(a.disk, m)
		ctx.Request(a.remote, m)
	case *messages.LowerWriteDone:
		if len(m.Slots) == 0 {
			return
		}
		w, ok := a.writes[m.Slots[0]]
		if !ok {
			a.log.Error("lower actor: write done for an unknown request", zap.Int("slot", m.Slots[0]))
			return
		}
		w.written = append(w.written, m.Written...)
		if w.waiting--; w.waiting == 0 {
			delete(a.writes, m.Slots[0])
			ctx.Send(w.to, &messages.LowerWriteDone{Slots: w.slots, Written: dedup(w.written)})
		}
	case *messages.LowerRead:
		a.nextID++
		r := &lowerRead{to: ctx.Sender(), req: m, step: 1}
		a.reads[a.nextID] = r
		ctx.Request(a.disk, &messages.LowerRead{ID: a.nextID, Items: m.Items, Deadline: m.Deadline})
	case *messages.LowerReadDone:
		a.readDone(ctx, m)
	case *messages.Flush:
		// Flushes go to the disk and remote actors themselves.
		m.Reply <- nil
	case *actor.Started, *actor.Stopping, *actor.Stopped, *actor.Restarting:
	default:
		a.log.Warn("lower actor: unexpected message", zap.String("type", typeName(m)))
	}
}

func (a *LowerActor) readDone(ctx actor.Context, m *messages.LowerReadDone) {
	r, ok := a.reads[m.ID]
	if !ok {
		a.log.Error("lower actor: read done for an unknown request", zap.Uint64("id", m.ID))
		return
	}
	if r.step == 1 {
		r.ok = make([]bool, len(r.req.Items))
		var items []messages.LowerReadItem
		for i := range r.req.Items {
			if i < len(m.OK) && m.OK[i] {
				r.ok[i] = true
			} else {
				r.miss = append(r.miss, i)
				items = append(items, r.req.Items[i])
			}
		}
		if len(items) > 0 {
			r.step = 2
			ctx.Request(a.remote, &messages.LowerRead{ID: m.ID, Items: items, Deadline: r.req.Deadline})
			return
		}
	} else {
		for j, i := range r.miss {
			r.ok[i] = j < len(m.OK) && m.OK[j]
		}
	}
	delete(a.reads, m.ID)
	ctx.Send(r.to, &messages.LowerReadDone{ID: r.req.ID, OK: r.ok})
}

func dedup(hs []uint64) []uint64 {
	seen := make(map[uint64]bool, len(hs))
	out := hs[:0]
	for _, h := range hs {
		if !seen[h] {
			seen[h] = true
			out = append(out, h)
		}
	}
	return out
}
