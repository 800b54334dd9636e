//go:build !invariants

package disk

// invariants is true in builds with the invariants tag, which check the
// whole store after every completion.
const invariants = false
