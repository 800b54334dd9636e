package actors

import (
	"slices"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"go.uber.org/zap"

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
	dsk := diskOver(t, sys, idx, gate)
	defer sys.Root.Stop(dsk)
	writeBelow(t, sys, dsk, writeMsg(h))
	gate.arm() // its read stays in flight: the disk cannot displace it
	read := sys.Root.RequestFuture(dsk, readMsg(1, time.Time{}, h), testWait)
	<-gate.entered

	gpu, heard := gpuProbe(sys)
	// One slot, kept free ahead of need: the block drains once committed.
	pin := pinnedOver(t, sys, idx, dsk, 1)
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
	indexServes(t, sys, idx, h, messages.Disk, "the disk (the other prefix's block)")
	if pinnedHolds(t, sys, pin, h, victim.Digest) {
		t.Fatalf("pinned memory still holds the victim's block: the drain was not refused")
	}
	if !heardBelowGone(t, sys, idx, gpu, heard, h) {
		t.Errorf("the GPU never heard BelowGone for hash %d: it keeps its block held below, though no tier below holds the victim's KV", h)
	}
	gate.release <- struct{}{}
	if _, err := read.Result(); err != nil {
		t.Fatal(err)
	}
}

// TestDiskDisplacementTellsTheGPU: the disk holds the victim's block 7
// (the GPU evicted its own copy as held below, or keeps it so marked) when
// another prefix's block under the same 64-bit hash, which pinned memory
// read from the shared tier, drains to the disk and displaces it. The
// index still lists hash 7, in pinned memory (draining) and then on the
// disk, for the other prefix: the GPU must hear BelowGone, or it drops its
// copy of the victim's block as held below.
func TestDiskDisplacementTellsTheGPU(t *testing.T) {
	const h = 7
	sys, idx, dsk := indexAndDisk(t)
	gpu, heard := gpuProbe(sys)
	sys.Root.Send(idx, &IndexWatch{GPU: gpu})

	writeBelow(t, sys, dsk, writeMsg(h))                                                 // the victim's block
	sys.Root.Send(idx, &messages.IndexUpdate{Tier: messages.Pinned, Added: []uint64{h}}) // the other prefix's, in pinned memory
	other := writeMsg(h)
	other.Items[0].Digest = digestOf(h + 1000)
	writeBelow(t, sys, dsk, other)
	if !heardBelowGone(t, sys, idx, gpu, heard, h) {
		t.Errorf("the GPU never heard BelowGone for hash %d: it keeps its block held below, though the disk displaced the victim's KV", h)
	}
}

