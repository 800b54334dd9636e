package actors

import (
	"slices"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"go.uber.org/zap"

	"github.com/kvtier/kvtier/messages"
	"github.com/kvtier/kvtier/prefixhash"
)

// collect spawns an actor that passes every message of type T to a channel.
func collect[T any](sys *actor.ActorSystem) (*actor.PID, chan T) {
	got := make(chan T, 16)
	pid := sys.Root.Spawn(actor.PropsFromFunc(func(ctx actor.Context) {
		if m, ok := ctx.Message().(T); ok {
			got <- m
		}
	}))
	return pid, got
}

func recvWhat[T any](t *testing.T, ch chan T, what string) T {
	t.Helper()
	select {
	case m := <-ch:
		return m
	case <-time.After(5 * time.Second):
		t.Fatalf("%s: never came", what)
	}
	var zero T
	return zero
}

// TestLowerActorDiskStoppedForGood: when the disk's actor stops for good
// with a write and a read waiting on it, the write is answered once the
// remote tier is done (Written then the remote tier's), the read goes on to
// the remote tier, the index hears the disk is down, and later requests go
// to the remote tier alone. Before, the fan-out waited for ever.
func TestLowerActorDiskStoppedForGood(t *testing.T) {
	sys := actor.NewActorSystem()
	disk := sys.Root.Spawn(actor.PropsFromProducer(func() actor.Actor { return &holdingTier{from: messages.Disk} }))
	remote := sys.Root.Spawn(actor.PropsFromProducer(func() actor.Actor { return &holdingTier{from: messages.Remote} }))
	index, down := collect[*messages.TiersDown](sys)
	lower := sys.Root.Spawn(actor.PropsFromProducer(NewLowerActor(disk, remote, index, zap.NewNop())))
	pinned, writes := collect[*messages.LowerWriteDone](sys)
	reads := make(chan *messages.LowerReadDone, 4)
	reader := sys.Root.Spawn(actor.PropsFromFunc(func(ctx actor.Context) {
		if m, ok := ctx.Message().(*messages.LowerReadDone); ok {
			reads <- m
		}
	}))
	// barrier returns once the fan-out took everything sent to it before
	// (and so sent on what it had to).
	barrier := func() {
		f := &messages.Flush{Reply: make(chan error, 1)}
		sys.Root.Send(lower, f)
		recvWhat(t, f.Reply, "the fan-out's flush")
	}
	item := func(h uint64, slot int) messages.LowerWriteItem {
		return messages.LowerWriteItem{Hash: h, Slot: slot, Bytes: make([]byte, 8)}
	}
	sys.Root.RequestWithCustomSender(lower, &messages.LowerWrite{Items: []messages.LowerWriteItem{item(11, 3)}}, pinned)
	sys.Root.RequestWithCustomSender(lower, &messages.LowerRead{ID: 9, Items: []messages.LowerReadItem{{Hash: 12, Slot: 4, Bytes: make([]byte, 8)}}}, reader)
	if err := sys.Root.StopFuture(disk).Wait(); err != nil {
		t.Fatal(err)
	}
	if d := recvWhat(t, down, "TiersDown"); d.Tiers != messages.Disk {
		t.Fatalf("index told %v, want the disk down", d.Tiers)
	}
	select {
	case m := <-writes:
		t.Fatalf("write answered before the remote tier was done: %+v", m)
	default:
	}
	barrier()
	sys.Root.Send(remote, releaseWrites{})
	if w := recvWhat(t, writes, "the write waiting on the stopped disk"); !slices.Equal(w.Slots, []int{3}) {
		t.Fatalf("write answer %+v, want slot 3 back", w)
	}
	if r := recvWhat(t, reads, "the read waiting on the stopped disk"); r.ID != 9 || !slices.Equal(r.OK, []bool{true}) {
		t.Fatalf("read answer %+v, want read 9 served by the remote tier", r)
	}
	// Later: the remote tier alone.
	sys.Root.RequestWithCustomSender(lower, &messages.LowerWrite{Items: []messages.LowerWriteItem{item(13, 5)}}, pinned)
	barrier()
	sys.Root.Send(remote, releaseWrites{})
	if w := recvWhat(t, writes, "a write after the disk stopped"); !slices.Equal(w.Slots, []int{5}) {
		t.Fatalf("write answer %+v, want slot 5 back", w)
	}
	// Both gone: answered at once.
	if err := sys.Root.StopFuture(remote).Wait(); err != nil {
		t.Fatal(err)
	}
	recvWhat(t, down, "TiersDown of the remote tier")
	sys.Root.RequestWithCustomSender(lower, &messages.LowerWrite{Items: []messages.LowerWriteItem{item(14, 6)}}, pinned)
	if w := recvWhat(t, writes, "a write with no tier left"); !slices.Equal(w.Slots, []int{6}) || len(w.Written) != 0 {
		t.Fatalf("write answer %+v, want slot 6 back, nothing written", w)
	}
	sys.Root.RequestWithCustomSender(lower, &messages.LowerRead{ID: 10, Items: []messages.LowerReadItem{{Hash: 12, Slot: 4, Bytes: make([]byte, 8)}}}, reader)
	if r := recvWhat(t, reads, "a read with no tier left"); r.ID != 10 || !slices.Equal(r.OK, []bool{false}) {
		t.Fatalf("read answer %+v, want a miss", r)
	}
}

