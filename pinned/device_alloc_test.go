package pinned

import (
	"context"
	"errors"
	"testing"

	"github.com/kvtier/kvtier/gpu"
	"github.com/kvtier/kvtier/policy"
)

// A pool whose memory comes from the device is a valid copy target of the
// device's streams; one with the default mmap is refused, as a GPU would
// refuse it. This is what breaks if a caller forgets DeviceAlloc.
func TestDeviceAllocSlotsAreCopyTargets(t *testing.T) {
	dev, err := gpu.NewHost(gpu.HostConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	const blockBytes = 3000 // not a page multiple: slots have gaps
	arena, err := dev.NewArena(2, blockBytes)
	if err != nil {
		t.Fatal(err)
	}
	stream, err := dev.NewStream(arena)
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	if err := arena.WriteBlock(1, 0, []byte("block one")); err != nil {
		t.Fatal(err)
	}

	p, err := New(Config{CapacityBytes: int64(4 * pageSize), SlotBytes: blockBytes, Alloc: DeviceAlloc(dev)})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("device pool locked: %v", p.Locked())
	slots := []int{put(t, p, 1), put(t, p, 2), put(t, p, 3), put(t, p, 4)}
	for _, s := range slots {
		ev, err := stream.CopyD2H([]gpu.CopyOp{{Block: 1, Host: p.Bytes(s)}})
		if err != nil {
			t.Fatalf("D2H into slot %d: %v", s, err)
		}
		if err := ev.Wait(context.Background()); err != nil {
			t.Fatal(err)
		}
		if got := string(p.Bytes(s)[:9]); got != "block one" {
			t.Fatalf("slot %d holds %q", s, got)
		}
	}
	old := p.Bytes(slots[0])
	for k := Key(1); k <= 4; k++ {
		p.Remove(k)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	// Close gave the memory back to the device, which now refuses it
	// (without touching it: the batch is rejected before anything runs).
	if _, err := stream.CopyD2H([]gpu.CopyOp{{Block: 1, Host: old}}); !errors.Is(err, gpu.ErrNotPinned) {
		t.Errorf("copy into a closed pool's memory: %v, want ErrNotPinned", err)
	}

	plain := newPool(t, 1, blockBytes, policy.LRU)
	s := put(t, plain, 1)
	if _, err := stream.CopyH2D([]gpu.CopyOp{{Block: 0, Host: plain.Bytes(s)}}); !errors.Is(err, gpu.ErrNotPinned) {
		t.Errorf("copy from a default (mmap) pool: %v, want ErrNotPinned", err)
	}
}

func TestDeviceAllocOutOfMemory(t *testing.T) {
	dev, err := gpu.NewHost(gpu.HostConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	p, err := New(Config{CapacityBytes: 1 << 48, SlotBytes: 1 << 24, Alloc: DeviceAlloc(dev)})
	if !errors.Is(err, ErrAlloc) || !errors.Is(err, gpu.ErrOutOfMemory) || p != nil {
		t.Fatalf("New of 1<<48 device bytes = %v, %v; want ErrAlloc wrapping gpu.ErrOutOfMemory", p, err)
	}
	t.Log(err)
}
