package kvtier

import (
	"context"
	"testing"

	"github.com/kvtier/kvtier/gpu"
)

// TestDeviceForFences: an engine outside the package makes its commit fences
// for the Manager's device, which Device returns: the one New opened when
// Config.Device is nil, Config.Device otherwise. On CUDA a stream waits only
// on fences of its own device (gpu.ErrBadFence otherwise), and without this
// accessor a Manager that opened its own device offered no way to make one:
// the device was reachable only inside the package.
func TestDeviceForFences(t *testing.T) {
	ctx := context.Background()
	m := newManager(t, Config{GPUBlocks: 8, PinnedBytes: 1 << 20, Ingestion: IngestAll})
	d := m.Device()
	if d == nil || d != m.device {
		t.Fatalf("Device() = %v, want the Manager's own device %v", d, m.device)
	}
	f, err := gpu.NewSignalFence(d)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Signal()
	if err := gpu.CheckFence(d, f); err != nil {
		t.Fatalf("a SignalFence of Device(): %v", err)
	}
	tk := toks(7, 2*bt)
	r, err := m.Allocate(ctx, AllocRequest{Seq: 1, Tokens: tk})
	if err != nil {
		t.Fatal(err)
	}
	wait(t, r)
	errs, err := m.CommitBatch(ctx, []CommitItem{{Seq: 1, Tokens: AllTokens, After: f}})
	if err != nil || errs[0] != nil {
		t.Fatalf("CommitBatch behind a fence of Device(): %v %v", err, errs)
	}
	f.Signal()
	if err := m.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	p, err := m.Exists(ctx, tk, "")
	if err != nil || p.Tokens.Of(GPU) != len(tk) || p.Tokens.Of(Pinned) != len(tk) {
		t.Fatalf("after the fence: %v %v, want the chain on the GPU and, written through, in pinned memory", p.Tokens, err)
	}

	own, err := gpu.NewHost(gpu.HostConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer own.Close()
	m2 := newManager(t, Config{GPUBlocks: 8, Device: own})
	if m2.Device() != own {
		t.Fatal("Device() is not Config.Device")
	}
}
