package actors

import (
	"slices"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/kvtier/kvtier/disk"
	"github.com/kvtier/kvtier/messages"
	"github.com/kvtier/kvtier/pinned"
	"github.com/kvtier/kvtier/prefixhash"
)

// TestDrainRefusedUnderAnotherDigestTellsTheGPU: the disk holds block 7 of
// one prefix (announced, a read of it in flight, so it cannot be displaced)
// when pinned memory drains its only copy of another prefix's block under
// the same 64-bit hash (a forged collision). The disk refuses it and pinned
// memory drops it; the index still lists hash 7 on the disk, for the other
// prefix. The GPU, which copied the victim's block down and marked it held
// below, must hear BelowGone: told nothing, it evicts the block without a
// copy and the victim's KV is held nowhere.
func TestDrainRefusedUnderAnotherDigestTellsTheGPU(t *testing.T) {
	const h = 7
	sys := actor.NewActorSystem()
	idx := sys.Root.Spawn(actor.PropsFromProducer(mustIndex(t, messages.Pinned, messages.Disk)))

	gate := newGateFS(&disk.FaultFS{})
	st, _, err := disk.Open(disk.Config{Dir: t.TempDir(), CapacityBytes: testDiskSlots * disk.SlotBytes(testDiskPayload),
		PayloadBytes: testDiskPayload, Fingerprint: 0xd15c, FS: gate})
	if err != nil {
		t.Fatal(err)
	}
	prod, err := NewDiskActor(DiskConfig{Store: st, Index: idx})
	if err != nil {
		t.Fatal(err)
	}
	dsk := sys.Root.Spawn(actor.PropsFromProducer(prod))
	defer sys.Root.Stop(dsk)
	res, err := sys.Root.RequestFuture(dsk, writeMsg(h), testWait).Result()
	if err != nil || !slices.Equal(res.(*messages.LowerWriteDone).Written, []uint64{h}) {
		t.Fatalf("the other prefix's block written: %v %v", res, err)
	}
	gate.arm() // its read stays in flight: the disk cannot displace it
	read := sys.Root.RequestFuture(dsk, readMsg(1, time.Time{}, h), testWait)
	<-gate.entered

	heard := make(chan any, 8)
	gpu := sys.Root.Spawn(actor.PropsFromFunc(func(c actor.Context) {
		switch m := c.Message().(type) {
		case *messages.OffloadGrant, *messages.BelowGone, string:
			heard <- m
		}
	}))
	pool, err := pinned.New(pinned.Config{CapacityBytes: testDiskPayload, SlotBytes: testDiskPayload})
	if err != nil {
		t.Fatal(err)
	}
	// One slot, kept free ahead of need: the block drains once committed.
	pin := sys.Root.Spawn(actor.PropsFromProducer(NewPinnedActor(PinnedConfig{Pool: pool, Index: idx, Disk: dsk, WriteQuota: 4, FreeTarget: 1})))
	defer sys.Root.Stop(pin)
	sys.Root.Send(idx, &IndexWatch{GPU: gpu, Pinned: pin})

	victim := messages.OffloadItem{Hash: h, Digest: digestOf(h + 1000), Tokens: 16}
	sys.Root.RequestWithCustomSender(pin, &messages.OffloadRequest{ID: 1, Items: []messages.OffloadItem{victim}}, gpu)
	g := recv(t, heard).(*messages.OffloadGrant)
	if g.Slots[0] < 0 {
		t.Fatalf("the victim's offer: %v", g.Slots)
	}
	// The GPU copied its block into the slot: from now on it counts it
	// held below.
	sys.Root.Send(pin, &messages.OffloadDone{Slots: g.Slots, Hashes: []uint64{h}})
	flush := &messages.Flush{Reply: make(chan error, 1)}
	sys.Root.Send(pin, flush) // answered once the drain ended, after its index update
	if err := recv(t, flush.Reply); err != nil {
		t.Fatal(err)
	}
	r, err := sys.Root.RequestFuture(idx, &messages.Lookup{ID: 1, Chains: [][]uint64{{h}}}, testWait).Result()
	if err != nil {
		t.Fatal(err)
	}
	if got := r.(*messages.LookupResult).Tiers[0]; !slices.Equal(got, []messages.Tier{messages.Disk}) {
		t.Fatalf("the index serves hash %d from %v, want the disk (the other prefix's block)", h, got)
	}
	q := &messages.PinnedQuery{Kind: messages.QueryExists, Hashes: []uint64{h}, Digests: []prefixhash.Digest{victim.Digest}, Reply: make(chan *messages.QueryResult, 1)}
	sys.Root.Send(pin, q)
	if n := recv(t, q.Reply).Tokens.Of(messages.Pinned); n != 0 {
		t.Fatalf("pinned memory still holds the victim's block (%d tokens): the drain was not refused", n)
	}
	// Whatever the index sent the GPU went before the Lookup's answer.
	sys.Root.Send(gpu, "marker")
	var gone bool
	for m := recv(t, heard); m != "marker"; m = recv(t, heard) {
		if b, ok := m.(*messages.BelowGone); ok && slices.Contains(b.Hashes, h) {
			gone = true
		}
	}
	if !gone {
		t.Errorf("the GPU never heard BelowGone for hash %d: it keeps its block held below, though no tier below holds the victim's KV", h)
	}
	gate.release <- struct{}{}
	if _, err := read.Result(); err != nil {
		t.Fatal(err)
	}
}
