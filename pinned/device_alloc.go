package pinned

import (
	"fmt"
	"math"
	"unsafe"

	"github.com/kvtier/kvtier/gpu"
)

// DeviceAlloc returns an AllocFunc that takes the pool's memory from
// dev.AllocHost: page-locked memory the device can copy to and from
// asynchronously (cuMemAllocHost on CUDA). A pool whose slots are copy
// targets of dev's streams must use it, because both gpu backends refuse
// host memory that does not come from the device's AllocHost
// (gpu.ErrNotPinned). Config.Lock is then ignored: the device locks the
// memory itself and the pool's Locked reports whether it did.
//
// The device must outlive the pool: closing it frees the memory, so Close
// or Discard the pool first.
func DeviceAlloc(dev gpu.Device) AllocFunc {
	return func(bytes int) ([]byte, bool, func() error, error) {
		buf, err := dev.AllocHost(bytes)
		if err != nil {
			return nil, false, nil, err
		}
		mem := buf.Bytes()
		if isPageAligned(mem) {
			return mem, buf.Pinned(), buf.Free, nil
		}
		// Both backends return page-aligned memory today; if one does not,
		// take a page more and start on a boundary inside it.
		if err := buf.Free(); err != nil {
			return nil, false, nil, err
		}
		page := pageSize
		if bytes > math.MaxInt-page {
			return nil, false, nil, fmt.Errorf("kvtier: pinned: %d bytes plus a page for alignment overflow", bytes)
		}
		if buf, err = dev.AllocHost(bytes + page); err != nil {
			return nil, false, nil, err
		}
		mem = buf.Bytes()
		skip := (page - int(uintptr(unsafe.Pointer(unsafe.SliceData(mem)))%uintptr(page))) % page
		return mem[skip : skip+bytes : skip+bytes], buf.Pinned(), buf.Free, nil
	}
}

func isPageAligned(b []byte) bool {
	return uintptr(unsafe.Pointer(unsafe.SliceData(b)))%uintptr(pageSize) == 0
}
