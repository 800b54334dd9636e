package refengine

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

func TestGenerateMatchesReferenceGenerate(t *testing.T) {
	m := mustModel(t, TinyConfig)
	r := rand.New(rand.NewPCG(8, 9))
	for trial := range 5 {
		prompt := randTokens(r, TinyConfig.Vocab, 1+r.IntN(10))
		const n = 12
		wantToks, wantLogits, err := m.ReferenceGenerate(prompt, n)
		if err != nil {
			t.Fatal(err)
		}
		kv := m.NewMemKV()
		toks, logits, err := m.Generate(kv, prompt, 0, n)
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(toks) != fmt.Sprint(wantToks) {
			t.Fatalf("trial %d: cached tokens %v, reference %v", trial, toks, wantToks)
		}
		requireSameBits(t, fmt.Sprintf("trial %d", trial), logits, wantLogits, 0)
		if want := len(prompt) + n - 1; kv.Len() != want {
			t.Fatalf("trial %d: store holds %d positions, want %d", trial, kv.Len(), want)
		}
	}
}

// TestGenerateResumes splits one generation into two Generate calls, the
// second fed the first's last token as its prompt.
func TestGenerateResumes(t *testing.T) {
	m := mustModel(t, TinyConfig)
	prompt := []int64{4, 8, 15, 16, 23, 42}
	wantToks, wantLogits, err := m.Generate(m.NewMemKV(), prompt, 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	kv := m.NewMemKV()
	a, la, err := m.Generate(kv, prompt, 0, 4)
	if err != nil {
		t.Fatal(err)
	}
	b, lb, err := m.Generate(kv, a[3:], len(prompt)+3, 6)
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(append(a, b...)); got != fmt.Sprint(wantToks) {
		t.Fatalf("resumed tokens %v, want %v", got, wantToks)
	}
	requireSameBits(t, "resumed", append(la, lb...), wantLogits, 0)

	// n = 0 runs nothing: empty slices, the prompt not fed, kv as it was.
	fresh := m.NewMemKV()
	none, noneLogits, err := m.Generate(fresh, prompt, 0, 0)
	if err != nil || none == nil || noneLogits == nil || len(none) != 0 || len(noneLogits) != 0 {
		t.Fatalf("Generate(n=0) = %v, %v, %v", none, noneLogits, err)
	}
	if n := fresh.Len(); n != 0 {
		t.Fatalf("Generate(n=0) left %d positions in kv, want none", n)
	}
	if _, _, err := m.Generate(fresh, nil, 0, 0); err == nil {
		t.Fatal("Generate(n=0) of an empty prompt: no error, want the argument check's")
	}
}

func TestArgmax(t *testing.T) {
	nan := float32(math.NaN())
	for _, tt := range []struct {
		in   []float32
		want int64
	}{
		{nil, -1},
		{[]float32{1}, 0},
		{[]float32{1, 3, 3, 2}, 1}, // lowest index wins a tie
		{[]float32{nan, 1, 2}, 2},  // NaN never wins
		{[]float32{nan, nan}, 0},
		{[]float32{-1, float32(math.Inf(-1))}, 0},
	} {
		if got := Argmax(tt.in); got != tt.want {
			t.Errorf("Argmax(%v) = %d, want %d", tt.in, got, tt.want)
		}
	}
}
