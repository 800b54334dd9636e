//go:build unix && !linux

package gpu

// systemMemoryLimit is unknown here; mmap alone decides.
func systemMemoryLimit() (uint64, bool) { return 0, false }