// TestLowerActorWrittenIsTheDisks: while the disk is in service the
// fan-out reports the disk's Written alone, so a block only the remote tier
// took is drained to the disk when it leaves pinned memory, not dropped as
// held below.
func TestLowerActorWrittenIsTheDisks(t *testing.T) {
	sys := actor.NewActorSystem()
	answer := func(from messages.Tier, written []uint64) *actor.PID {
		return sys.Root.Spawn(actor.PropsFromFunc(func(ctx actor.Context) {
			if m, ok := ctx.Message().(*messages.LowerWrite); ok {
				done := &messages.LowerWriteDone{Written: written, From: from}
				for _, it := range m.Items {
					done.Slots = append(done.Slots, it.Slot)
				}
				ctx.Send(ctx.Sender(), done)
			}
		}))
	}
	disk, remote := answer(messages.Disk, []uint64{1}), answer(messages.Remote, []uint64{1, 2})
	lower := sys.Root.Spawn(actor.PropsFromProducer(NewLowerActor(disk, remote, nil, zap.NewNop())))
	pinned, writes := collect[*messages.LowerWriteDone](sys)
	w := &messages.LowerWrite{Items: []messages.LowerWriteItem{{Hash: 1, Slot: 0}, {Hash: 2, Slot: 1}}}
	sys.Root.RequestWithCustomSender(lower, w, pinned)
	if got := recvWhat(t, writes, "the write"); !slices.Equal(got.Written, []uint64{1}) || !slices.Equal(got.Slots, []int{0, 1}) {
		t.Fatalf("answer %+v, want slots 0 and 1 back and only the disk's block 1 written", got)
	}
}

// TestIndexRemoteStoppedForGood: a lookup waiting on the remote tier when
// its actor stops for good is answered with what the node's tiers hold, and
// later lookups no longer ask it. Before, the allocation waited for ever.
func TestIndexRemoteStoppedForGood(t *testing.T) {
	sys := actor.NewActorSystem()
	remote, asked := collect[*messages.RemoteLookup](sys)
	p, err := NewIndexActor(IndexConfig{Log: zap.NewNop(), Tiers: []messages.Tier{messages.Pinned}, Remote: remote})
	if err != nil {
		t.Fatal(err)
	}
	idx := sys.Root.Spawn(actor.PropsFromProducer(p))
	sys.Root.Send(idx, &messages.IndexUpdate{Tier: messages.Pinned, Added: []uint64{1}})
	gpu, results := collect[*messages.LookupResult](sys)
	lookup := &messages.Lookup{ID: 5, Chains: [][]uint64{{1, 2}}, Digests: [][]prefixhash.Digest{{{1}, {2}}}}
	sys.Root.RequestWithCustomSender(idx, lookup, gpu)
	recvWhat(t, asked, "the remote lookup")
	if err := sys.Root.StopFuture(remote).Wait(); err != nil {
		t.Fatal(err)
	}
	if r := recvWhat(t, results, "the lookup waiting on the stopped remote tier"); r.ID != 5 || !slices.Equal(r.Tiers[0], []messages.Tier{messages.Pinned}) {
		t.Fatalf("answer %+v, want block 1 in pinned memory", r)
	}
	lookup.ID = 6
	sys.Root.RequestWithCustomSender(idx, lookup, gpu)
	if r := recvWhat(t, results, "a later lookup"); r.ID != 6 {
		t.Fatalf("answer %+v", r)
	}
}

// TestIndexRestartKeepsItsState: a restarted index still knows what the
// tiers hold, whom to tell of blocks leaving them, and the lookups waiting
// on the remote tier. Before, the new incarnation started empty: lookups
// missed, BelowGone went nowhere, and a lookup waiting on the remote tier
// was never answered.
func TestIndexRestartKeepsItsState(t *testing.T) {
	sys := actor.NewActorSystem()
	remote, asked := collect[*messages.RemoteLookup](sys)
	p, err := NewIndexActor(IndexConfig{Log: zap.NewNop(), Tiers: []messages.Tier{messages.Pinned, messages.Disk}, Remote: remote})
	if err != nil {
		t.Fatal(err)
	}
	idx := sys.Root.Spawn(actor.PropsFromProducer(p))
	pinned, gone := collect[*messages.BelowGone](sys)
	sys.Root.Send(idx, &IndexWatch{Pinned: pinned})
	sys.Root.Send(idx, &messages.IndexUpdate{Tier: messages.Disk, Added: []uint64{1, 2}})
	gpu, results := collect[*messages.LookupResult](sys)
	sys.Root.RequestWithCustomSender(idx, &messages.Lookup{ID: 5, Chains: [][]uint64{{1, 2, 3}},
		Digests: [][]prefixhash.Digest{{{1}, {2}, {3}}}}, gpu)
	ask := recvWhat(t, asked, "the remote lookup")

	sys.Root.Send(idx, (*IndexWatch)(nil)) // a defect: the actor panics and restarts
	sys.Root.Send(idx, &messages.RemoteLookupResult{ID: ask.ID, Found: []int{1}})
	r := recvWhat(t, results, "the lookup waiting on the remote tier across the restart")
	if want := []messages.Tier{messages.Disk, messages.Disk, messages.Remote}; r.ID != 5 || !slices.Equal(r.Tiers[0], want) {
		t.Fatalf("answer %+v, want %v", r, want)
	}
	sys.Root.Send(idx, &messages.IndexUpdate{Tier: messages.Disk, Remove: []uint64{2}})
	if g := recvWhat(t, gone, "BelowGone after the restart"); !slices.Equal(g.Hashes, []uint64{2}) {
		t.Fatalf("BelowGone %+v, want block 2", g)
	}
}
