package actors

import (
	"slices"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"go.uber.org/zap"

	"github.com/kvtier/kvtier/messages"
)

// TestIndexSendsMisses: for each Lookup the index tells the disk of every
// block neither it nor the pinned tier holds (a block served from pinned
// memory never reaches the disk), answers the Lookup as before, and tells
// nothing when IndexWatch names no disk.
func TestIndexSendsMisses(t *testing.T) {
	sys := actor.NewActorSystem()
	idx := sys.Root.Spawn(actor.PropsFromProducer(mustIndex(t, messages.Pinned, messages.Disk)))
	probe := func() (*actor.PID, chan []uint64) {
		got := make(chan []uint64, 4)
		pid := sys.Root.Spawn(actor.PropsFromFunc(func(c actor.Context) {
			if m, ok := c.Message().(*messages.Missed); ok {
				got <- m.Hashes
			}
		}))
		return pid, got
	}
	diskPID, diskGot := probe()
	sys.Root.Send(idx, &IndexWatch{MissDisk: diskPID})
	sys.Root.Send(idx, &messages.IndexUpdate{Tier: messages.Pinned, Added: []uint64{1, 3}})
	sys.Root.Send(idx, &messages.IndexUpdate{Tier: messages.Disk, Added: []uint64{2, 3, 5}})
	// Chain 1, 2, 3, 4, 5: 1 pinned, 2 disk, 3 both, 4 nowhere (the run
	// ends), 5 on disk past the break. Chain 6: nowhere.
	r, err := sys.Root.RequestFuture(idx, &messages.Lookup{ID: 7, Chains: [][]uint64{{1, 2, 3, 4, 5}, {6}}}, testWait).Result()
	if err != nil {
		t.Fatal(err)
	}
	res := r.(*messages.LookupResult)
	want := [][]messages.Tier{{messages.Pinned, messages.Disk, messages.Pinned}, nil} // the tier each is served from
	if len(res.Tiers) != 2 || !slices.Equal(res.Tiers[0], want[0]) || len(res.Tiers[1]) != 0 {
		t.Fatalf("lookup answered %v, want %v", res.Tiers, want)
	}
	wait := func(ch chan []uint64, what string) []uint64 {
		select {
		case h := <-ch:
			return h
		case <-time.After(testWait):
			t.Fatalf("%s: no Missed", what)
			return nil
		}
	}
	if got := wait(diskGot, "disk"); !slices.Equal(got, []uint64{4, 5, 6}) {
		t.Fatalf("disk heard of misses %v, want [4 5 6]", got)
	}
	// Without a MissDisk, no one hears.
	sys.Root.Send(idx, &IndexWatch{})
	if _, err := sys.Root.RequestFuture(idx, &messages.Lookup{ID: 8, Chains: [][]uint64{{9}}}, testWait).Result(); err != nil {
		t.Fatal(err)
	}
	// A marker sent after the Lookup's answer reaches the disk's probe
	// after anything the index sent it for that Lookup.
	sys.Root.Send(diskPID, &messages.Missed{Hashes: []uint64{999}})
	if got := wait(diskGot, "disk"); !slices.Equal(got, []uint64{999}) {
		t.Fatalf("disk heard of misses %v with no MissDisk", got)
	}
}

func mustIndex(t *testing.T, tiers ...messages.Tier) actor.Producer {
	t.Helper()
	p, err := NewIndexActor(IndexConfig{Log: zap.NewNop(), Tiers: tiers})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestIndexServesInConfiguredOrder: a block is served from the first tier
// the configuration lists that holds it; an update from a tier the list
// does not name changes nothing; a bad list is refused.
func TestIndexServesInConfiguredOrder(t *testing.T) {
	sys := actor.NewActorSystem()
	for _, order := range [][]messages.Tier{{messages.Pinned, messages.Disk}, {messages.Pinned}} {
		idx := sys.Root.Spawn(actor.PropsFromProducer(mustIndex(t, order...)))
		sys.Root.Send(idx, &messages.IndexUpdate{Tier: messages.Pinned, Added: []uint64{1, 2}})
		sys.Root.Send(idx, &messages.IndexUpdate{Tier: messages.Disk, Added: []uint64{2, 3}})
		r, err := sys.Root.RequestFuture(idx, &messages.Lookup{ID: 1, Chains: [][]uint64{{1, 2, 3}}}, testWait).Result()
		if err != nil {
			t.Fatal(err)
		}
		want := []messages.Tier{messages.Pinned, messages.Pinned, messages.Disk}
		if len(order) == 1 {
			want = want[:2] // no disk: its update was ignored
		}
		if got := r.(*messages.LookupResult).Tiers[0]; !slices.Equal(got, want) {
			t.Fatalf("order %v: served from %v, want %v", order, got, want)
		}
	}
	for _, bad := range [][]messages.Tier{nil, {messages.Disk, messages.Pinned}, {messages.Pinned, messages.GPU}, {messages.Pinned, messages.Remote},
		{messages.Pinned | messages.Disk}, {messages.Pinned, messages.Pinned}, {messages.Pinned, 0}, {messages.Pinned, 1 << 5}} {
		if _, err := NewIndexActor(IndexConfig{Tiers: bad}); err == nil {
			t.Fatalf("tiers %v accepted", bad)
		}
	}
}
