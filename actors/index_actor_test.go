package actors

import (
	"slices"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"go.uber.org/zap"

	"github.com/kvtier/kvtier/messages"
)

// TestIndexSendsMisses: a Lookup tells the disk nothing (its request may be
// refused for space and ask again); Demand, the blocks the GPU tier reports
// once requests computed them or the shared tier served them, goes on to
// the disk as Missed; and nothing does when IndexWatch names no disk.
func TestIndexSendsMisses(t *testing.T) {
	sys := actor.NewActorSystem()
	idx := sys.Root.Spawn(actor.PropsFromProducer(mustIndex(t, messages.Pinned, messages.Disk)))
	got := make(chan []uint64, 4)
	diskPID := sys.Root.Spawn(actor.PropsFromFunc(func(c actor.Context) {
		if m, ok := c.Message().(*messages.Missed); ok {
			got <- m.Hashes
		}
	}))
	sys.Root.Send(idx, &IndexWatch{MissDisk: diskPID})
	sys.Root.Send(idx, &messages.IndexUpdate{Tier: messages.Pinned, Added: []uint64{1, 3}})
	sys.Root.Send(idx, &messages.IndexUpdate{Tier: messages.Disk, Added: []uint64{2, 3, 5}})
	// Chain 1, 2, 3, 4, 5: 1 pinned, 2 disk, 3 both, 4 nowhere (the run
	// ends), 5 on disk past the break. Chain 6: nowhere.
	chains := [][]uint64{{1, 2, 3, 4, 5}, {6}}
	r, err := sys.Root.RequestFuture(idx, &messages.Lookup{ID: 7, Chains: chains}, testWait).Result()
	if err != nil {
		t.Fatal(err)
	}
	res := r.(*messages.LookupResult)
	want := [][]messages.Tier{{messages.Pinned, messages.Disk, messages.Pinned}, nil} // the tier each is served from
	if len(res.Tiers) != 2 || !slices.Equal(res.Tiers[0], want[0]) || len(res.Tiers[1]) != 0 {
		t.Fatalf("lookup answered %v, want %v", res.Tiers, want)
	}
	// heard syncs with the index (a Lookup's answer comes after whatever it
	// sent for the messages before), sends a marker to the disk behind
	// that, and returns what the disk heard up to the marker.
	heard := func() [][]uint64 {
		t.Helper()
		if _, err := sys.Root.RequestFuture(idx, &messages.Lookup{ID: 99}, testWait).Result(); err != nil {
			t.Fatal(err)
		}
		sys.Root.Send(diskPID, &messages.Missed{Hashes: []uint64{999}})
		var out [][]uint64
		for {
			select {
			case h := <-got:
				if slices.Equal(h, []uint64{999}) {
					return out
				}
				out = append(out, h)
			case <-time.After(testWait):
				t.Fatal("the marker did not reach the disk")
				return nil
			}
		}
	}
	if h := heard(); len(h) != 0 {
		t.Fatalf("the disk heard of misses %v at a Lookup", h)
	}
	sys.Root.Send(idx, &messages.Demand{Hashes: []uint64{4, 5, 6}})
	if h := heard(); len(h) != 1 || !slices.Equal(h[0], []uint64{4, 5, 6}) {
		t.Fatalf("disk heard of misses %v, want [[4 5 6]]", h)
	}
	// Without a MissDisk, no one hears.
	sys.Root.Send(idx, &IndexWatch{})
	sys.Root.Send(idx, &messages.Demand{Hashes: []uint64{9}})
	if h := heard(); len(h) != 0 {
		t.Fatalf("disk heard of misses %v with no MissDisk", h)
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

// TestIndexFailureMidLookupAnswersUnanswered: an index that fails half-way
// through a Lookup answers it Unanswered after its restart (one empty run a
// chain: the asker learns nothing of the tiers below, and does not wait for
// ever), keeps its residency, and answers the next Lookup as before.
func TestIndexFailureMidLookupAnswersUnanswered(t *testing.T) {
	sys := actor.NewActorSystem()
	fail := make(chan struct{}, 1)
	fail <- struct{}{}
	p, err := NewIndexActor(IndexConfig{Log: zap.NewNop(), Tiers: []messages.Tier{messages.Pinned}, lookupFault: func(*messages.Lookup) {
		select {
		case <-fail:
			panic("index fails mid-lookup")
		default:
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	idx := sys.Root.Spawn(actor.PropsFromProducer(p, actor.WithSupervisor(actor.NewOneForOneStrategy(10, time.Second, actor.DefaultDecider))))
	sys.Root.Send(idx, &messages.IndexUpdate{Tier: messages.Pinned, Added: []uint64{1, 2}})
	chains := [][]uint64{{1, 2, 3}, {1}}
	r, err := sys.Root.RequestFuture(idx, &messages.Lookup{ID: 5, Chains: chains}, testWait).Result()
	if err != nil {
		t.Fatalf("the lookup the index failed in was not answered: %v", err)
	}
	res := r.(*messages.LookupResult)
	if !res.Unanswered || res.ID != 5 || len(res.Tiers) != 2 || len(res.Tiers[0]) != 0 || len(res.Tiers[1]) != 0 {
		t.Fatalf("failed lookup answered %+v, want ID 5, Unanswered, two empty runs", res)
	}
	r, err = sys.Root.RequestFuture(idx, &messages.Lookup{ID: 6, Chains: chains}, testWait).Result()
	if err != nil {
		t.Fatal(err)
	}
	res = r.(*messages.LookupResult)
	want := []messages.Tier{messages.Pinned, messages.Pinned}
	if res.Unanswered || res.ID != 6 || !slices.Equal(res.Tiers[0], want) || !slices.Equal(res.Tiers[1], want[:1]) {
		t.Fatalf("lookup after the restart answered %+v, want runs %v and %v", res, want, want[:1])
	}
}
