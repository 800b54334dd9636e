package actors

import (
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"go.uber.org/zap"

	"github.com/kvtier/kvtier/events"
	"github.com/kvtier/kvtier/messages"
)

// keeping is a sender that keeps every frame.
type keeping struct {
	mu sync.Mutex
	fs []events.Frame
}

func (k *keeping) Publish(f events.Frame) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.fs = append(k.fs, f)
	return true
}

func (k *keeping) frames() []events.Frame {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]events.Frame(nil), k.fs...)
}

// TestEventsActorRestartKeepsRun: an events actor the supervisor restarts
// goes on with the run its Publisher keeps: no second AllBlocksCleared (a
// subscriber would forget blocks the Publisher counts as announced, and
// their stores, suppressed as repeats, would never come again), so a view
// of the frames holds what the Publisher holds. Stopping still clears.
func TestEventsActorRestartKeepsRun(t *testing.T) {
	sys := actor.NewActorSystem()
	snd := &keeping{}
	p := events.NewPublisher(events.Config{BlockSize: 1})
	produce := NewEventsActor(EventsConfig{Publisher: p, Server: snd, Log: zap.NewNop()})
	var made atomic.Int32
	pid := sys.Root.Spawn(actor.PropsFromProducer(func() actor.Actor {
		made.Add(1)
		return produce()
	}))
	st := func(h uint64) *messages.Residency {
		return &messages.Residency{Tier: messages.GPU, Changes: []messages.ResidencyChange{{Stored: true, Hash: h, Tokens: []int64{int64(h)}}}}
	}
	sys.Root.Send(pid, st(7))
	sys.Root.Send(pid, (*messages.Residency)(nil)) // panics: the supervisor restarts the actor
	sys.Root.Send(pid, st(7))                      // the GPU stores 7 again: a repeat, not published
	sys.Root.Send(pid, st(8))
	reply := make(chan messages.EventStats, 1)
	sys.Root.Send(pid, &messages.EventsStatsRequest{Reply: reply}) // after all of the above
	var s messages.EventStats
	select {
	case s = <-reply:
	case <-time.After(10 * time.Second):
		t.Fatal("no stats")
	}
	if n := made.Load(); n != 2 {
		t.Fatalf("the producer made %d actors, want 2 (one restart)", n)
	}
	if s.Published != 3 || s.LastSeq != 2 || s.Resident["GPU"] != 2 {
		t.Fatalf("stats %+v, want 3 batches (start, 7, 8) and 2 blocks", s)
	}
	v := events.NewView()
	for _, f := range snd.frames() {
		if err := v.Apply(f.Seq, f.Payload); err != nil {
			t.Fatalf("batch %d: %v", f.Seq, err)
		}
	}
	if got, want := v.Residency(), p.Residency(); !reflect.DeepEqual(got, want) {
		t.Fatalf("a subscriber's view %v, the publisher's residency %v", got, want)
	}
	if err := sys.Root.StopFuture(pid).Wait(); err != nil {
		t.Fatal(err)
	}
	fs := snd.frames()
	b, err := events.DecodeBatch(fs[len(fs)-1].Payload)
	if err != nil || len(fs) != 4 || len(b.Events) != 1 || b.Events[0].Kind != events.AllBlocksCleared {
		t.Fatalf("after the stop: %d frames, the last %+v %v; want AllBlocksCleared", len(fs), b.Events, err)
	}
}
