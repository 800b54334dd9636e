package kvtier

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvtier/kvtier/gpu"
)

// panicDevice is a device whose streams panic on CopyD2H once armed: a
// defect reached on the GPU actor's goroutine (the first run on a GPU found
// one in a CUDA binding).
type panicDevice struct {
	gpu.Device
	arm *atomic.Bool
}

func (d panicDevice) NewStream(a gpu.Arena) (gpu.Stream, error) {
	s, err := d.Device.NewStream(a)
	if err != nil {
		return nil, err
	}
	return panicStream{s, d.arm}, nil
}

type panicStream struct {
	gpu.Stream
	arm *atomic.Bool
}

func (s panicStream) CopyD2H(ops []gpu.CopyOp) (*gpu.Event, error) {
	if s.arm.Load() {
		panic("test: a copy's enqueue panics")
	}
	return s.Stream.CopyD2H(ops)
}

// TestGPUActorFailureFailsCalls: when the GPU actor panics half-way
// through an event, the calls waiting on it and every later call fail with
// ErrFailed, and Close returns, instead of each waiting for ever on a tier
// whose books a restarted actor had lost (a fresh tier over the same pool
// answered nothing of what the old one owed).
func TestGPUActorFailureFailsCalls(t *testing.T) {
	ctx := context.Background()
	inner, err := gpu.NewHost(gpu.HostConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer inner.Close()
	arm := new(atomic.Bool)
	m, err := New(Config{GPUBlocks: 8, BlockTokens: bt, PinnedBytes: 1 << 20, Ingestion: IngestAll,
		Device: panicDevice{inner, arm}})
	if err != nil {
		t.Fatal(err)
	}
	a := toks(7, 2*bt)
	r, err := m.Allocate(ctx, AllocRequest{Seq: 1, Tokens: a})
	if err != nil {
		t.Fatal(err)
	}
	wait(t, r)
	arm.Store(true)
	bounded, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	// The commit writes its blocks through to pinned memory: the copy's
	// enqueue panics on the actor.
	if _, err := m.CommitBatch(bounded, []CommitItem{{Seq: 1, Tokens: AllTokens}}); err != nil && !errors.Is(err, ErrFailed) {
		t.Fatalf("the commit whose copy panicked: %v, want its result or ErrFailed", err)
	}
	if err := m.Flush(bounded); !errors.Is(err, ErrFailed) {
		t.Fatalf("Flush after the failure = %v, want ErrFailed", err)
	}
	if _, err := m.Allocate(bounded, AllocRequest{Seq: 2, Tokens: toks(100, bt)}); !errors.Is(err, ErrFailed) {
		t.Fatalf("Allocate after the failure = %v, want ErrFailed", err)
	}
	closed := make(chan error, 1)
	go func() { closed <- m.Close(ctx) }()
	select {
	case err := <-closed:
		if !errors.Is(err, ErrFailed) {
			t.Fatalf("Close = %v, want it to report ErrFailed", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Close hangs after the GPU actor failed")
	}
	if _, err := m.Stats(ctx); !errors.Is(err, ErrClosed) {
		t.Fatalf("a call after Close = %v, want ErrClosed", err)
	}
}

// panicClock is a Config.Clock that panics once armed: a second panic that
// the failure handling itself would meet (the GPU actor reads the clock on
// every message).
type panicClock struct{ arm atomic.Bool }

func (c *panicClock) Now() time.Time {
	if c.arm.Load() {
		panic("test: the clock panics")
	}
	return time.Now()
}

// TestGPUActorFailureSurvivesASecondPanic: the failure is recorded and the
// Manager told before anything that can panic again runs, so a call gets
// ErrFailed. Before, the restart handler read the panicking clock first, and
// the supervisor restarted the actor for ever on the caller's goroutine.
func TestGPUActorFailureSurvivesASecondPanic(t *testing.T) {
	clk := new(panicClock)
	m, err := New(Config{GPUBlocks: 8, BlockTokens: bt, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := m.Stats(ctx); err != nil {
		t.Fatal(err)
	}
	clk.arm.Store(true)
	// The context bounds a failure that is never reported; 2 s could end
	// before a restart on a loaded machine under -race reported it.
	bounded, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	got := make(chan error, 1)
	go func() { _, err := m.Stats(bounded); got <- err }()
	select {
	case err := <-got:
		if !errors.Is(err, ErrFailed) {
			t.Fatalf("a call on the GPU actor that panicked = %v, want ErrFailed", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a call whose context ended 20 s ago has not returned")
	}
	clk.arm.Store(false)
	if err := m.Close(ctx); !errors.Is(err, ErrFailed) {
		t.Fatalf("Close = %v, want it to report ErrFailed", err)
	}
}
