package gpu

import (
	"bytes"
	"errors"
	"testing"
	"time"
)

// The SignalFence tests run on both backends: on CUDA the stream waits on
// the device for an event behind a page-locked flag.

// TestSignalFenceOrdersCopyAfterCompute: a D2H behind an unsignalled
// SignalFence copies what the engine wrote before signalling, not what the
// block held when the copy was enqueued; a batch before the fence runs.
func TestSignalFenceOrdersCopyAfterCompute(t *testing.T) {
	d := newTestDevice(t)
	f, err := NewSignalFence(d)
	if err != nil {
		t.Fatal(err)
	}
	s, host := checkOrdersCopyAfterCompute(t, d, f, f.Signal)
	defer s.Close()
	if f.Abandoned() || !FenceDone(f) {
		t.Fatalf("signalled fence: abandoned %v, done %v", f.Abandoned(), FenceDone(f))
	}
	// Waiting on a fence already signalled costs nothing and holds nothing.
	if err := s.WaitFence(f); err != nil {
		t.Fatal(err)
	}
	ev, err := s.CopyD2H([]CopyOp{{Block: 1, Host: host[1]}})
	if err != nil {
		t.Fatal(err)
	}
	if err := waitDone(t, ev); err != nil {
		t.Fatal(err)
	}
}

// TestSignalFenceAbandonedAtStreamClose: closing a stream that waits on a
// SignalFence never signalled returns; the batch behind it fails with
// ErrFenceAbandoned, the fence says it was abandoned, and a later Signal
// changes nothing. On the host backend nothing is copied; on CUDA the
// device's wait is released so the stream drains, and the failed batch's
// bytes are the caller's to discard.
func TestSignalFenceAbandonedAtStreamClose(t *testing.T) {
	d := newTestDevice(t)
	f, err := NewSignalFence(d)
	if err != nil {
		t.Fatal(err)
	}
	s, host, marker, ev := behindFence(t, d, f)
	returnsWithin(t, "closing a stream", s.Close)
	if err := waitDone(t, ev); !errors.Is(err, ErrFenceAbandoned) {
		t.Fatalf("batch behind an abandoned fence: %v, want ErrFenceAbandoned", err)
	}
	if Backend == "host" && !bytes.Equal(host, marker) {
		t.Fatal("a batch behind an abandoned fence copied")
	}
	if !f.Abandoned() {
		t.Fatal("the fence does not say it was abandoned")
	}
	f.Signal()
	if FenceDone(f) {
		t.Fatal("Signal after abandonment marked the fence done")
	}
}

// TestSignalFenceAbandonedAtDeviceClose: Device.Close with a stream behind
// an unsignalled SignalFence returns instead of waiting for a signal that
// never comes, and the batch fails.
func TestSignalFenceAbandonedAtDeviceClose(t *testing.T) {
	d, err := Default()
	if err != nil {
		t.Fatal(err)
	}
	f, err := NewSignalFence(d)
	if err != nil {
		t.Fatal(err)
	}
	idle, err := NewSignalFence(d) // waited on by no stream
	if err != nil {
		t.Fatal(err)
	}
	_, _, _, ev := behindFence(t, d, f)
	returnsWithin(t, "Device.Close", d.Close)
	if err := waitDone(t, ev); err == nil {
		t.Fatal("a batch behind a fence abandoned by Device.Close succeeded")
	}
	idle.Signal() // after Close: harmless
	if _, err := NewSignalFence(d); !errors.Is(err, ErrClosed) && Backend == "cuda" {
		t.Fatalf("NewSignalFence on a closed CUDA device: %v, want ErrClosed", err)
	}
}

// TestCheckFence: no fence is fine everywhere; the host backend waits on
// any Fence; a CUDA stream only on a CUDAFence or SignalFence of its own
// device, and WaitFence refuses the others the same way; a wrapper that
// embeds the Device answers as it does.
func TestCheckFence(t *testing.T) {
	d := newTestDevice(t)
	var nilHost *HostFence
	if err := CheckFence(d, nil); err != nil {
		t.Errorf("CheckFence(nil) = %v", err)
	}
	if err := CheckFence(d, nilHost); err != nil {
		t.Errorf("CheckFence((*HostFence)(nil)) = %v", err)
	}
	own, err := NewSignalFence(d)
	if err != nil {
		t.Fatal(err)
	}
	defer own.Signal()
	if err := CheckFence(d, own); err != nil {
		t.Errorf("CheckFence(SignalFence of the device) = %v", err)
	}
	other := newHostForTest(t, HostConfig{})
	foreign, err := NewSignalFence(other)
	if err != nil {
		t.Fatal(err)
	}
	defer foreign.Signal()
	_, s := arenaStream(t, d)
	defer s.Close()
	for name, f := range map[string]Fence{"HostFence": NewHostFence(), "another device's SignalFence": foreign} {
		err := CheckFence(d, f)
		// A wrapper embedding the Device (as a user's instrumented device
		// does) answers as the device: CheckFence is part of Device.
		if werr := CheckFence(struct{ Device }{d}, f); (werr == nil) != (err == nil) {
			t.Errorf("CheckFence(%s) through a wrapper = %v, on the device = %v", name, werr, err)
		}
		switch Backend {
		case "cuda":
			if !errors.Is(err, ErrBadFence) {
				t.Errorf("CheckFence(%s) on CUDA = %v, want ErrBadFence", name, err)
			}
			if werr := s.WaitFence(f); !errors.Is(werr, ErrBadFence) {
				t.Errorf("WaitFence(%s) on CUDA = %v, want ErrBadFence", name, werr)
			}
		default:
			if err != nil {
				t.Errorf("CheckFence(%s) on the host backend = %v, want nil", name, err)
			}
		}
	}
	if _, err := NewSignalFence(nil); !errors.Is(err, ErrBadFence) {
		t.Errorf("NewSignalFence(nil) = %v, want ErrBadFence", err)
	}
}

