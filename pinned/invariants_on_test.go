//go:build invariants

package pinned

import (
	"testing"

	"github.com/kvtier/kvtier/policy"
)

// With the invariants tag, the first call after a corruption panics.
func TestInvariantsTagPanics(t *testing.T) {
	p := newPool(t, 2, 64, policy.LRU)
	put(t, p, 1)
	p.pol.Remove(1)
	mustPanic(t, "Reserve on a corrupt pool", func() { _, _ = p.Reserve(2) })
}
