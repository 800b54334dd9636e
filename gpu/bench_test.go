package gpu

import (
	"bytes"
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
				// Touch every page on both sides: untouched anonymous memory
				// reads as the shared zero page and would flatter the numbers.
				pattern := bytes.Repeat([]byte{0xa5}, bb)
				for i := range benchBatch {
					if err := arena.WriteBlock(i, 0, pattern); err != nil {
						b.Fatal(err)
					}
					copy(host[i], pattern)
				}
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
// from a Go slice into page-locked host memory. handoff=false copies on
// the benchmark goroutine; handoff=true on another goroutine woken once
// per batch, which is the floor for any asynchronous copy engine (when
// the batch fits in cache, the copying core is often not the one whose
// cache holds the data).
func BenchmarkMemmove(b *testing.B) {
	for _, bb := range benchBlockSizes {
		for _, handoff := range []bool{false, true} {
			b.Run(fmt.Sprintf("bytes=%d/handoff=%v", bb, handoff), func(b *testing.B) {
				d, err := NewHost(HostConfig{})
				if err != nil {
					b.Fatal(err)
				}
				defer d.Close()
				src := bytes.Repeat([]byte{0xa5}, benchBatch*bb)
				host := hostBlocks(b, d, benchBatch, bb)
				for i := range host {
					copy(host[i], src)
				}
				batch := func() {
					for i := range benchBatch {
						copy(host[i], src[i*bb:(i+1)*bb])
					}
				}
				b.SetBytes(int64(benchBatch * bb))
				b.ReportAllocs()
				if !handoff {
					for b.Loop() {
						batch()
					}
					return
				}
				req, done := make(chan struct{}), make(chan struct{})
				go func() {
					for range req {
						batch()
						done <- struct{}{}
					}
					close(done)
				}()
				for b.Loop() {
					req <- struct{}{}
					<-done
				}
				close(req)
				<-done
			})
		}
	}
}
