//go:build linux

package gpu

import "golang.org/x/sys/unix"

// systemMemoryLimit returns the machine's RAM plus swap in bytes: no anonymous
// mapping larger than that can ever be backed.
func systemMemoryLimit() (uint64, bool) {
	var si unix.Sysinfo_t
	if unix.Sysinfo(&si) != nil {
		return 0, false
	}
	unit := uint64(si.Unit)
	if unit == 0 {
		unit = 1
	}
	return (uint64(si.Totalram) + uint64(si.Totalswap)) * unit, true
}

// SystemMemory returns the machine's RAM plus swap in bytes (false where it
// is unknown): no allocation larger than that can ever be backed.
func SystemMemory() (uint64, bool) { return systemMemoryLimit() }
