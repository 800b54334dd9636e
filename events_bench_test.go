package kvtier

import (
	"context"
	"testing"
)

// BenchmarkEvents is the KV-event stream's cost on the hot path: batches of
// 8 sequences of 32 blocks (a 4-block shared stem, private tails, a fresh
// last block each time) allocated, committed and freed through the
// Manager, with events off and on (a PUB socket, no subscriber: every
// batch is still numbered, encoded, buffered and handed to the socket).
// Compare ns/block side by side.
func BenchmarkEvents(b *testing.B) {
	const batch, blocks, pool = 8, 32, 4096
	for _, on := range []bool{false, true} {
		name := "events=off"
		if on {
			name = "events=on"
		}
		b.Run(name, func(b *testing.B) {
			ctx := context.Background()
			cfg := Config{GPUBlocks: pool, BlockTokens: 16}
			if on {
				cfg.Events = &EventsConfig{Endpoint: "tcp://*:0"}
			}
			m, err := New(cfg)
			if err != nil {
				b.Fatal(err)
			}
			defer m.Close(ctx)
			prompts := benchPrompts(64, blocks)
			reqs := make([]AllocRequest, batch)
			commits := make([]CommitItem, batch)
			seqs := make([]uint64, batch)
			// A run numbers its batches from the clock (Config.FirstSeq):
			// count from where it stands.
			first, _, err := m.EventsSeq(ctx)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				for k := range batch {
					pr := prompts[(i*batch+k)%len(prompts)]
					pr[len(pr)-1] = int64(i)
					reqs[k] = AllocRequest{Seq: uint64(k), Tokens: pr}
					commits[k] = CommitItem{Seq: uint64(k), Tokens: AllTokens}
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
				if _, err := m.CommitBatch(ctx, commits); err != nil {
					b.Fatal(err)
				}
				if _, err := m.FreeBatch(ctx, seqs); err != nil {
					b.Fatal(err)
				}
				i++
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch*blocks), "ns/block")
			if on {
				seq, _, err := m.EventsSeq(ctx)
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64(seq-first)/float64(b.N), "batches/op")
			}
		})
	}
}
