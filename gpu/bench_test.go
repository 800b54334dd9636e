package gpu

import (
	"fmt"
	"testing"
)

const benchBatch = 32 // blocks per batch

var benchBlockSizes = []int{256 << 10, 2 << 20}

// BenchmarkCopy measures one stream of the default backend moving batches
// of 32 whole blocks, waiting for each batch's event. SetBytes makes the
// MB/s column comparable with BenchmarkMemmove.
func BenchmarkCopy(b *testing.B) {
	for _, dir := range []Direction{D2H, H2D} {
		for _, bb := range benchBlockSizes {
			b.Run(fmt.Sprintf("dir=%v/bytes=%d", dir, bb), func(b *testing.B) {
				d, err := Default()
				if err != nil {
					b.Fatal(err)
				}
				defer d.Close()
				arena, err := d.NewArena(benchBatch, bb)
				if err != nil {
					b.Fatal(err)
				}
				s, err := d.NewStream(arena)
				if err != nil {
					b.Fatal(err)
				}
				host := hostBlocks(b, d, benchBatch, bb)
				ops := make([]CopyOp, benchBatch)
				for i := range ops {
					ops[i] = CopyOp{Block: i, Host: host[i]}
				}
				copyFn := s.CopyD2H
				if dir == H2D {
					copyFn = s.CopyH2D
				}
				b.SetBytes(int64(benchBatch * bb))
				b.ReportAllocs()
				for b.Loop() {
					ev, err := copyFn(ops)
					if err != nil {
						b.Fatal(err)
					}
					<-ev.Done()
					if err := ev.Err(); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkMemmove is the baseline: plain copy() of the same 32 blocks
// between a Go slice and page-locked host memory, on one goroutine.
func BenchmarkMemmove(b *testing.B) {
	for _, bb := range benchBlockSizes {
		b.Run(fmt.Sprintf("bytes=%d", bb), func(b *testing.B) {
			d, err := NewHost(HostConfig{})
			if err != nil {
				b.Fatal(err)
			}
			defer d.Close()
			src := make([]byte, benchBatch*bb)
			host := hostBlocks(b, d, benchBatch, bb)
			b.SetBytes(int64(benchBatch * bb))
			b.ReportAllocs()
			for b.Loop() {
				for i := range benchBatch {
					copy(host[i], src[i*bb:(i+1)*bb])
				}
			}
		})
	}
}
