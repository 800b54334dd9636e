package blockpool

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// BenchmarkAllocateScale is the kvbench alloc workload on one pool: 32-block
// sequences whose first 4 blocks are one of 16 shared stems and whose tail is new,
// 4 sequences live at once, the pool warm so each missed block evicts. Unlike
// BenchmarkAllocate, the tails never hit, so a large pool's cost shows its
// memory behaviour: ns/block at pool=1048576 should stay within 1.5x of pool=1024.
func BenchmarkAllocateScale(b *testing.B) {
	const (
		blocks, size, stem, stems, live = 32, 16, 4, 16, 4
	)
	for _, pool := range []int{1 << 10, 1 << 20} {
		b.Run(fmt.Sprintf("pool=%d", pool), func(b *testing.B) {
			p, err := New(Config{NumBlocks: pool, BlockSize: size})
			if err != nil {
				b.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(1, 2))
			bufs := make([][]int64, 4*stems)
			for i := range bufs {
				bufs[i] = make([]int64, blocks*size)
				for j := range bufs[i] {
					bufs[i][j] = rng.Int64N(1 << 17)
				}
				if i >= stems {
					copy(bufs[i], bufs[i%stems][:stem*size])
				}
			}
			var (
				seq    SeqID
				marker = int64(1) << 32
				evs    []Evicted
			)
			step := func() {
				seq++
				s := bufs[int(seq)%len(bufs)]
				s[stem*size] = marker
				marker++
				if _, err := p.Allocate(seq, s, ""); err != nil {
					b.Fatal(err)
				}
				// Computed: only committed blocks are cached, and so evicted.
				if _, err := p.Commit(seq, len(s), nil); err != nil {
					b.Fatal(err)
				}
				evs = p.DrainEvicted(evs[:0])
				if seq > live {
					if err := p.Deallocate(seq - live); err != nil {
						b.Fatal(err)
					}
				}
			}
			for p.Stats().Evictions == 0 {
				step()
			}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				step()
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*blocks), "ns/block")
		})
	}
}
