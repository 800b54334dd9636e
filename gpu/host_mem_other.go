//go:build unix && !linux

package gpu

// systemMemoryLimit is unknown here; mmap alone decides.
func systemMemoryLimit() (uint64, bool) { return 0, false }

// SystemMemory is unknown here.
func SystemMemory() (uint64, bool) { return 0, false }
