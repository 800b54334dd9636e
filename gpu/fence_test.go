//go:build !cuda

package gpu

import (
	"bytes"
	"errors"
	"testing"
)

// TestWaitFenceOrdersCopyAfterCompute: a D2H enqueued behind an unsignalled
// fence copies what the engine wrote before signalling, not what the block
// held when the copy was enqueued; batches enqueued before the fence run.
func TestWaitFenceOrdersCopyAfterCompute(t *testing.T) {
	d := newTestDevice(t)
	l := testLayout(t)
	a, err := d.NewKVArena(l, 4)
	if err != nil {
		t.Fatal(err)
	}
	s, err := d.NewStream(a)
	if err != nil {
		t.Fatal(err)
	}
	host := hostBlocks(t, d, 2, l.BlockBytes())
	before, err := s.CopyD2H([]CopyOp{{Block: 0, Host: host[0]}})
	if err != nil {
		t.Fatal(err)
	}
	f := NewHostFence()
	if err := s.WaitFence(f); err != nil {
		t.Fatal(err)
	}
	after, err := s.CopyD2H([]CopyOp{{Block: 1, Host: host[1]}})
	if err != nil {
		t.Fatal(err)
	}
	if err := waitDone(t, before); err != nil {
		t.Fatalf("a batch enqueued before the fence: %v", err)
	}
	if isDone(after) {
		t.Fatal("a batch behind an unsignalled fence completed")
	}
	// The engine's compute: it writes block 1, then signals.
	want := make([]byte, l.BlockBytes())
	fillBlock(l, want, 42)
	if err := a.WriteBlock(1, 0, want); err != nil {
		t.Fatal(err)
	}
	f.Signal()
	f.Signal() // idempotent
	if err := waitDone(t, after); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(host[1], want) {
		t.Fatal("the copy behind the fence did not read what was written before the signal")
	}
}

// TestWaitFenceAbandonedAtClose: closing a stream that waits on a fence
// never signalled returns, and the batches behind it fail with
// ErrFenceAbandoned instead of copying unfinished KV.
func TestWaitFenceAbandonedAtClose(t *testing.T) {
	d := newTestDevice(t)
	l := testLayout(t)
	a, err := d.NewKVArena(l, 2)
	if err != nil {
		t.Fatal(err)
	}
	s, err := d.NewStream(a)
	if err != nil {
		t.Fatal(err)
	}
	host := hostBlocks(t, d, 1, l.BlockBytes())
	marker := bytes.Repeat([]byte{0xAB}, l.BlockBytes())
	copy(host[0], marker)
	if err := s.WaitFence(NewHostFence()); err != nil {
		t.Fatal(err)
	}
	ev, err := s.CopyD2H([]CopyOp{{Block: 0, Host: host[0]}})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := waitDone(t, ev); !errors.Is(err, ErrFenceAbandoned) {
		t.Fatalf("batch behind an abandoned fence: %v, want ErrFenceAbandoned", err)
	}
	if !bytes.Equal(host[0], marker) {
		t.Fatal("a batch behind an abandoned fence copied")
	}
	if err := s.WaitFence(NewHostFence()); !errors.Is(err, ErrClosed) {
		t.Fatalf("WaitFence on a closed stream: %v", err)
	}
}

func TestWaitFenceRejectsNil(t *testing.T) {
	d := newTestDevice(t)
	a, err := d.NewArena(1, 4096)
	if err != nil {
		t.Fatal(err)
	}
	s, err := d.NewStream(a)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.WaitFence(nil); !errors.Is(err, ErrBadFence) {
		t.Fatalf("WaitFence(nil) = %v, want ErrBadFence", err)
	}
	if !FenceDone(nil) {
		t.Fatal("a nil fence is done")
	}
}

// TestTypedNilFence: a nil *HostFence where a Fence goes is no fence —
// FenceDone says done, a host stream refuses to wait on it (ErrBadFence, as
// the CUDA stream does) — instead of a nil dereference on the stream's
// worker that killed the process.
func TestTypedNilFence(t *testing.T) {
	var f *HostFence
	if !FenceDone(f) {
		t.Error("FenceDone((*HostFence)(nil)) = false, want done")
	}
	_, s := arenaStream(t, newHostForTest(t, HostConfig{}))
	defer s.Close()
	if err := s.WaitFence(f); !errors.Is(err, ErrBadFence) {
		t.Errorf("WaitFence((*HostFence)(nil)) = %v, want ErrBadFence", err)
	}
}
