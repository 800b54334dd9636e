package blockpool

import (
	"fmt"
	"testing"
)

// BenchmarkAllocate allocates and frees sequences of n blocks that share a common
// stem (a quarter of their blocks) at several pool sizes. ns/block must not grow
// with the pool.
func BenchmarkAllocate(b *testing.B) {
	const size = 16
	for _, pool := range []int{1 << 10, 1 << 16, 1 << 20} {
		for _, n := range []int{8, 32, 128} {
			b.Run(fmt.Sprintf("pool=%d/blocks=%d", pool, n), func(b *testing.B) {
				p, err := New(Config{NumBlocks: pool, BlockSize: size})
				if err != nil {
					b.Fatal(err)
				}
				// Distinct sequences, so the pool's free queue fills with cached
				// blocks and allocation evicts, as in a warm server.
				const variants = 64
				seqs := make([][]int64, variants)
				for v := range seqs {
					seqs[v] = make([]int64, n*size)
					for i := range seqs[v] {
						if i < n*size/4 {
							seqs[v][i] = int64(i)
						} else {
							seqs[v][i] = int64(v*1_000_000 + i)
						}
					}
				}
				// Warm: fill the pool's cache so later allocations evict.
				for i := 0; i < pool/n+variants; i++ {
					s := seqs[i%variants]
					s[len(s)-1] = int64(i)
					if _, err := p.Allocate(1, s, ""); err != nil {
						b.Fatal(err)
					}
					p.Deallocate(1)
				}
				var evs []Evicted
				b.ReportAllocs()
				b.ResetTimer()
				i := 0
				for b.Loop() {
					s := seqs[i%variants]
					s[len(s)-1] = int64(i + pool) // a fresh tail each time
					if _, err := p.Allocate(1, s, ""); err != nil {
						b.Fatal(err)
					}
					p.Deallocate(1)
					evs = p.DrainEvicted(evs[:0])
					i++
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/block")
				b.ReportMetric(float64(b.N*n)/b.Elapsed().Seconds(), "blocks/s")
			})
		}
	}
}
