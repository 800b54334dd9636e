//go:build cuda

package gpu

// Driver calls that gorgonia.org/cu v0.9.6 does not wrap usably:
// cu.Memcpy2DAsync dereferences the CUDA arrays of its parameter even when
// the copy names none (it panics on every pointer-to-pointer 2D copy), and
// cu's cuStreamWaitValue32 is the v1 entry point, which drivers leave
// disabled by default.

/*
#cgo LDFLAGS: -lcuda
#cgo linux CFLAGS: -I/usr/local/cuda/include
#cgo linux LDFLAGS: -L/usr/local/cuda/lib64
#include <cuda.h>
#include <string.h>

static CUresult kvtier_memcpy2d(int d2h, CUdeviceptr dev, size_t devPitch,
		void *host, size_t width, size_t height, CUstream s) {
	CUDA_MEMCPY2D p;
	memset(&p, 0, sizeof p);
	p.WidthInBytes = width;
	p.Height = height;
	if (d2h) {
		p.srcMemoryType = CU_MEMORYTYPE_DEVICE; p.srcDevice = dev; p.srcPitch = devPitch;
		p.dstMemoryType = CU_MEMORYTYPE_HOST; p.dstHost = host; p.dstPitch = width;
	} else {
		p.srcMemoryType = CU_MEMORYTYPE_HOST; p.srcHost = host; p.srcPitch = width;
		p.dstMemoryType = CU_MEMORYTYPE_DEVICE; p.dstDevice = dev; p.dstPitch = devPitch;
	}
	return cuMemcpy2DAsync(&p, s);
}
*/
import "C"

import (
	"fmt"
	"unsafe"

	"gorgonia.org/cu"
)

// cStream is s's CUstream handle: a cu.Stream is a struct holding that one
// pointer (what cu.Stream.C returns, as cu's own C type).
func cStream(s cu.Stream) C.CUstream { return *(*C.CUstream)(unsafe.Pointer(&s)) }

// cuResult turns a CUresult into an error naming the call.
func cuResult(call string, r C.CUresult) error {
	if r == C.CUDA_SUCCESS {
		return nil
	}
	return fmt.Errorf("kvtier: %s: CUresult %d", call, int(r))
}

// memcpy2DAsync copies height rows of width bytes between the device, rows
// devPitch apart, and the host, rows packed, on stream s: one gather (D2H)
// or scatter (H2D) of a layer-separate block. The context must be current.
func memcpy2DAsync(dir Direction, dev cu.DevicePtr, devPitch int64, host unsafe.Pointer, width, height int64, s cu.Stream) error {
	d2h := C.int(0)
	if dir == D2H {
		d2h = 1
	}
	return cuResult("cuMemcpy2DAsync", C.kvtier_memcpy2d(d2h, C.CUdeviceptr(dev), C.size_t(devPitch),
		host, C.size_t(width), C.size_t(height), cStream(s)))
}

// streamWaitFlag makes s wait on the device until the 32-bit word at host
// (page-locked memory from cuMemAllocHost) is at least 1. The context must
// be current.
func streamWaitFlag(s cu.Stream, host unsafe.Pointer) error {
	var dptr C.CUdeviceptr
	if err := cuResult("cuMemHostGetDevicePointer", C.cuMemHostGetDevicePointer(&dptr, host, 0)); err != nil {
		return err
	}
	return cuResult("cuStreamWaitValue32_v2", C.cuStreamWaitValue32_v2(cStream(s), dptr, 1, C.CU_STREAM_WAIT_VALUE_GEQ))
}
