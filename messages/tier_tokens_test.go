package messages

import "testing"

// TestTierIndex: Index numbers the single tiers top first, TierAt undoes it,
// and a set of tiers, or none, has no index.
func TestTierIndex(t *testing.T) {
	for i, tier := range []Tier{GPU, Pinned, Disk, Remote} {
		if got := tier.Index(); got != i {
			t.Errorf("%v.Index() = %d, want %d", tier, got, i)
		}
		if got := TierAt(i); got != tier {
			t.Errorf("TierAt(%d) = %v, want %v", i, got, tier)
		}
	}
	for _, bad := range []Tier{0, GPU | Pinned, Disk | Remote, 1 << NumTiers} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Tier(%d).Index() did not panic", uint8(bad))
				}
			}()
			bad.Index()
		}()
	}
}

func TestTierTokens(t *testing.T) {
	var c TierTokens
	c[GPU.Index()] = 16
	c[Disk.Index()] = 32
	c[Remote.Index()] = 8
	if c.Of(GPU) != 16 || c.Of(Pinned) != 0 || c.Of(Disk) != 32 || c.Of(Remote) != 8 {
		t.Errorf("Of: %v", c)
	}
	if c.Below() != 40 || c.Sum() != 56 {
		t.Errorf("Below %d, Sum %d; want 40, 56", c.Below(), c.Sum())
	}
	if got, want := c.String(), "gpu=16 pinned=0 disk=32 remote=8"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
}
