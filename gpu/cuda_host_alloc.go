//go:build cuda

package gpu

// gorgonia.org/cu v0.9.6 wraps cuMemFreeHost but not cuMemAllocHost, so
// the allocation is one direct driver call.

/*
#cgo LDFLAGS: -lcuda
#cgo linux CFLAGS: -I/usr/local/cuda/include
#cgo linux LDFLAGS: -L/usr/local/cuda/lib64
#include <cuda.h>
*/
import "C"

import (
	"fmt"
	"unsafe"
)

// cuMemAllocHost allocates n bytes of page-locked host memory. The
// device's context must be current on the calling thread.
func cuMemAllocHost(n int) (unsafe.Pointer, error) {
	var p unsafe.Pointer
	switch r := C.cuMemAllocHost(&p, C.size_t(n)); r {
	case C.CUDA_SUCCESS:
	case C.CUDA_ERROR_OUT_OF_MEMORY:
		return nil, fmt.Errorf("%w: pinned host buffer: cuMemAllocHost(%d bytes): CUresult %d", ErrOutOfMemory, n, int(r))
	default:
		return nil, fmt.Errorf("kvtier: cuMemAllocHost(%d bytes): CUresult %d", n, int(r))
	}
	return p, nil
}
