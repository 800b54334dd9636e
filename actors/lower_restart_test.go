package actors

import (
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"go.uber.org/zap"

	"github.com/kvtier/kvtier/messages"
)

// holdingTier is a fake lower tier that keeps its answers until it
// receives releaseWrites, then sends them: a write returns every slot with
// nothing written, a read finds every block.
type holdingTier struct {
	from messages.Tier
	held []func(actor.Context)
}

type releaseWrites struct{}

func (f *holdingTier) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *messages.LowerWrite:
		to := ctx.Sender()
		done := &messages.LowerWriteDone{From: f.from}
		for _, it := range m.Items {
			done.Slots = append(done.Slots, it.Slot)
		}
		f.held = append(f.held, func(c actor.Context) { c.Send(to, done) })
	case *messages.LowerRead:
		to := ctx.Sender()
		done := &messages.LowerReadDone{ID: m.ID, OK: make([]bool, len(m.Items)), From: f.from}
		for i := range done.OK {
			done.OK[i] = true
		}
		f.held = append(f.held, func(c actor.Context) { c.Send(to, done) })
	case releaseWrites:
		for _, reply := range f.held {
			reply(ctx)
		}
		f.held = nil
	}
}

// TestLowerActorRestartKeepsRequestsInFlight: a write in flight at the disk
// when the fan-out actor restarts is still answered once the disk is done —
// before, the new incarnation's empty books called it unknown and the
// pinned actor never got its slot back.
func TestLowerActorRestartKeepsRequestsInFlight(t *testing.T) {
	sys := actor.NewActorSystem()
	disk := sys.Root.Spawn(actor.PropsFromProducer(func() actor.Actor { return &holdingTier{from: messages.Disk} }))
	remote := sys.Root.Spawn(actor.PropsFromProducer(func() actor.Actor { return &holdingTier{from: messages.Remote} }))
	lower := sys.Root.Spawn(actor.PropsFromProducer(NewLowerActor(disk, remote, nil, zap.NewNop())))
	got := make(chan *messages.LowerWriteDone, 1)
	pinned := sys.Root.Spawn(actor.PropsFromFunc(func(ctx actor.Context) {
		if m, ok := ctx.Message().(*messages.LowerWriteDone); ok {
			got <- m
		}
	}))
	write := &messages.LowerWrite{Items: []messages.LowerWriteItem{{Hash: 11, Slot: 3, Bytes: make([]byte, 8)}}}
	sys.Root.RequestWithCustomSender(lower, write, pinned)
	sys.Root.Send(lower, &messages.LowerWrite{}) // no sender to answer: the actor panics and restarts
	time.Sleep(100 * time.Millisecond)
	sys.Root.Send(disk, releaseWrites{})
	sys.Root.Send(remote, releaseWrites{})
	select {
	case m := <-got:
		if len(m.Slots) != 1 || m.Slots[0] != 3 {
			t.Fatalf("answer %+v, want slot 3 back", m)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a write in flight across the fan-out actor's restart was never answered")
	}
}
