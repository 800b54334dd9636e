package actors

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/kvtier/kvtier/messages"
	"github.com/kvtier/kvtier/pinned"
	"github.com/kvtier/kvtier/prefixhash"
)

// TestPinnedActorRestartStopsTier: an actor that panics is restarted by its
// supervisor. The pinned Tier's books were left half-way through an event,
// over a Pool whose slots are still granted, so the next incarnation must
// not start a fresh Tier over it: everything that waited is answered (a
// Flush here would otherwise wait for ever) and later requests are refused.
func TestPinnedActorRestartStopsTier(t *testing.T) {
	pool, err := pinned.New(pinned.Config{CapacityBytes: 4 << 12, SlotBytes: 64})
	if err != nil {
		t.Fatal(err)
	}
	sys := actor.NewActorSystem()
	idx := sys.Root.Spawn(actor.PropsFromProducer(mustIndex(t, messages.Pinned, messages.Disk)))
	lookup := func() []messages.Tier {
		t.Helper()
		r, err := sys.Root.RequestFuture(idx, &messages.Lookup{ID: 1, Chains: [][]uint64{{1, 7}}}, testWait).Result()
		if err != nil {
			t.Fatal(err)
		}
		return r.(*messages.LookupResult).Tiers[0]
	}
	grants := make(chan any, 8)
	gpu := sys.Root.Spawn(actor.PropsFromFunc(func(c actor.Context) {
		switch m := c.Message().(type) {
		case *messages.OffloadGrant, *messages.FetchGrant:
			grants <- m
		}
	}))
	pid := sys.Root.Spawn(actor.PropsFromProducer(NewPinnedActor(PinnedConfig{Pool: pool, Index: idx, WriteQuota: 4})))
	defer sys.Root.Stop(pid)
	next := func() any {
		t.Helper()
		select {
		case m := <-grants:
			return m
		case <-time.After(5 * time.Second):
			t.Fatal("no answer from the pinned actor")
			return nil
		}
	}

	sys.Root.RequestWithCustomSender(pid, &messages.OffloadRequest{ID: 1, Items: []messages.OffloadItem{{Hash: 1, Tokens: 4}}}, gpu)
	g := next().(*messages.OffloadGrant)
	if g.Slots[0] < 0 {
		t.Fatalf("grant %v", g.Slots)
	}
	sys.Root.Send(pid, &messages.OffloadDone{Slots: g.Slots, Hashes: []uint64{1}})
	done := &messages.Flush{Reply: make(chan error, 1)}
	sys.Root.Send(pid, done) // answered after the commit's index update went out
	if err := <-done.Reply; err != nil {
		t.Fatal(err)
	}
	sys.Root.Send(idx, &messages.IndexUpdate{Tier: messages.Disk, Added: []uint64{7}}) // block 7 on the disk below
	if got := lookup(); !slices.Equal(got, []messages.Tier{messages.Pinned, messages.Disk}) {
		t.Fatalf("before the failure the index serves %v, want [pinned disk]", got)
	}
	sys.Root.RequestWithCustomSender(pid, &messages.OffloadRequest{ID: 4, Items: []messages.OffloadItem{{Hash: 4, Tokens: 4}}}, gpu)
	g = next().(*messages.OffloadGrant)
	if g.Slots[0] < 0 {
		t.Fatalf("grant %v", g.Slots)
	}
	flush := &messages.Flush{Reply: make(chan error, 1)}
	sys.Root.Send(pid, flush) // waits for the copy into g.Slots
	// A malformed commit (a slot never granted) panics the tier.
	sys.Root.Send(pid, &messages.OffloadDone{Slots: []int{g.Slots[0] + 1}, Hashes: []uint64{2}})
	select {
	case err := <-flush.Reply:
		if !errors.Is(err, pinned.ErrTierStopped) {
			t.Fatalf("flush after the failure: %v, want ErrTierStopped", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the Flush waiting at the failure was never answered")
	}
	if got := lookup(); len(got) != 0 {
		t.Fatalf("after the failure the index still serves %v from tiers reached only through pinned memory", got)
	}
	sys.Root.Send(idx, &messages.IndexUpdate{Tier: messages.Disk, Added: []uint64{1}}) // a write that was in flight
	if got := lookup(); len(got) != 0 {
		t.Fatalf("a tier out of service was indexed again: %v", got)
	}
	sys.Root.RequestWithCustomSender(pid, &messages.FetchRequest{ID: 2, Hashes: []uint64{1}, Digests: []prefixhash.Digest{{}}}, gpu)
	if fg := next().(*messages.FetchGrant); len(fg.Slots) != 0 || fg.Short != messages.MissFailed {
		t.Fatalf("fetch after the restart: %+v, want nothing served", fg)
	}
	sys.Root.RequestWithCustomSender(pid, &messages.OffloadRequest{ID: 3, Items: []messages.OffloadItem{{Hash: 3, Tokens: 4}}}, gpu)
	if og := next().(*messages.OffloadGrant); og.Slots[0] != messages.SlotDenied {
		t.Fatalf("offer after the restart: %v, want denied", og.Slots)
	}
}
