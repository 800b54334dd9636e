package scheduler

import (
	"context"
	"testing"
	"time"

	"github.com/kvtier/kvtier/trace"
)

func TestAnalyticMonotonic(t *testing.T) {
	m := DefaultCostModel()
	if m.StepTime(nil) != 0 {
		t.Fatal("an empty step costs time")
	}
	prev := time.Duration(0)
	for _, n := range []int{2, 64, 512, 2048, 8192, 16384} {
		d := m.StepTime([]Work{{Tokens: n}})
		if d <= prev {
			t.Fatalf("prefill of %d tokens takes %v, not more than %v", n, d, prev)
		}
		prev = d
	}
	// Longer context costs more, for prefill chunks and decodes.
	if a, b := m.StepTime([]Work{{Tokens: 512}}), m.StepTime([]Work{{Tokens: 512, Context: 8192}}); b <= a {
		t.Fatalf("chunk after 8k context %v, not more than %v", b, a)
	}
	if a, b := m.StepTime([]Work{{Tokens: 1, Context: 100}}), m.StepTime([]Work{{Tokens: 1, Context: 100000}}); b <= a {
		t.Fatalf("decode at 100k context %v, not more than %v", b, a)
	}
	// More sequences cost more.
	one := m.StepTime([]Work{{Tokens: 1, Context: 1000}})
	many := m.StepTime(make([]Work, 64))
	if many <= one {
		t.Fatalf("64 sequences %v, one %v", many, one)
	}
	prev = 0
	for _, n := range []int{1, 512, 4096, 32768} {
		p, d := m.TransferTime(TierPinned, n), m.TransferTime(TierDisk, n)
		if p <= prev || d <= p {
			t.Fatalf("%d tokens: pinned %v disk %v (previous pinned %v)", n, p, d, prev)
		}
		prev = p
	}
	if m.TransferTime(TierGPU, 1000) != 0 || m.TransferTime(TierDisk, 0) != 0 {
		t.Fatal("GPU or empty transfers cost time")
	}
}

// TestAnalyticDefaults pins the documented figures of the H100-SXM /
// Llama-3-8B bf16 model.
func TestAnalyticDefaults(t *testing.T) {
	m := DefaultCostModel()
	within := func(name string, got, want time.Duration, tol float64) {
		t.Helper()
		if r := float64(got) / float64(want); r < 1-tol || r > 1+tol {
			t.Fatalf("%s: %v, want about %v", name, got, want)
		}
	}
	if m.BytesPerToken != 128<<10 {
		t.Fatalf("KV bytes per token %d, want 128 KiB", m.BytesPerToken)
	}
	// Batch-1 decode: weights read once at 80% of 3.35 TB/s (5.99 ms), the
	// step overhead (1 ms), one sequence (20 µs) and 1,001 tokens of KV
	// (49 µs): 7.07 ms a token, 141 tokens/s, as the doc above Analytic's
	// figures says (it said ~165 tokens/s, the weight read's alone).
	within("batch-1 decode", m.StepTime([]Work{{Tokens: 1, Context: 1000}}), 7066*time.Microsecond, 0.005)
	// An 8k-token prefill: 8192/30k s dense + 8192²/2 × 1.06 ns attention ≈ 309 ms.
	within("8k prefill", m.StepTime([]Work{{Tokens: 8192}}), 309*time.Millisecond, 0.03)
	// 1k tokens = 131 MB: 2.6 ms over PCIe Gen5 at 50 GB/s, 18.7 ms from NVMe at 7 GB/s, plus latency.
	within("pinned 1k", m.TransferTime(TierPinned, 1000), 2631*time.Microsecond, 0.02)
	within("disk 1k", m.TransferTime(TierDisk, 1000), 18825*time.Microsecond, 0.02)
}

// TestWorkCoster: the marginal prices agree with StepTime where the step is
// compute-bound, and a prefill's price does not depend on its chunking.
func TestWorkCoster(t *testing.T) {
	m := DefaultCostModel()
	near := func(a, b time.Duration) bool { return a-b <= 2 && b-a <= 2 } // ns rounding
	for _, w := range []Work{{Tokens: 512}, {Tokens: 4096, Context: 8192}, {Tokens: 16384, Context: 100}} {
		want := m.StepTime([]Work{w}) - m.StepOverhead - m.PerSeq
		if got := m.PrefillCompute(w.Tokens, w.Context); !near(got, want) {
			t.Errorf("PrefillCompute(%d, %d) = %v, StepTime less overheads %v", w.Tokens, w.Context, got, want)
		}
	}
	whole := m.PrefillCompute(10000, 0)
	if parts := m.PrefillCompute(3000, 0) + m.PrefillCompute(5000, 3000) + m.PrefillCompute(2000, 8000); !near(whole, parts) {
		t.Errorf("10k tokens: %v whole, %v in three chunks", whole, parts)
	}
	// Decoding: per token, the dense share, the per-sequence cost and the KV read.
	dense := time.Duration(1e9 / m.TokensPerSecond)
	one := m.DecodeCompute(1, 1000)
	if want := dense + m.PerSeq + time.Duration(1001*m.KVReadNSPerToken); !near(one, want) {
		t.Errorf("DecodeCompute(1, 1000) = %v, want %v", one, want)
	}
	if got, want := m.DecodeCompute(3, 1000), one+m.DecodeCompute(1, 1001)+m.DecodeCompute(1, 1002); !near(got, want) {
		t.Errorf("DecodeCompute(3, 1000) = %v, one at a time %v", got, want)
	}
	if m.PrefillCompute(0, 5) != 0 || m.DecodeCompute(0, 5) != 0 {
		t.Error("no tokens cost time")
	}
}

// TestPrefillSaved: a run prices the prefix each tier served with the cost
// model's PrefillCompute, the pinned part after the GPU part; a cost model
// that is not a WorkCoster prices nothing.
func TestPrefillSaved(t *testing.T) {
	a := req(0, 2048, 2, 100)
	b := req(10_000, 3000, 2, 100) // a's 4 blocks, then its own
	b.HashIDs = append(a.HashIDs[:4:4], 200, 201)
	// b's fifth block waits in pinned memory, after a's four.
	for _, cost := range []CostModel{DefaultCostModel(), simpleCost()} {
		f := newFakeCache(fakeConfig{gpuBlocks: 1000, pinnedBlocks: 1000, diskBlocks: 1000, blockSize: 16})
		f.preload(TierPinned, trace.Tokens(b, DefaultVocab)[:2560], "")
		r, err := Run(context.Background(), f, []trace.Request{a, b}, Config{CostModel: cost})
		if err != nil {
			t.Fatal(err)
		}
		// a finds its prompt, less the last token, in pinned memory; b finds
		// a's 2048 on the GPU and 512 more in pinned memory.
		if r.GPUTokens != 2048 || r.PinnedTokens != 2047+512 || r.DiskTokens != 0 {
			t.Fatalf("hits gpu %d pinned %d disk %d; want 2048, 2047+512, 0", r.GPUTokens, r.PinnedTokens, r.DiskTokens)
		}
		wc, ok := cost.(WorkCoster)
		if !ok {
			if r.PrefillSaved != (TierTimes{}) {
				t.Errorf("no WorkCoster: saved %+v", r.PrefillSaved)
			}
			continue
		}
		want := TierTimes{
			GPU:    wc.PrefillCompute(2048, 0),
			Pinned: wc.PrefillCompute(2047, 0) + wc.PrefillCompute(512, 2048),
		}
		if r.PrefillSaved != want {
			t.Errorf("saved %+v, want %+v", r.PrefillSaved, want)
		}
	}
}