// TestSignalFenceAbandonedReleasesOtherStreams: a fence one stream's close
// abandons releases every other stream waiting on it — their batches behind
// it fail rather than wait for a Signal that now changes nothing — and a
// later WaitFence on it is refused.
func TestSignalFenceAbandonedReleasesOtherStreams(t *testing.T) {
	d := newTestDevice(t)
	l := testLayout(t)
	a, err := d.NewKVArena(l, 2)
	if err != nil {
		t.Fatal(err)
	}
	closing, err := d.NewStream(a)
	if err != nil {
		t.Fatal(err)
	}
	other, err := d.NewStream(a)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	host := hostBlocks(t, d, 1, l.BlockBytes())
	f, err := NewSignalFence(d)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []Stream{closing, other} {
		if err := s.WaitFence(f); err != nil {
			t.Fatal(err)
		}
	}
	ev, err := other.CopyD2H([]CopyOp{{Block: 0, Host: host[0]}})
	if err != nil {
		t.Fatal(err)
	}
	if err := closing.Close(); err != nil {
		t.Fatal(err)
	}
	if err := waitDone(t, ev); !errors.Is(err, ErrFenceAbandoned) {
		t.Fatalf("another stream's batch behind the abandoned fence: %v, want ErrFenceAbandoned", err)
	}
	if err := other.WaitFence(f); !errors.Is(err, ErrFenceAbandoned) {
		t.Fatalf("WaitFence on an abandoned fence = %v, want ErrFenceAbandoned", err)
	}
}

// checkOrdersCopyAfterCompute checks that a D2H enqueued behind the
// unsignalled fence f copies what the engine wrote before signal, not what
// the block held when the copy was enqueued, and that a batch before the
// fence runs. It returns the stream (for the caller to close) and the two
// host blocks.
func checkOrdersCopyAfterCompute(t *testing.T, d Device, f Fence, signal func()) (Stream, [][]byte) {
	t.Helper()
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
	time.Sleep(50 * time.Millisecond) // room for a copy that does not wait to run
	if isDone(after) {
		t.Fatal("a batch behind an unsignalled fence completed")
	}
	want := make([]byte, l.BlockBytes())
	fillBlock(l, want, 42)
	if err := a.WriteBlock(1, 0, want); err != nil { // the engine's compute
		t.Fatal(err)
	}
	signal()
	signal() // idempotent
	if err := waitDone(t, after); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(host[1], want) {
		t.Fatal("the copy behind the fence did not read what was written before the signal")
	}
	return s, host
}

// behindFence makes a two-block arena on d and a stream waiting on f, with
// one D2H of block 0 enqueued behind it into a host block filled with
// marker bytes.
func behindFence(t *testing.T, d Device, f Fence) (s Stream, host, marker []byte, ev *Event) {
	t.Helper()
	l := testLayout(t)
	a, err := d.NewKVArena(l, 2)
	if err != nil {
		t.Fatal(err)
	}
	if s, err = d.NewStream(a); err != nil {
		t.Fatal(err)
	}
	host = hostBlocks(t, d, 1, l.BlockBytes())[0]
	marker = bytes.Repeat([]byte{0xAB}, l.BlockBytes())
	copy(host, marker)
	if err := s.WaitFence(f); err != nil {
		t.Fatal(err)
	}
	if ev, err = s.CopyD2H([]CopyOp{{Block: 0, Host: host}}); err != nil {
		t.Fatal(err)
	}
	return s, host, marker, ev
}

// returnsWithin runs close and fails the test if it has not returned, or
// returned an error, within 20 s; what names it in the failure.
func returnsWithin(t *testing.T, what string, close func() error) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- close() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("%s hangs on an unsignalled fence", what)
	}
}
