package kvtier_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/kvtier/kvtier"
	"github.com/kvtier/kvtier/gpu"
	"github.com/kvtier/kvtier/internal/enginetest"
	"github.com/kvtier/kvtier/refengine"
)

// mixedReq is one request of TestProbeEngineMixedFeatures' engine.
type mixedReq struct {
	*probeSeq
	salt, lora string
	live       bool
	computed   int // leading tokens whose KV is in the blocks
	lookahead  int
	decodeLeft int
	last       []float32
}

// TestProbeEngineMixedFeatures drives one engine through random
// operations that combine what the engine-side probes test one at a time:
// adapters whose KV differs, tenant salts, truncated prompts, speculative
// decoding into lookahead slots, commits named by a fence that is signalled
// only after the KV is written (an asynchronous engine), chunked prefill,
// preemption by swap and by free, aborts with garbage, deletes of chains,
// prefetches, GPU evictions and restarts on the same disk directory. After
// every request finishes, its logits must equal its own model's recompute.
func TestProbeEngineMixedFeatures(t *testing.T) {
	for seed := uint64(1); seed <= 4; seed++ {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) { mixedFeatures(t, seed) })
	}
}

func mixedFeatures(t *testing.T, seed uint64) {
	ctx := engineCtx(t)
	rng := rand.New(rand.NewPCG(seed, 77))
	const gpuBlocks = 40
	kind := layouts[seed%2]
	cfg := engineConfig(t, gpuBlocks, 12+int(seed%3)*8, kind)
	cfg.DiskDir, cfg.DiskBytes = t.TempDir(), 1<<22
	faults := seed%2 == 0
	var frng atomic.Uint64
	frng.Store(seed)
	dev, err := gpu.NewHost(gpu.HostConfig{Fault: func(gpu.Direction, []gpu.CopyOp) error {
		if faults && rand.New(rand.NewPCG(frng.Add(1), 5)).IntN(20) == 0 {
			return errInjected
		}
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	cfg.Device = dev
	if addr := os.Getenv("KVTIER_REDIS"); addr != "" && seed%4 == 1 {
		prefix := fmt.Sprintf("test-engine-mixed-%d", rand.Uint64())
		raw := redis.NewClient(&redis.Options{Addr: addr})
		t.Cleanup(func() {
			dropKeys(t, raw, prefix)
			raw.Close()
		})
		cfg.Remote = &kvtier.RemoteConfig{Addrs: []string{addr}, Prefix: prefix}
		cfg.DiskIngestion = kvtier.IngestAll
	}
	cfg.Ingestion = []kvtier.Ingestion{kvtier.IngestEvict, kvtier.IngestAll, kvtier.IngestHot}[seed%3]
	cfg.HotHits = 1
	base := engineModel(t)
	acfg := refengine.TinyConfig
	acfg.Seed = 1234
	adapter, err := refengine.New(acfg)
	if err != nil {
		t.Fatal(err)
	}
	models := map[string]*refengine.Model{"": base, "lora-a": adapter}
	vocab := int64(refengine.TinyConfig.Vocab)
	p := enginetest.NewPrompts(seed, refengine.TinyConfig.Vocab, ebt, 3)
	nss := []struct{ salt, lora string }{{"", ""}, {"", "lora-a"}, {"t1", ""}, {"t1", "lora-a"}}

	m := mustNew(t, cfg)
	defer func() { mustClose(t, m) }()
	var reqs []*mixedReq
	var done [][]int64
	nextSeq := uint64(1)
	counts := map[string]int{}

	commit := func(r *mixedReq, n int, write func()) {
		t.Helper()
		if rng.IntN(2) == 0 {
			write()
			if err := m.Commit(ctx, r.seq, n); err != nil {
				t.Fatalf("seq %d: commit %d: %v", r.seq, n, err)
			}
			return
		}
		// An asynchronous engine: the commit names the pass's fence
		// before the pass wrote anything; the fence is signalled once
		// the KV is in.
		f, err := gpu.NewSignalFence(m.Device())
		if err != nil {
			t.Fatal(err)
		}
		errs, err := m.CommitBatch(ctx, []kvtier.CommitItem{{Seq: r.seq, Tokens: n, After: f}})
		if err != nil || errs[0] != nil {
			t.Fatalf("seq %d: fenced commit %d: %v %v", r.seq, n, err, errs)
		}
		counts["fenced"]++
		write()
		f.Signal()
	}
	admit := func(r *mixedReq, tokens []int64, req kvtier.AllocRequest) error {
		req.Seq, req.Tokens, req.Salt, req.LoRA, req.Lookahead = r.seq, tokens, r.salt, r.lora, r.lookahead
		kept := len(tokens)
		if req.MaxSeqLen > 0 {
			kept = min(kept, req.MaxSeqLen)
		}
		req.MaxHitTokens = kept - 1
		if req.MaxHitTokens == 0 {
			req.MaxHitTokens = -1
		}
		if rng.IntN(4) == 0 {
			req.LoadDeadline = time.Now().Add(time.Duration(rng.IntN(2000)) * time.Microsecond)
		}
		res, err := m.Allocate(ctx, req)
		if err != nil {
			return err
		}
		<-res.Ready.Done()
		out := res.Ready.Outcome()
		table := res.Blocks
		if out.Blocks != nil {
			table = out.Blocks
		}
		r.tokens = append([]int64(nil), tokens[:len(tokens)-res.Truncated]...)
		r.kv = enginetest.NewKV(m, table)
		r.computed, r.live = out.ValidTokens, true
		for _, tier := range []kvtier.Tier{kvtier.GPU, kvtier.Pinned, kvtier.Disk, kvtier.Remote} {
			if res.Tokens.Of(tier) > 0 {
				counts["hit "+tier.String()]++
			}
		}
		counts["late"] += out.Late
		counts["failed"] += out.Failed
		if out.Mismatch != 0 || (out.Failed != 0 && !faults) {
			t.Fatalf("seq %d: a load failed or mismatched with no fault: %+v", r.seq, out)
		}
		return nil
	}
	finish := func(r *mixedReq) {
		t.Helper()
		r.check()
		if err := m.Free(ctx, r.seq); err != nil {
			t.Fatal(err)
		}
		done = append(done, r.tokens)
		r.live = false
	}
	// step advances r by one pass: a prefill chunk, or a decode step
	// (speculative when it has lookahead slots).
	step := func(r *mixedReq) {
		t.Helper()
		if r.computed < len(r.tokens) {
			end := min(len(r.tokens), r.computed+1+rng.IntN(2*ebt))
			var rows [][]float32
			commit(r, end, func() { rows = r.forward(r.tokens[r.computed:end], r.computed, end) })
			r.computed, r.last = end, rows[len(rows)-1]
			return
		}
		if r.decodeLeft == 0 {
			finish(r)
			return
		}
		r.decodeLeft--
		next := refengine.Argmax(r.last)
		n := len(r.tokens)
		if r.lookahead == 0 { // plain decode: append, then compute
			blocks, err := m.Append(ctx, r.seq, []int64{next})
			if errors.Is(err, kvtier.ErrNoSpace) {
				r.decodeLeft = 0
				return
			}
			if err != nil {
				t.Fatalf("seq %d: append: %v", r.seq, err)
			}
			r.kv.Table = append(r.kv.Table, blocks...)
			r.tokens = append(r.tokens, next)
			var rows [][]float32
			commit(r, n+1, func() { rows = r.forward([]int64{next}, n, n+1) })
			r.computed, r.last = n+1, rows[0]
			return
		}
		drafts := []int64{next}
		for i := 1; i < r.lookahead+1 && n+i < len(r.kv.Table)*ebt; i++ {
			drafts = append(drafts, rng.Int64N(vocab))
		}
		// The verify pass writes every draft's KV; only the first is
		// kept (the others are accepted only if the model agrees).
		rows := r.forward(drafts, n, n+len(drafts))
		acc := 1
		for acc < len(drafts) && refengine.Argmax(rows[acc-1]) == drafts[acc] {
			acc++
		}
		for pos := n + acc; pos < n+len(drafts); pos++ {
			delete(r.rows, pos) // rejected: the reference never sees them
		}
		res, err := m.AppendBatch(ctx, []kvtier.AppendItem{{Seq: r.seq, Tokens: drafts[:acc], Lookahead: r.lookahead}})
		if err == nil {
			err = res[0].Err
		}
		if errors.Is(err, kvtier.ErrNoSpace) {
			r.decodeLeft = 0 // ends here; its rows so far still count
			for pos := n; pos < n+len(drafts); pos++ {
				delete(r.rows, pos)
			}
			return
		}
		if err != nil {
			t.Fatalf("seq %d: append: %v", r.seq, err)
		}
		r.kv.Table = append(r.kv.Table, res[0].Blocks...)
		r.tokens = append(r.tokens, drafts[:acc]...)
		r.computed = n + acc
		r.last = rows[acc-1]
		counts["accepted"] += acc
		commit(r, r.computed, func() {})
	}

	for op := 0; op < 300; op++ {
		var live []*mixedReq
		for _, r := range reqs {
			if r.live {
				live = append(live, r)
			}
		}
		switch k := rng.IntN(20); {
		case k < 4 && len(live) < 5: // a new request
			ns := nss[rng.IntN(len(nss))]
			r := &mixedReq{probeSeq: newProbeSeq(t, m, models[ns.lora], nextSeq), salt: ns.salt, lora: ns.lora, decodeLeft: rng.IntN(2 * ebt)}
			nextSeq++
			var tokens []int64
			var req kvtier.AllocRequest
			switch rng.IntN(4) {
			case 0:
				if len(done) > 0 {
					tokens = append(append([]int64(nil), done[rng.IntN(len(done))]...), p.Unique(rng.IntN(ebt))...)
					break
				}
				fallthrough
			case 1:
				tokens = p.Next()
				req.MaxSeqLen, req.Truncate = len(tokens)-rng.IntN(ebt+1), true
			default:
				tokens = p.Next()
			}
			if rng.IntN(3) == 0 {
				r.lookahead = 1 + rng.IntN(ebt)
			}
			if err := admit(r, tokens, req); errors.Is(err, kvtier.ErrNoSpace) {
				continue
			} else if err != nil {
				t.Fatalf("op %d: admit: %v", op, err)
			}
			reqs = append(reqs, r)
		case k < 14 && len(live) > 0:
			step(live[rng.IntN(len(live))])
		case k == 14 && len(live) > 0: // preempt and readmit later
			r := live[rng.IntN(len(live))]
			if rng.IntN(2) == 0 {
				errs, err := m.Swap(ctx, []uint64{r.seq})
				if err != nil || errs[0] != nil {
					t.Fatalf("swap: %v %v", err, errs)
				}
				counts["swap"]++
			} else if err := m.Free(ctx, r.seq); err != nil {
				t.Fatal(err)
			}
			r.live = false
			// Readmission: the rows it computed stay valid.
			tokens := r.tokens
			if err := admit(r, tokens, kvtier.AllocRequest{}); errors.Is(err, kvtier.ErrNoSpace) {
				reqs = slices.DeleteFunc(reqs, func(x *mixedReq) bool { return x == r })
			} else if err != nil {
				t.Fatal(err)
			}
		case k == 15 && len(live) > 0: // abort with garbage past the committed prefix
			r := live[rng.IntN(len(live))]
			buf := make([]byte, m.Layout().BlockBytes())
			for i := range buf {
				buf[i] = byte(rng.IntN(256))
			}
			// Only blocks past the last commit: the engine's own
			// uncommitted ones, never a shared or committed block.
			for _, b := range r.kv.Table[(r.computed+ebt-1)/ebt:] {
				if err := m.Arena().WriteBlock(int(b), 0, buf); err != nil {
					t.Fatal(err)
				}
			}
			if err := m.Free(ctx, r.seq); err != nil {
				t.Fatal(err)
			}
			r.live = false
			reqs = slices.DeleteFunc(reqs, func(x *mixedReq) bool { return x == r })
			counts["abort"]++
		case k == 16: // delete a stem's chain in some namespace
			ns := nss[rng.IntN(len(nss))]
			if _, err := m.DeleteChain(ctx, kvtier.Chain{Tokens: p.Stems[rng.IntN(len(p.Stems))], Salt: ns.salt, LoRA: ns.lora}); err != nil {
				t.Fatal(err)
			}
			counts["delete"]++
		case k == 17:
			ns := nss[rng.IntN(len(nss))]
			if _, err := m.PrefetchChain(ctx, kvtier.Chain{Tokens: p.Stems[rng.IntN(len(p.Stems))], Salt: ns.salt, LoRA: ns.lora}); err != nil {
				t.Fatal(err)
			}
		case k == 18: // push the GPU's cache down
			held := 0
			for _, r := range live {
				held += len(r.kv.Table)
			}
			if err := enginetest.EvictGPU(ctx, m, p, 1<<40, gpuBlocks-held); err != nil && !errors.Is(err, kvtier.ErrNoSpace) {
				t.Fatal(err)
			}
			counts["evict"]++
		case k == 19 && len(live) == 0: // restart on the same disk
			mustClose(t, m)
			m = mustNew(t, cfg)
			for _, r := range reqs {
				r.m = m
			}
			counts["restart"]++
		}
	}
	for _, r := range reqs {
		for r.live {
			step(r)
		}
	}
	if err := enginetest.CheckNoLeaks(ctx, m); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d requests finished; %v", len(done), counts)
}
