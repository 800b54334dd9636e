package cachesim

import (
	"fmt"
	"testing"

	"github.com/kvtier/kvtier/policy"
	"github.com/kvtier/kvtier/trace"
)

func refsOf(tr []trace.Request) int64 {
	var n int64
	for _, r := range tr {
		n += int64(len(r.HashIDs))
	}
	return n
}

func BenchmarkSimulate(b *testing.B) {
	tr := trace.Sample()
	refs := refsOf(tr)
	for _, k := range []policy.Kind{policy.LRU, policy.FIFO, policy.S3FIFO, policy.ARC, policy.Adaptive} {
		for _, c := range []int{1 << 10, 16 << 10} {
			b.Run(fmt.Sprintf("policy=%v/capacity=%d", k, c), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if _, err := Simulate(tr, c, k, Options{}); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(refs)*float64(b.N)/b.Elapsed().Seconds(), "refs/s")
			})
		}
	}
}

func BenchmarkOPT(b *testing.B) {
	tr := trace.Sample()
	refs := refsOf(tr)
	for _, c := range []int{1 << 10, 16 << 10} {
		b.Run(fmt.Sprintf("capacity=%d", c), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				OPT(tr, c)
			}
			b.ReportMetric(float64(refs)*float64(b.N)/b.Elapsed().Seconds(), "refs/s")
		})
	}
}

func BenchmarkInfinite(b *testing.B) {
	tr := trace.Sample()
	b.ReportAllocs()
	for b.Loop() {
		Infinite(tr)
	}
	b.ReportMetric(float64(refsOf(tr))*float64(b.N)/b.Elapsed().Seconds(), "refs/s")
}
