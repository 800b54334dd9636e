//go:build cuda

package gpu

import (
	"errors"
	"testing"
)

// TestCUDARejectsUnpinnedHost: the driver copies after the call returns, so
// Go memory must never reach it; the batch is rejected whole.
func TestCUDARejectsUnpinnedHost(t *testing.T) {
	d := newTestDevice(t)
	arena, err := d.NewArena(2, 4096)
	if err != nil {
		t.Fatal(err)
	}
	s, err := d.NewStream(arena)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	pinned := hostBlocks(t, d, 1, 4096)
	goMem := make([]byte, 4096)
	_, err = s.CopyD2H([]CopyOp{{0, pinned[0]}, {1, goMem}})
	var ce *CopyError
	if !errors.Is(err, ErrNotPinned) || !errors.As(err, &ce) || ce.Index != 1 {
		t.Errorf("error %v, want ErrNotPinned for op 1", err)
	}
	// Any sub-slice of a pinned buffer is accepted.
	big := hostBlocks(t, d, 2, 4096)
	if _, err := s.CopyH2D([]CopyOp{{0, big[1][:4096]}}); err != nil {
		t.Errorf("sub-slice of a pinned buffer rejected: %v", err)
	}
	if d.Name() != "cuda:0" {
		t.Errorf("Name = %q", d.Name())
	}
}
