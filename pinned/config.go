package pinned

import (
	"math"
	"os"
	"strconv"

	"github.com/kvtier/kvtier/policy"
)

// Key identifies a block: a chained block hash with the tenant salt in it.
type Key = policy.Key

// AllocFunc allocates bytes of host memory for a pool. It returns the memory
// (at least bytes long, starting on a page boundary), whether it is locked in
// RAM (pinned), and a function that releases it (nil if there is nothing to
// release). The pool calls free exactly once, from Close or from New when it
// rejects the memory.
type AllocFunc func(bytes int) (mem []byte, locked bool, free func() error, err error)

// Config describes a Pool. New validates it and never modifies it.
type Config struct {
	// CapacityBytes is the most memory the pool may map. The pool has
	// CapacityBytes / SlotStride slots (rounded down), which must be at least 1.
	CapacityBytes int64
	// SlotBytes is the size of one KV block. Each slot starts on a page
	// boundary, so slots are SlotBytes rounded up to the page size apart.
	SlotBytes int
	// Policy orders resident slots for eviction. The zero value means
	// policy.Adaptive (see package policy).
	Policy policy.Kind
	// Lock asks the default allocator to mlock the memory. Failure (for
	// example RLIMIT_MEMLOCK) is not an error: Locked reports it. Lock is
	// ignored when Alloc is set; Alloc reports locking itself.
	Lock bool
	// Alloc replaces the default allocator (anonymous mmap, plus mlock when
	// Lock is set). A pool whose slots are copied to and from a
	// gpu.Device's arena must pass DeviceAlloc(dev): the device's streams
	// refuse any other host memory with gpu.ErrNotPinned (on CUDA the
	// memory must come from cuMemAllocHost; the host backend enforces the
	// same rule).
	Alloc AllocFunc
}

// layout is a validated Config with its derived sizes.
type layout struct {
	slots     int
	slotBytes int
	stride    int
	pageSize  int
	kind      policy.Kind
}

// validate checks every field of c and returns the derived layout, or a
// *ConfigError for the first bad field.
func (c *Config) validate(pageSize int) (layout, error) {
	if c.SlotBytes <= 0 {
		return layout{}, &ConfigError{"SlotBytes", c.SlotBytes, "must be > 0"}
	}
	if c.CapacityBytes <= 0 {
		return layout{}, &ConfigError{"CapacityBytes", c.CapacityBytes, "must be > 0"}
	}
	kind := c.Policy
	if kind == 0 {
		kind = policy.Adaptive
	}
	if !kind.Valid() {
		return layout{}, &ConfigError{"Policy", c.Policy, "must be policy.LRU, policy.FIFO, policy.S3FIFO, policy.ARC or policy.Adaptive"}
	}
	if c.SlotBytes > math.MaxInt-pageSize {
		return layout{}, &ConfigError{"SlotBytes", c.SlotBytes, "too large"}
	}
	stride := strideOf(c.SlotBytes, pageSize)
	slots := c.CapacityBytes / int64(stride)
	if slots < 1 {
		return layout{}, &ConfigError{"CapacityBytes", c.CapacityBytes,
			"smaller than one page-aligned slot of " + strconv.Itoa(stride) + " bytes"}
	}
	if slots > math.MaxInt32 || slots > int64(math.MaxInt/stride) {
		return layout{}, &ConfigError{"CapacityBytes", c.CapacityBytes, "too many slots"}
	}
	return layout{slots: int(slots), slotBytes: c.SlotBytes, stride: stride, pageSize: pageSize, kind: kind}, nil
}

// pageSize is the host page size, a variable so tests can see it.
var pageSize = os.Getpagesize()

// SlotStride is the pinned memory one slot of slotBytes takes: slotBytes
// rounded up to whole pages, since slots are page aligned. A pool that must
// hold n blocks of slotBytes needs CapacityBytes = n × SlotStride(slotBytes).
func SlotStride(slotBytes int) int64 { return int64(strideOf(slotBytes, pageSize)) }

// strideOf rounds slotBytes up to a multiple of page.
func strideOf(slotBytes, page int) int { return (slotBytes + page - 1) / page * page }
