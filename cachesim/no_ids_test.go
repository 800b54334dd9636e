package cachesim

import (
	"testing"

	"github.com/kvtier/kvtier/policy"
	"github.com/kvtier/kvtier/trace"
)

// TestRequestWithoutIDsHitsNoToken: a request built with an InputLength
// but no hash ids (trace.Read refuses one; a caller's own generator need
// not) has no block to find, so none of its tokens is a hit. Every block of
// it "hit" (0 of 0), and its whole prompt counted as hit tokens in
// Simulate, OPT and Infinite: a token hit ratio of 100% on a trace of such
// requests.
func TestRequestWithoutIDsHitsNoToken(t *testing.T) {
	tr := []trace.Request{{InputLength: 700}, {InputLength: 700}}
	lru, err := Simulate(tr, 4, policy.LRU, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for name, r := range map[string]Result{"lru": lru, "opt": OPT(tr, 4), "infinite": Infinite(tr)} {
		if r.HitTokens != 0 || r.TokenHitRatio != 0 || r.PromptTokens != 1400 {
			t.Errorf("%s: %+v, want 0 hit tokens of 1400", name, r)
		}
	}
}
