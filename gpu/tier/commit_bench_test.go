package tier

import (
	"fmt"
	"testing"

	"github.com/kvtier/kvtier/blockpool"
	"github.com/kvtier/kvtier/gpu"
	"github.com/kvtier/kvtier/messages"
)

// BenchmarkDecodeCommit: one decode step of seqs sequences whose tables
// run to blocks blocks each: an append of one token per sequence, then a
// commit of all of them naming the step's fence (never signalled: passes
// in flight). The hot path the copy-up fences added to.
func BenchmarkDecodeCommit(b *testing.B) {
	for _, c := range []struct{ seqs, blocks int }{{1, 2048}, {64, 64}} {
		b.Run(fmt.Sprintf("seqs=%d/blocks=%d", c.seqs, c.blocks), func(b *testing.B) {
			const steps = 256 // appends per round, then the sequences start over
			pool, err := blockpool.New(blockpool.Config{NumBlocks: c.seqs*(c.blocks+steps/bs+2) + 8, BlockSize: bs})
			if err != nil {
				b.Fatal(err)
			}
			tr := New(Config{Pool: pool, BlockBytes: 64, Ingestion: IngestEvict, DoubleGetMinBlocks: 1})
			tr.SetNow(t0)
			run := func() {
				r := tr.Ready()
				for _, f := range r.Replies {
					f.Reply()
				}
			}
			next := uint64(1)
			var seqs []uint64
			start := func() {
				if len(seqs) > 0 {
					tr.FreeBatch(seqs, false, func(*messages.FreeBatchResult) {})
					run()
				}
				seqs = seqs[:0]
				for i := range c.seqs {
					toks := make([]int64, c.blocks*bs)
					for j := range toks {
						toks[j] = int64(next)<<20 + int64(j) + int64(i)
					}
					tr.AllocateBatch([]messages.AllocRequest{{Seq: next, Tokens: toks}}, []*blockpool.Keys{blockpool.ComputeKeys("", toks, bs, false)}, func(*messages.AllocateBatchResult) {})
					run()
					seqs = append(seqs, next)
					next++
				}
				items := make([]messages.CommitItem, len(seqs))
				for i, s := range seqs {
					items[i] = messages.CommitItem{Seq: s, Tokens: blockpool.AllTokens}
				}
				tr.CommitBatch(items, func(*messages.CommitBatchResult) {})
				run()
			}
			start()
			app := make([]messages.AppendItem, len(seqs))
			com := make([]messages.CommitItem, len(seqs))
			f := gpu.NewHostFence()
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				if i%steps == steps-1 {
					b.StopTimer()
					start()
					b.StartTimer()
				}
				for j, s := range seqs {
					app[j] = messages.AppendItem{Seq: s, Tokens: []int64{int64(i)}}
					com[j] = messages.CommitItem{Seq: s, Tokens: blockpool.AllTokens, After: f}
				}
				tr.AppendBatch(app, func(*messages.AppendBatchResult) {})
				tr.CommitBatch(com, func(*messages.CommitBatchResult) {})
				run()
			}
		})
	}
}

// BenchmarkFreeInFlight: the free of a sequence of blocks blocks whose
// last commit's pass is still in flight (preempted), the copy-up fences'
// cost at the free.
func BenchmarkFreeInFlight(b *testing.B) {
	for _, blocks := range []int{64, 2048} {
		b.Run(fmt.Sprintf("blocks=%d", blocks), func(b *testing.B) {
			pool, err := blockpool.New(blockpool.Config{NumBlocks: blocks + 8, BlockSize: bs})
			if err != nil {
				b.Fatal(err)
			}
			tr := New(Config{Pool: pool, BlockBytes: 64, Ingestion: IngestEvict, DoubleGetMinBlocks: 1})
			tr.SetNow(t0)
			run := func() {
				r := tr.Ready()
				for _, f := range r.Replies {
					f.Reply()
				}
			}
			toks := make([]int64, blocks*bs)
			for j := range toks {
				toks[j] = int64(j)
			}
			keys := []*blockpool.Keys{blockpool.ComputeKeys("", toks, bs, false)}
			f := gpu.NewHostFence()
			b.ReportAllocs()
			for b.Loop() {
				b.StopTimer()
				tr.AllocateBatch([]messages.AllocRequest{{Seq: 1, Tokens: toks}}, keys, func(*messages.AllocateBatchResult) {})
				run()
				tr.CommitBatch([]messages.CommitItem{{Seq: 1, Tokens: len(toks), After: f}}, func(*messages.CommitBatchResult) {})
				run()
				b.StartTimer()
				tr.FreeBatch([]uint64{1}, false, func(*messages.FreeBatchResult) {})
				run()
			}
		})
	}
}

// BenchmarkPrefillCommit: the commit of a prompt of blocks blocks just
// allocated, each published first by it (one claim a block), timed alone;
// each round's prompt is new, so the pool evicts an earlier one's blocks.
// With finished, the timed part is instead the free of the sequence after
// a commit gave it a class (it ends every claim: disown).
func BenchmarkPrefillCommit(b *testing.B) {
	for _, finished := range []bool{false, true} {
		b.Run(fmt.Sprintf("blocks=256/finished=%v", finished), func(b *testing.B) {
			const blocks = 256
			pool, err := blockpool.New(blockpool.Config{NumBlocks: 4 * blocks, BlockSize: bs})
			if err != nil {
				b.Fatal(err)
			}
			tr := New(Config{Pool: pool, BlockBytes: 64})
			tr.SetNow(t0)
			run := func() {
				r := tr.Ready()
				for _, f := range r.Replies {
					f.Reply()
				}
			}
			toks := make([]int64, blocks*bs)
			seq := uint64(0)
			b.ReportAllocs()
			for b.Loop() {
				b.StopTimer()
				seq++
				for j := range toks {
					toks[j] = int64(seq)<<20 + int64(j)
				}
				tr.AllocateBatch([]messages.AllocRequest{{Seq: seq, Tokens: toks}}, []*blockpool.Keys{blockpool.ComputeKeys("", toks, bs, false)}, func(*messages.AllocateBatchResult) {})
				run()
				commit := []messages.CommitItem{{Seq: seq, Tokens: blockpool.AllTokens}}
				if !finished {
					b.StartTimer()
				}
				tr.CommitBatch(commit, func(*messages.CommitBatchResult) {})
				if finished {
					tr.CommitBatch([]messages.CommitItem{{Seq: seq, Class: 3}}, func(*messages.CommitBatchResult) {})
					b.StartTimer()
					tr.FreeBatch([]uint64{seq}, false, func(*messages.FreeBatchResult) {})
				}
				b.StopTimer()
				run()
				if !finished {
					tr.FreeBatch([]uint64{seq}, false, func(*messages.FreeBatchResult) {})
					run()
				}
				b.StartTimer()
			}
		})
	}
}
