package tier

import (
	"fmt"
	"testing"

	"github.com/kvtier/kvtier/blockpool"
	"github.com/kvtier/kvtier/gpu"
	"github.com/kvtier/kvtier/messages"
)

// benchTier is a Tier over a pool of n blocks of bs tokens, with cfg's
// other settings and 64-byte blocks, and run, which answers what its last
// calls left ready.
func benchTier(b *testing.B, n int, cfg Config) (tr *Tier, run func()) {
	b.Helper()
	pool, err := blockpool.New(blockpool.Config{NumBlocks: n, BlockSize: bs})
	if err != nil {
		b.Fatal(err)
	}
	cfg.Pool, cfg.BlockBytes = pool, 64
	tr = New(cfg)
	tr.SetNow(t0)
	return tr, func() {
		for _, f := range tr.Ready().Replies {
			f.Reply()
		}
	}
}

// BenchmarkDecodeCommit: one decode step of seqs sequences whose tables
// run to blocks blocks each: an append of one token per sequence, then a
// commit of all of them naming the step's fence (never signalled: passes
// in flight). The hot path the copy-up fences added to.
func BenchmarkDecodeCommit(b *testing.B) {
	for _, c := range []struct{ seqs, blocks int }{{1, 2048}, {64, 64}} {
		b.Run(fmt.Sprintf("seqs=%d/blocks=%d", c.seqs, c.blocks), func(b *testing.B) {
			const steps = 256 // appends per round, then the sequences start over
			tr, run := benchTier(b, c.seqs*(c.blocks+steps/bs+2)+8, Config{Ingestion: IngestEvict, DoubleGetMinBlocks: 1})
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
			tr, run := benchTier(b, blocks+8, Config{Ingestion: IngestEvict, DoubleGetMinBlocks: 1})
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
			tr, run := benchTier(b, 4*blocks, Config{})
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
