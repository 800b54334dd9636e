package kvtier

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestLookupCountsSharedTier: Lookup asks the shared tier, as an
// allocation does, for what the node's own tiers lack: a prompt another
// node computed is a Remote hit in Lookup, and the allocation that follows
// finds the same. Lookup left the shared tier out (it sent the index no
// digests), so a tensor-parallel group, which agrees its hit from Lookup,
// never used a block only the shared tier held.
func TestLookupCountsSharedTier(t *testing.T) {
	ctx := context.Background()
	for name, rc := range remoteAddrs(t) {
		t.Run(name, func(t *testing.T) {
			prefix := fmt.Sprintf("kvtier-test-%d", rand.Uint64())
			a := toks(700, 4*bt+1)
			computeOn(t, newManager(t, nodeConfig(rc, prefix, "m@1")), 1, a)
			n2 := newManager(t, nodeConfig(rc, prefix, "m@1"))
			l, err := n2.Lookup(ctx, LookupRequest{Tokens: a})
			if err != nil {
				t.Fatal(err)
			}
			if l.Tokens.Of(Remote) != 4*bt || l.Tokens.Sum() != 4*bt {
				t.Fatalf("Lookup on node 2: %v, want remote=%d", l.Tokens, 4*bt)
			}
			r, err := n2.Allocate(ctx, AllocRequest{Seq: 1, Tokens: a})
			if err != nil {
				t.Fatal(err)
			}
			wait(t, r)
			if r.Tokens != l.Tokens {
				t.Fatalf("Allocate found %v, Lookup said %v", r.Tokens, l.Tokens)
			}
			// Another tenant's lookup finds nothing there.
			if l, err := n2.Lookup(ctx, LookupRequest{Tokens: a, Salt: "other"}); err != nil || l.Tokens.Sum() != 0 {
				t.Fatalf("another tenant's Lookup: %v %v, want nothing", l.Tokens, err)
			}
		})
	}
}
