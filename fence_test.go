package kvtier

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/kvtier/kvtier/gpu"
)

// TestCommitAfterFence: a commit naming a fence makes the blocks hits at
// once, but the write-through to pinned memory waits for the fence, so it
// copies what the engine wrote before signalling — here, written after the
// commit returned. Without the wait, Flush would finish before the signal.
func TestCommitAfterFence(t *testing.T) {
	ctx := context.Background()
	m := newManager(t, Config{GPUBlocks: 8, PinnedBytes: 1 << 20, Ingestion: IngestAll})
	a := toks(7, 2*bt+1)
	r, err := m.Allocate(ctx, AllocRequest{Seq: 1, Tokens: a})
	if err != nil {
		t.Fatal(err)
	}
	wait(t, r)
	f := signalFence(t, m)
	errs, err := m.CommitBatch(ctx, []CommitItem{{Seq: 1, Tokens: AllTokens, After: f}})
	if err != nil || errs[0] != nil {
		t.Fatal(err, errs)
	}
	if lr, err := m.Lookup(ctx, LookupRequest{Tokens: a}); err != nil || lr.Tokens.Of(GPU) != 2*bt {
		t.Fatalf("committed blocks are not hits before the fence: %+v %v", lr, err)
	}
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if err := m.Flush(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Flush before the fence is signalled = %v: the write-through did not wait", err)
	}
	if p, _ := m.Exists(ctx, a, ""); p.Tokens.Of(Pinned) != 0 {
		t.Fatalf("pinned memory holds %d tokens before the fence", p.Tokens.Of(Pinned))
	}
	writeBlocks(t, m, r.Blocks, a, "") // the engine's compute, after its commit
	f.Signal()
	if err := m.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if p, _ := m.Exists(ctx, a, ""); p.Tokens.Of(Pinned) != 2*bt {
		t.Fatalf("pinned holds %d tokens after the fence, want %d", p.Tokens.Of(Pinned), 2*bt)
	}
	if err := m.Free(ctx, 1); err != nil {
		t.Fatal(err)
	}
	evictAll(t, m, 8)
	r, err = m.Allocate(ctx, AllocRequest{Seq: 2, Tokens: a})
	if err != nil {
		t.Fatal(err)
	}
	if out := wait(t, r); out.ValidTokens != 2*bt {
		t.Fatalf("onboard from pinned: %+v", out)
	}
	checkBlocks(t, m, r.Blocks, a, "", 2)
}

// TestCloseWithUnsignalledFence: a fence the engine never signals holds
// Close's flush only until Close's context ends; Close then returns, and
// the copy behind the fence is dropped, not made.
func TestCloseWithUnsignalledFence(t *testing.T) {
	ctx := context.Background()
	m := newManager(t, Config{GPUBlocks: 8, PinnedBytes: 1 << 20, Ingestion: IngestAll})
	a := toks(7, 2*bt)
	r, err := m.Allocate(ctx, AllocRequest{Seq: 1, Tokens: a})
	if err != nil {
		t.Fatal(err)
	}
	wait(t, r)
	if errs, err := m.CommitBatch(ctx, []CommitItem{{Seq: 1, Tokens: AllTokens, After: signalFence(t, m)}}); err != nil || errs[0] != nil {
		t.Fatal(err, errs)
	}
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- m.Close(short) }()
	select {
	case err := <-done:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Close = %v, want its flush cut short by the deadline", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Close hangs on an unsignalled fence")
	}
}

// signalFence returns an unsignalled fence that m's device's streams can
// wait on, on either backend (the engine's stand-in for its forward pass).
func signalFence(t *testing.T, m *Manager) *gpu.SignalFence {
	t.Helper()
	f, err := gpu.NewSignalFence(m.device)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Signal)
	return f
}

