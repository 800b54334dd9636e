package gpu

import (
	"errors"
	"testing"
)

// TestStreamCloseAbandonsEveryFenceItWaitsOn: a stream told to wait on
// two unsignalled SignalFences, f1 then f2, is closed. The SignalFence
// contract: "A stream of that device closed while it waits on the fence
// abandons it: every stream waiting on it is released, the batches behind
// it — on every such stream — fail with ErrFenceAbandoned". The CUDA
// backend does that for both (cudaStream.close abandons every fence in
// s.behind), and so does the host backend now. It abandoned only f1, the
// fence its worker was blocked on (review of 2026-11-27): it skipped f2's
// entry without abandoning f2, so another stream's copy behind f2 ran once
// f2 was signalled, where on CUDA it fails.
func TestStreamCloseAbandonsEveryFenceItWaitsOn(t *testing.T) {
	d := newTestDevice(t)
	l := testLayout(t)
	a, err := d.NewKVArena(l, 1)
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
	f1, err := NewSignalFence(d)
	if err != nil {
		t.Fatal(err)
	}
	f2, err := NewSignalFence(d)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []*SignalFence{f1, f2} {
		if err := closing.WaitFence(f); err != nil {
			t.Fatal(err)
		}
	}
	if err := other.WaitFence(f2); err != nil {
		t.Fatal(err)
	}
	ev, err := other.CopyD2H([]CopyOp{{Block: 0, Host: host[0]}})
	if err != nil {
		t.Fatal(err)
	}
	returnsWithin(t, "closing a stream", closing.Close)
	abandoned := f2.Abandoned()
	f2.Signal() // changes nothing once abandoned
	err = waitDone(t, ev)
	if !abandoned || !errors.Is(err, ErrFenceAbandoned) {
		t.Fatalf("%s backend: the second fence the closed stream waited on: abandoned %v; another stream's copy behind it: %v (want abandoned, ErrFenceAbandoned, as the CUDA backend answers)", Backend, abandoned, err)
	}
}
