package trace

import (
	"slices"
	"strings"
	"testing"
)

// TestTokensOfBlockSize: in a trace read with BlockTokens 16 each hash id
// stands for 16 tokens, so requests sharing only their first id share exactly
// their first 16 tokens, and every id contributes.
func TestTokensOfBlockSize(t *testing.T) {
	in := `{"timestamp": 0, "input_length": 40, "output_length": 1, "hash_ids": [7, 8, 9]}
{"timestamp": 1, "input_length": 40, "output_length": 1, "hash_ids": [7, 10, 11]}
{"timestamp": 2, "input_length": 33, "output_length": 1, "hash_ids": [7, 8, 12]}`
	reqs, _, err := Read(strings.NewReader(in), Options{BlockTokens: 16})
	if err != nil {
		t.Fatal(err)
	}
	a, b, c := TokensOf(reqs[0], 16, 1000), TokensOf(reqs[1], 16, 1000), TokensOf(reqs[2], 16, 1000)
	if len(a) != 40 || len(b) != 40 || len(c) != 33 {
		t.Fatalf("lengths %d %d %d, want 40 40 33", len(a), len(b), len(c))
	}
	if !slices.Equal(a[:16], b[:16]) || !slices.Equal(a[:32], c[:32]) {
		t.Fatal("shared leading ids gave different tokens")
	}
	differ := func(x, y []int64) bool {
		same := 0
		for i := range x {
			if x[i] == y[i] {
				same++
			}
		}
		return same*4 < len(x)
	}
	if !differ(a[16:32], b[16:32]) || !differ(a[32:], b[32:]) || !differ(a[32:33], c[32:]) {
		t.Fatalf("different ids gave the same tokens: a %v b %v c %v", a[16:], b[16:], c[32:])
	}
	// Each block is the id's own sequence, cut to the block size.
	if want := AppendBlockTokens(nil, 8, 16, 1000); !slices.Equal(a[16:32], want) {
		t.Fatalf("block of id 8 is %v, want %v", a[16:32], want)
	}
}

// TestTokensIs512: Tokens stays TokensOf at Mooncake's block size.
func TestTokensIs512(t *testing.T) {
	r := Request{InputLength: 1500, HashIDs: []int64{4, 5, 6}}
	if !slices.Equal(Tokens(r, 32000), TokensOf(r, BlockTokens, 32000)) {
		t.Fatal("Tokens differs from TokensOf(BlockTokens)")
	}
	if got := Tokens(r, 32000); !slices.Equal(got[512:1024], AppendBlockTokens(nil, 5, 512, 32000)) {
		t.Fatal("Tokens: id 5 does not stand for tokens 512..1023")
	}
}

func TestTokensOfBadBlockSize(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("TokensOf with blockTokens 0 did not panic")
		}
	}()
	TokensOf(Request{InputLength: 1, HashIDs: []int64{0}}, 0, 10)
}
