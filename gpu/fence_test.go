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
	f := NewHostFence()
	s, _ := checkOrdersCopyAfterCompute(t, d, f, f.Signal)
	s.Close()
}

// TestWaitFenceAbandonedAtClose: closing a stream that waits on a fence
// never signalled returns, and the batches behind it fail with
// ErrFenceAbandoned instead of copying unfinished KV.
func TestWaitFenceAbandonedAtClose(t *testing.T) {
	d := newTestDevice(t)
	s, host, marker, ev := behindFence(t, d, NewHostFence())
	returnsWithin(t, "closing a stream", s.Close)
	if err := waitDone(t, ev); !errors.Is(err, ErrFenceAbandoned) {
		t.Fatalf("batch behind an abandoned fence: %v, want ErrFenceAbandoned", err)
	}
	if !bytes.Equal(host, marker) {
		t.Fatal("a batch behind an abandoned fence copied")
	}
	if err := s.WaitFence(NewHostFence()); !errors.Is(err, ErrClosed) {
		t.Fatalf("WaitFence on a closed stream: %v", err)
	}
}

func TestWaitFenceRejectsNil(t *testing.T) {
	_, s := arenaStream(t, newTestDevice(t))
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
