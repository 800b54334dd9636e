package actors

import (
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/kvtier/kvtier/messages"
	"github.com/kvtier/kvtier/remote"
)

// TestRemoteActorPanicInReadGivesSlotsBack: a remote actor whose read
// handler panics before it starts the call (here the injected clock, as a
// defect would) has handed the slots to nobody: salvage must answer the
// read as missed, or the pinned actor never gets its slots back. The store
// points at a port nobody listens on; no Redis is needed.
func TestRemoteActorPanicInReadGivesSlotsBack(t *testing.T) {
	st, err := remote.New(remote.Config{Addrs: []string{"127.0.0.1:1"}, PayloadBytes: 64, ChunkBytes: 32})
	if err != nil {
		t.Fatal(err)
	}
	var fired atomic.Int32
	clock := func() time.Time {
		if fired.Add(1) == 1 {
			panic("injected in the clock")
		}
		return time.Now()
	}
	sys := actor.NewActorSystem()
	pid := sys.Root.Spawn(actor.PropsFromProducer(NewRemoteActor(RemoteConfig{Store: st, ReadTimeout: time.Second, Clock: clock})))
	defer sys.Root.Stop(pid)
	for round := range 2 { // the first read is salvaged, the second served by the restarted actor
		r := &messages.LowerRead{ID: uint64(round), Deadline: time.Now().Add(time.Second),
			Items: []messages.LowerReadItem{{Hash: 1, Slot: 5, Bytes: make([]byte, 64)}}}
		got, err := sys.Root.RequestFuture(pid, r, testWait).Result()
		if err != nil {
			t.Fatalf("round %d: read never answered (%v): its slots are lost", round, err)
		}
		if d := got.(*messages.LowerReadDone); d.ID != uint64(round) || !slices.Equal(d.OK, []bool{false}) {
			t.Fatalf("round %d: read answered %+v, want a miss", round, d)
		}
	}
}
