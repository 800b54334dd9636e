package blockpool

import (
	"errors"
	"math"
	"testing"
)

// TestHugeLookaheadNeedsPositive: a lookahead past the pool's capacity is a
// *NoSpaceError whose Needed is positive; with one-token blocks and
// math.MaxInt it wrapped to math.MinInt ("need -9223372036854775808").
func TestHugeLookaheadNeedsPositive(t *testing.T) {
	p, err := New(Config{NumBlocks: 4, BlockSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	_, err = p.AllocateRequest(Request{Seq: 1, Tokens: []int64{1}, Lookahead: math.MaxInt})
	var ns *NoSpaceError
	if !errors.As(err, &ns) || ns.Needed <= 0 {
		t.Fatalf("lookahead MaxInt: %v, want a *NoSpaceError with Needed > 0", err)
	}
}
