package scheduler

import (
	"testing"
	"time"
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
	// Batch-1 decode: weights read once at 80% of 3.35 TB/s, plus overheads:
	// about 7 ms a token, ~140-165 tokens/s.
	within("batch-1 decode", m.StepTime([]Work{{Tokens: 1, Context: 1000}}), 7*time.Millisecond, 0.05)
	// An 8k-token prefill: 8192/30k s dense + 8192²/2 × 1.06 ns attention ≈ 309 ms.
	within("8k prefill", m.StepTime([]Work{{Tokens: 8192}}), 309*time.Millisecond, 0.03)
	// 1k tokens = 131 MB: 2.6 ms over PCIe Gen5 at 50 GB/s, 18.7 ms from NVMe at 7 GB/s, plus latency.
	within("pinned 1k", m.TransferTime(TierPinned, 1000), 2631*time.Microsecond, 0.02)
	within("disk 1k", m.TransferTime(TierDisk, 1000), 18825*time.Microsecond, 0.02)
}