// diskOver starts a disk actor over a fresh store on fs that reports to idx.
func diskOver(t *testing.T, sys *actor.ActorSystem, idx *actor.PID, fs disk.FS) *actor.PID {
	t.Helper()
	st, _, err := disk.Open(disk.Config{Dir: t.TempDir(), CapacityBytes: testDiskSlots * disk.SlotBytes(testDiskPayload),
		PayloadBytes: testDiskPayload, Fingerprint: 0xd15c, FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	prod, err := NewDiskActor(DiskConfig{Store: st, Index: idx})
	if err != nil {
		t.Fatal(err)
	}
	return sys.Root.Spawn(actor.PropsFromProducer(prod))
}

// writeBelow writes m's single block to the disk actor and checks it was
// written (and so announced to the index before the answer).
func writeBelow(t *testing.T, sys *actor.ActorSystem, dsk *actor.PID, m *messages.LowerWrite) {
	t.Helper()
	res, err := sys.Root.RequestFuture(dsk, m, testWait).Result()
	if err != nil || !slices.Equal(res.(*messages.LowerWriteDone).Written, []uint64{m.Items[0].Hash}) {
		t.Fatalf("write of block %d: %v %v", m.Items[0].Hash, res, err)
	}
}

// gpuProbe stands for the GPU actor: it passes on the grants (offloads'
// and fetches'), BelowGones and markers it receives.
func gpuProbe(sys *actor.ActorSystem) (*actor.PID, chan any) {
	heard := make(chan any, 8)
	return sys.Root.Spawn(actor.PropsFromFunc(func(c actor.Context) {
		switch m := c.Message().(type) {
		case *messages.OffloadGrant, *messages.FetchGrant, *messages.BelowGone, string:
			heard <- m
		}
	})), heard
}

// heardBelowGone syncs with the index (whatever it sent the GPU goes
// before a Lookup's answer), then reports whether the GPU heard BelowGone
// for h before a marker sent after it.
func heardBelowGone(t *testing.T, sys *actor.ActorSystem, idx, gpu *actor.PID, heard chan any, h uint64) bool {
	t.Helper()
	if _, err := sys.Root.RequestFuture(idx, &messages.Lookup{ID: 99}, testWait).Result(); err != nil {
		t.Fatal(err)
	}
	sys.Root.Send(gpu, "marker")
	gone := false
	for m := recv(t, heard); m != "marker"; m = recv(t, heard) {
		if b, ok := m.(*messages.BelowGone); ok && slices.Contains(b.Hashes, h) {
			gone = true
		}
	}
	return gone
}

// TestDiskEvictionUnderAnotherDigestTellsTheGPU: the disk holds the
// victim's block 7 (the GPU keeps its copy marked held below) when pinned
// memory comes to hold another prefix's block under the same 64-bit hash
// (a forged collision; read from the shared tier, as the disk's record is
// of the wrong prefix). The disk's policy then evicts the victim's record
// (an eviction for other blocks' room, not a displacement). The index
// still lists hash 7 in pinned memory, for the other prefix, so it no
// longer left every tier below: the GPU must hear BelowGone all the same,
// or it drops its copy of the victim's block as held below, its KV held
// nowhere.
func TestDiskEvictionUnderAnotherDigestTellsTheGPU(t *testing.T) {
	const h = 7
	sys, idx, dsk := indexAndDisk(t)
	gpu, heard := gpuProbe(sys)
	sys.Root.Send(idx, &IndexWatch{GPU: gpu})

	writeBelow(t, sys, dsk, writeMsg(h))                                                 // the victim's block
	sys.Root.Send(idx, &messages.IndexUpdate{Tier: messages.Pinned, Added: []uint64{h}}) // the other prefix's, in pinned memory
	fillUntilEvicted(t, sys, dsk, h)
	indexServes(t, sys, idx, h, messages.Pinned, "pinned memory (the other prefix's block)")
	if !heardBelowGone(t, sys, idx, gpu, heard, h) {
		t.Errorf("the GPU never heard BelowGone for hash %d: it keeps its block held below, though the disk evicted the victim's KV", h)
	}
}

// TestDiskEvictionUnderSharedTierBlockTellsTheGPU is
// TestDiskEvictionUnderAnotherDigestTellsTheGPU over the real pinned actor
// and the fan-out to the disk and a shared tier (a fake): the GPU fetches
// the other prefix's block under hash 7, which the disk misses (its record
// is the victim's) and the shared tier serves into pinned memory. The
// disk's policy then evicts the victim's record: no tier below holds the
// victim's KV, and the GPU must hear BelowGone for hash 7.
func TestDiskEvictionUnderSharedTierBlockTellsTheGPU(t *testing.T) {
	const h = 7
	sys, idx, dsk := indexAndDisk(t)
	remote := sharedTierFake(sys)
	lower := sys.Root.Spawn(actor.PropsFromProducer(NewLowerActor(dsk, remote, idx, zap.NewNop())))
	gpu, heard := gpuProbe(sys)
	pin := pinnedOver(t, sys, idx, lower, 2)
	defer sys.Root.Stop(pin)
	sys.Root.Send(idx, &IndexWatch{GPU: gpu, Pinned: pin})

	// The victim's block, which the GPU keeps marked held below.
	writeBelow(t, sys, dsk, writeMsg(h))
	other := digestOf(h + 1000)
	sys.Root.RequestWithCustomSender(pin, &messages.FetchRequest{ID: 1, Hashes: []uint64{h}, Digests: []prefixhash.Digest{other}}, gpu)
	var g *messages.FetchGrant
	for g == nil {
		g, _ = recv(t, heard).(*messages.FetchGrant)
	}
	if len(g.Slots) != 1 {
		t.Fatalf("the other prefix's fetch: %+v", g)
	}
	sys.Root.Send(pin, &messages.FetchRelease{Slots: g.Slots})
	fillUntilEvicted(t, sys, dsk, h)
	if !pinnedHolds(t, sys, pin, h, other) {
		t.Fatalf("pinned memory does not hold the other prefix's block")
	}
	indexServes(t, sys, idx, h, messages.Pinned, "pinned memory (the other prefix's block)")
	if !heardBelowGone(t, sys, idx, gpu, heard, h) {
		t.Errorf("the GPU never heard BelowGone for hash %d: it keeps its block held below, though no tier below holds the victim's KV", h)
	}
}

// TestIndexRemovalBelowPinnedTellsTheGPU: the index's rule, message by
// message. A removal from pinned memory while the disk lists the hash is
// the block's move down: the GPU hears nothing, and keeps its copy marked
// held below. A removal from the disk while pinned memory lists the hash
// is a drop (pinned memory may hold another prefix's block under it): the
// GPU hears BelowGone. A removal from the disk of a hash it was not listed
// on tells nothing.
func TestIndexRemovalBelowPinnedTellsTheGPU(t *testing.T) {
	sys := actor.NewActorSystem()
	idx := sys.Root.Spawn(actor.PropsFromProducer(mustIndex(t, messages.Pinned, messages.Disk)))
	gpu, heard := gpuProbe(sys)
	sys.Root.Send(idx, &IndexWatch{GPU: gpu})
	update := func(tier messages.Tier, added, removed []uint64) {
		sys.Root.Send(idx, &messages.IndexUpdate{Tier: tier, Added: added, Remove: removed})
	}

	update(messages.Pinned, []uint64{1, 2}, nil)
	update(messages.Disk, []uint64{1}, nil)
	update(messages.Pinned, nil, []uint64{1}) // drained: on the disk now
	if heardBelowGone(t, sys, idx, gpu, heard, 1) {
		t.Errorf("a drain to the disk told the GPU BelowGone: it would write every drained block down again")
	}
	update(messages.Pinned, []uint64{1}, nil) // read up again, or another prefix's block
	update(messages.Disk, nil, []uint64{1})
	if !heardBelowGone(t, sys, idx, gpu, heard, 1) {
		t.Errorf("the disk dropped block 1 while pinned memory lists its hash: the GPU never heard BelowGone")
	}
	update(messages.Disk, nil, []uint64{2})
	if heardBelowGone(t, sys, idx, gpu, heard, 2) {
		t.Errorf("a removal from the disk of a hash only pinned memory lists told the GPU BelowGone")
	}
}

// TestSharedTierAndDiskUnderTwoDigests: the disk holds another prefix's
// block under hash 7 when the GPU fetches the victim's, which the disk
// misses and the shared tier serves into pinned memory; the GPU marks it
// held below. Pinned memory then drains it, to make room for another
// fetch. Whatever the disk does with it, the GPU keeps its mark only while
// a tier below holds the victim's digest.
func TestSharedTierAndDiskUnderTwoDigests(t *testing.T) {
	const h = 7
	sys, idx, dsk := indexAndDisk(t)
	lower := sys.Root.Spawn(actor.PropsFromProducer(NewLowerActor(dsk, sharedTierFake(sys), idx, zap.NewNop())))
	gpu, heard := gpuProbe(sys)
	pin := pinnedOver(t, sys, idx, lower, 1)
	defer sys.Root.Stop(pin)
	sys.Root.Send(idx, &IndexWatch{GPU: gpu, Pinned: pin})

	other := writeMsg(h)
	other.Items[0].Digest = digestOf(h + 1000)
	writeBelow(t, sys, dsk, other)
	told := false // the GPU heard BelowGone for h after the victim's fetch
	fetch := func(id, hash uint64, d prefixhash.Digest) {
		t.Helper()
		sys.Root.RequestWithCustomSender(pin, &messages.FetchRequest{ID: id, Hashes: []uint64{hash}, Digests: []prefixhash.Digest{d}}, gpu)
		var g *messages.FetchGrant
		for g == nil {
			switch m := recv(t, heard).(type) {
			case *messages.FetchGrant:
				g = m
			case *messages.BelowGone:
				told = told || (id > 1 && slices.Contains(m.Hashes, h))
			}
		}
		if len(g.Slots) != 1 {
			t.Fatalf("fetch of block %d: %+v", hash, g)
		}
		sys.Root.Send(pin, &messages.FetchRelease{Slots: g.Slots})
	}
	fetch(1, h, digestOf(h)) // the victim's, from the shared tier: held below from now on
	fetch(2, 8, digestOf(8)) // the one slot drains the victim's block first
	flush := &messages.Flush{Reply: make(chan error, 1)}
	sys.Root.Send(pin, flush)
	if err := recv(t, flush.Reply); err != nil {
		t.Fatal(err)
	}
	told = heardBelowGone(t, sys, idx, gpu, heard, h) || told
	onDisk := diskHolds(t, sys, dsk, h, digestOf(h))
	inPinned := pinnedHolds(t, sys, pin, h, digestOf(h))
	if !told && !onDisk && !inPinned {
		t.Errorf("the GPU keeps block %d held below, though neither pinned memory nor the disk holds the victim's digest", h)
	}
	t.Logf("told BelowGone: %v; victim's block on the disk: %v, in pinned memory: %v", told, onDisk, inPinned)
}

// sharedTierFake stands for the shared tier below the fan-out: it holds
// every block asked for and takes every write.
func sharedTierFake(sys *actor.ActorSystem) *actor.PID {
	return sys.Root.Spawn(actor.PropsFromFunc(func(c actor.Context) {
		switch m := c.Message().(type) {
		case *messages.LowerRead:
			ok := make([]bool, len(m.Items))
			for i, it := range m.Items {
				copy(it.Bytes, payloadOf(it.Hash))
				ok[i] = true
			}
			c.Respond(&messages.LowerReadDone{ID: m.ID, OK: ok, From: messages.Remote, Why: make([]messages.MissReason, len(ok))})
		case *messages.LowerWrite:
			w := &messages.LowerWriteDone{From: messages.Remote}
			for _, it := range m.Items {
				w.Slots, w.Written = append(w.Slots, it.Slot), append(w.Written, it.Hash)
			}
			c.Respond(w)
		}
	}))
}

// pinnedOver starts a pinned actor of slots slots over below (the disk or
// the fan-out), reporting to idx, one slot kept free ahead of need.
func pinnedOver(t *testing.T, sys *actor.ActorSystem, idx, below *actor.PID, slots int) *actor.PID {
	t.Helper()
	pool, err := pinned.New(pinned.Config{CapacityBytes: int64(slots) * testDiskPayload, SlotBytes: testDiskPayload})
	if err != nil {
		t.Fatal(err)
	}
	return sys.Root.Spawn(actor.PropsFromProducer(NewPinnedActor(PinnedConfig{Pool: pool, Index: idx, Disk: below, WriteQuota: 4, FreeTarget: 1})))
}

// fillUntilEvicted writes other blocks to the disk until its policy evicts
// the victim's block h.
func fillUntilEvicted(t *testing.T, sys *actor.ActorSystem, dsk *actor.PID, h uint64) {
	t.Helper()
	for i := uint64(1); diskHolds(t, sys, dsk, h, digestOf(h)); i++ {
		if i > 4*testDiskSlots {
			t.Fatalf("the disk never evicted block %d", h)
		}
		writeBelow(t, sys, dsk, writeMsg(1000+i))
	}
}

// diskHolds reports whether the disk holds block h of digest d.
func diskHolds(t *testing.T, sys *actor.ActorSystem, dsk *actor.PID, h uint64, d prefixhash.Digest) bool {
	t.Helper()
	q := &messages.LowerQuery{Kind: messages.QueryExists, Hashes: []uint64{h}, Digests: [][32]byte{d}, Reply: make(chan *messages.QueryResult, 1)}
	sys.Root.Send(dsk, q)
	return recv(t, q.Reply).Tokens.Of(messages.Disk) > 0
}

// pinnedHolds reports whether pinned memory holds block h of digest d.
func pinnedHolds(t *testing.T, sys *actor.ActorSystem, pin *actor.PID, h uint64, d prefixhash.Digest) bool {
	t.Helper()
	q := &messages.PinnedQuery{Kind: messages.QueryExists, Hashes: []uint64{h}, Digests: []prefixhash.Digest{d}, Reply: make(chan *messages.QueryResult, 1)}
	sys.Root.Send(pin, q)
	return recv(t, q.Reply).Tokens.Of(messages.Pinned) > 0
}

// indexServes fails the test unless the index serves hash h from tier
// alone (what names it in the message).
func indexServes(t *testing.T, sys *actor.ActorSystem, idx *actor.PID, h uint64, tier messages.Tier, what string) {
	t.Helper()
	r, err := sys.Root.RequestFuture(idx, &messages.Lookup{ID: 1, Chains: [][]uint64{{h}}}, testWait).Result()
	if err != nil {
		t.Fatal(err)
	}
	if got := r.(*messages.LookupResult).Tiers[0]; !slices.Equal(got, []messages.Tier{tier}) {
		t.Fatalf("the index serves hash %d from %v, want %s", h, got, what)
	}
}

// indexAndDisk starts an index over pinned memory and a disk, and a disk
// actor over a fresh store reporting to it, stopped when the test ends.
func indexAndDisk(t *testing.T) (*actor.ActorSystem, *actor.PID, *actor.PID) {
	t.Helper()
	sys := actor.NewActorSystem()
	idx := sys.Root.Spawn(actor.PropsFromProducer(mustIndex(t, messages.Pinned, messages.Disk)))
	dsk := diskOver(t, sys, idx, &disk.FaultFS{})
	t.Cleanup(func() { sys.Root.Stop(dsk) })
	return sys, idx, dsk
}
