//go:build cuda

package gpu

import "testing"

func TestCUDAName(t *testing.T) {
	if d := newTestDevice(t); d.Name() != "cuda:0" {
		t.Errorf("Name = %q", d.Name())
	}
}
