package kvtier

import (
	"context"
	"testing"

	"github.com/kvtier/kvtier/blockpool"
)

// benchPrompts returns n prompts of blocks blocks (16 tokens each): a shared stem
// of 4 blocks and a private tail.
func benchPrompts(n, blocks int) [][]int64 {
	out := make([][]int64, n)
	for i := range out {
		p := make([]int64, blocks*16)
		for j := range p {
			if j < 4*16 {
				p[j] = int64(j)
			} else {
				p[j] = int64(i*1_000_000 + j)
			}
		}
		out[i] = p
	}
	return out
}

// BenchmarkAllocate compares the plain pool with the actor path, allocating and
// freeing batches of 8 sequences of 32 blocks. ns/block is the figure to compare.
func BenchmarkAllocate(b *testing.B) {
	const batch, blocks, pool = 8, 32, 16384
	prompts := benchPrompts(64, blocks)
	b.Run("blocks=32/actors=false", func(b *testing.B) {
		p, _ := blockpool.New(blockpool.Config{NumBlocks: pool, BlockSize: 16})
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			for k := range batch {
				pr := prompts[(i*batch+k)%len(prompts)]
				pr[len(pr)-1] = int64(i) // a fresh last block
				if _, err := p.Allocate(blockpool.SeqID(k), pr, ""); err != nil {
					b.Fatal(err)
				}
			}
			for k := range batch {
				p.Deallocate(blockpool.SeqID(k))
			}
			p.DrainEvicted(nil)
			i++
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch*blocks), "ns/block")
	})
	b.Run("blocks=32/actors=true", func(b *testing.B) {
		ctx := context.Background()
		m, err := New(Config{GPUBlocks: pool, BlockTokens: 16})
		if err != nil {
			b.Fatal(err)
		}
		defer m.Close(ctx)
		reqs := make([]AllocRequest, batch)
		seqs := make([]uint64, batch)
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			for k := range batch {
				pr := prompts[(i*batch+k)%len(prompts)]
				pr[len(pr)-1] = int64(i)
				reqs[k] = AllocRequest{Seq: uint64(k), Tokens: pr}
				seqs[k] = uint64(k)
			}
			res, err := m.AllocateBatch(ctx, reqs)
			if err != nil {
				b.Fatal(err)
			}
			for _, r := range res {
				if r.Err != nil {
					b.Fatal(r.Err)
				}
				<-r.Ready.Done()
			}
			if _, err := m.FreeBatch(ctx, seqs); err != nil {
				b.Fatal(err)
			}
			i++
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch*blocks), "ns/block")
	})
}