// TestCommitRefusesFenceTheDeviceCannotWaitOn: an item whose fence the
// device's copy stream cannot wait on (on CUDA, anything but a CUDAFence or
// SignalFence of the Manager's device) fails with gpu.ErrBadFence and
// commits nothing — its blocks are not hits — while the batch's other
// items commit. The host backend waits on any fence, so there it commits.
func TestCommitRefusesFenceTheDeviceCannotWaitOn(t *testing.T) {
	ctx := context.Background()
	m := newManager(t, Config{GPUBlocks: 8, PinnedBytes: 1 << 20, Ingestion: IngestAll})
	a, b := toks(7, 2*bt), toks(900, 2*bt)
	for seq, tk := range map[uint64][]int64{1: a, 2: b} {
		r, err := m.Allocate(ctx, AllocRequest{Seq: seq, Tokens: tk})
		if err != nil {
			t.Fatal(err)
		}
		wait(t, r)
	}
	other, err := gpu.NewHost(gpu.HostConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	foreign, err := gpu.NewSignalFence(other)
	if err != nil {
		t.Fatal(err)
	}
	defer foreign.Signal()
	hf := gpu.NewHostFence()
	defer hf.Signal() // the host backend commits behind it: Close's flush waits for it
	bad := gpu.Fence(hf)
	if gpu.Backend == "cuda" {
		bad = foreign
	}
	errs, err := m.CommitBatch(ctx, []CommitItem{{Seq: 1, Tokens: AllTokens, After: bad}, {Seq: 2, Tokens: AllTokens}})
	if err != nil {
		t.Fatal(err)
	}
	if errs[1] != nil {
		t.Fatalf("the good item: %v", errs[1])
	}
	la, err := m.Lookup(ctx, LookupRequest{Tokens: a})
	if err != nil {
		t.Fatal(err)
	}
	if gpu.Backend == "cuda" {
		if !errors.Is(errs[0], gpu.ErrBadFence) {
			t.Fatalf("commit with a fence CUDA cannot wait on = %v, want gpu.ErrBadFence", errs[0])
		}
		if la.Tokens.Of(GPU) != 0 {
			t.Fatalf("a refused commit made %d tokens hits", la.Tokens.Of(GPU))
		}
	} else if errs[0] != nil || la.Tokens.Of(GPU) != 2*bt {
		t.Fatalf("host backend: commit = %v, hits %d, want nil and %d", errs[0], la.Tokens.Of(GPU), 2*bt)
	}
	if lb, err := m.Lookup(ctx, LookupRequest{Tokens: b}); err != nil || lb.Tokens.Of(GPU) != 2*bt {
		t.Fatalf("the good item's blocks are not hits: %+v %v", lb, err)
	}
}

// refusingDevice is a host device whose streams, as CUDA's do, refuse to
// wait on a HostFence.
type refusingDevice struct{ gpu.Device }

func (refusingDevice) CheckFence(f gpu.Fence) error {
	if _, ok := f.(*gpu.HostFence); ok {
		return gpu.ErrBadFence
	}
	return nil
}

// TestStepRefusesFenceTheDeviceCannotWaitOn: Step checks its commits'
// fences as CommitBatch does — the item with a fence the device refuses
// fails with gpu.ErrBadFence and commits nothing, the others commit, and
// the answers stay in item order. Before, Step sent them unchecked and
// such blocks became hits whose write-down could never wait on the fence.
func TestStepRefusesFenceTheDeviceCannotWaitOn(t *testing.T) {
	ctx := context.Background()
	inner, err := gpu.NewHost(gpu.HostConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer inner.Close()
	m := newManager(t, Config{GPUBlocks: 8, Device: refusingDevice{inner}})
	a, b, c := toks(7, 2*bt), toks(900, 2*bt), toks(1800, bt)
	for seq, tk := range map[uint64][]int64{1: a, 2: b, 3: c} {
		r, err := m.Allocate(ctx, AllocRequest{Seq: seq, Tokens: tk})
		if err != nil {
			t.Fatal(err)
		}
		wait(t, r)
	}
	hf := gpu.NewHostFence()
	defer hf.Signal()
	res, err := m.Step(ctx, StepRequest{Commit: []CommitItem{{Seq: 1, Tokens: AllTokens}, {Seq: 2, Tokens: AllTokens, After: hf}, {Seq: 3, Tokens: AllTokens}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.CommitErrs) != 3 || res.CommitErrs[0] != nil || !errors.Is(res.CommitErrs[1], gpu.ErrBadFence) || res.CommitErrs[2] != nil {
		t.Fatalf("step commits: %v, want the second refused with ErrBadFence", res.CommitErrs)
	}
	for _, tc := range []struct {
		tokens []int64
		want   int
	}{{a, 2 * bt}, {b, 0}, {c, bt}} {
		l, err := m.Lookup(ctx, LookupRequest{Tokens: tc.tokens})
		if err != nil {
			t.Fatal(err)
		}
		if got := l.Tokens.Of(GPU); got != tc.want {
			t.Errorf("lookup of a %d-token prompt: %d GPU tokens, want %d", len(tc.tokens), got, tc.want)
		}
	}
}

// TestParkedAllocationHonoursItsContext: an allocation short of blocks only
// because write-downs behind an unsignalled fence pin them is parked in the
// GPU actor; when its caller's context ends it is answered with
// ErrCanceled, having changed nothing, instead of waiting for the fence.
// Before, it returned only once the fence signalled.
func TestParkedAllocationHonoursItsContext(t *testing.T) {
	ctx := context.Background()
	m := newManager(t, Config{GPUBlocks: 4, PinnedBytes: 1 << 20, OffloadThreshold: 0.1, OffloadAhead: 4})
	r, err := m.Allocate(ctx, AllocRequest{Seq: 1, Tokens: toks(100, 2*bt)})
	if err != nil {
		t.Fatal(err)
	}
	wait(t, r)
	f := signalFence(t, m)
	if errs, err := m.CommitBatch(ctx, []CommitItem{{Seq: 1, Tokens: AllTokens, After: f}}); err != nil || errs[0] != nil {
		t.Fatal(err, errs)
	}
	if err := m.Free(ctx, 1); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() { _, err := m.Allocate(short, AllocRequest{Seq: 2, Tokens: toks(900, 4*bt)}); done <- err }()
	select {
	case err := <-done:
		if !errors.Is(err, ErrCanceled) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("parked allocation after its context ended: %v, want ErrCanceled wrapping the context's error", err)
		}
	case <-time.After(20 * time.Second):
		f.Signal()
		t.Fatal("a parked allocation ignored its context: it waited for the fence")
	}
	f.Signal()
	// Nothing of it took effect: sequence 2 is free to allocate.
	r, err = m.Allocate(ctx, AllocRequest{Seq: 2, Tokens: toks(900, 4*bt)})
	if err != nil {
		t.Fatalf("allocating sequence 2 after the withdrawn attempt: %v", err)
	}
	wait(t, r)
}
