package kvtier_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/kvtier/kvtier"
	"github.com/kvtier/kvtier/gpu"
	"github.com/kvtier/kvtier/internal/enginetest"
	"github.com/kvtier/kvtier/refengine"
)

// Probes from an engine author's side: each drives the public API as a
// serving engine would, in a way internal/enginetest's Gen does not (lookahead
// slots, truncation, adapters whose KV differs, one Step doing several
// things), and checks every logit against a recompute with no cache.

// probeSeq is a hand-written engine loop over one sequence: the tokens it
// holds, its block table and the rows of logits it computed.
type probeSeq struct {
	t      *testing.T
	m      *kvtier.Manager
	model  *refengine.Model
	seq    uint64
	tokens []int64
	kv     *enginetest.KV
	rows   map[int][]float32 // position → logits
}

func newProbeSeq(t *testing.T, m *kvtier.Manager, model *refengine.Model, seq uint64) *probeSeq {
	return &probeSeq{t: t, m: m, model: model, seq: seq, rows: map[int][]float32{}}
}

// admit allocates req, waits for its loads and returns the valid tokens.
func (s *probeSeq) admit(ctx context.Context, req kvtier.AllocRequest) (kvtier.AllocResult, int) {
	s.t.Helper()
	req.Seq = s.seq
	r, err := s.m.Allocate(ctx, req)
	if err != nil {
		s.t.Fatalf("seq %d: allocate: %v", s.seq, err)
	}
	<-r.Ready.Done()
	out := r.Ready.Outcome()
	table := r.Blocks
	if out.Blocks != nil {
		table = out.Blocks
	}
	s.tokens = append([]int64(nil), req.Tokens[:len(req.Tokens)-r.Truncated]...)
	s.kv = enginetest.NewKV(s.m, table)
	return r, out.ValidTokens
}

// forward computes tokens at positions start.. (writing their KV) and keeps
// the logits of those below keep.
func (s *probeSeq) forward(tokens []int64, start, keep int) [][]float32 {
	s.t.Helper()
	rows, err := s.model.Forward(s.kv, tokens, start)
	if err != nil {
		s.t.Fatalf("seq %d: forward at %d: %v", s.seq, start, err)
	}
	for i, r := range rows {
		if start+i < keep {
			s.rows[start+i] = r
		}
	}
	return rows
}

// check compares every kept row with a recompute of s.tokens.
func (s *probeSeq) check() {
	s.t.Helper()
	want, err := s.model.Reference(s.tokens)
	if err != nil {
		s.t.Fatal(err)
	}
	if len(s.rows) == 0 {
		s.t.Fatalf("seq %d: no logits", s.seq)
	}
	for pos, r := range s.rows {
		for j, x := range r {
			if math.Float32bits(x) != math.Float32bits(want[pos][j]) {
				s.t.Fatalf("seq %d: position %d logit %d: %v with the cache, %v recomputed", s.seq, pos, j, x, want[pos][j])
			}
		}
	}
}

// TestProbeEngineSpeculativeLookahead: an engine decoding speculatively
// allocates with Lookahead, writes the KV of draft tokens into the
// lookahead slots, keeps only the accepted ones (Append with Lookahead,
// Commit of the accepted prefix), and leaves the rejected drafts' KV in the
// slots past the sequence until the next pass overwrites it. The blocks
// Append hands out extend the table exactly; the rejected drafts' KV is never
// served: a request over the accepted sequence, on the GPU and after the
// blocks went down to pinned memory, gets the recompute's logits.
func TestProbeEngineSpeculativeLookahead(t *testing.T) {
	ctx := engineCtx(t)
	const gpuBlocks, draft = 32, 3
	cfg := engineConfig(t, gpuBlocks, 64, gpu.LayerSeparate)
	m := mustNew(t, cfg)
	defer mustClose(t, m)
	model := engineModel(t)
	p := enginetest.NewPrompts(61, refengine.TinyConfig.Vocab, ebt, 1)
	prompt := p.Unique(2*ebt + 1)

	s := newProbeSeq(t, m, model, 1)
	r, valid := s.admit(ctx, kvtier.AllocRequest{Tokens: prompt, Lookahead: draft, MaxHitTokens: len(prompt) - 1})
	if valid != 0 || len(r.Blocks) != (len(prompt)+draft+ebt-1)/ebt {
		t.Fatalf("a fresh prompt with lookahead %d: %d valid, %d blocks", draft, valid, len(r.Blocks))
	}
	rows := s.forward(prompt, 0, len(prompt))
	if err := m.Commit(ctx, s.seq, len(prompt)); err != nil {
		t.Fatal(err)
	}
	next := refengine.Argmax(rows[len(rows)-1])
	for step := range 4 * ebt {
		n := len(s.tokens)
		// The draft: the true next token, then wrong guesses (the
		// drafter is wrong after the first): their KV lands in the
		// lookahead slots at n+1.. and is rejected.
		drafts := []int64{next}
		for i := 1; i < draft; i++ {
			drafts = append(drafts, (next+int64(7*i+step))%int64(refengine.TinyConfig.Vocab))
		}
		rows := s.forward(drafts, n, n+1)
		accepted := drafts[:1]
		if refengine.Argmax(rows[0]) == drafts[1] {
			t.Fatalf("step %d: the drafter guessed right; pick other guesses", step)
		}
		res, err := m.AppendBatch(ctx, []kvtier.AppendItem{{Seq: s.seq, Tokens: accepted, Lookahead: draft}})
		if err != nil || res[0].Err != nil {
			t.Fatalf("step %d: append: %v %+v", step, err, res)
		}
		s.kv.Table = append(s.kv.Table, res[0].Blocks...)
		s.tokens = append(s.tokens, accepted...)
		if want := (len(s.tokens) + draft + ebt - 1) / ebt; len(s.kv.Table) != want {
			t.Fatalf("step %d: %d tokens with lookahead %d hold %d blocks, want %d", step, len(s.tokens), draft, len(s.kv.Table), want)
		}
		// The accepted token's KV was written by the verify pass; its
		// logits give the next token.
		if err := m.Commit(ctx, s.seq, len(s.tokens)); err != nil {
			t.Fatal(err)
		}
		next = refengine.Argmax(rows[0])
	}
	s.check()
	full := append([]int64(nil), s.tokens...)
	if err := m.Free(ctx, s.seq); err != nil {
		t.Fatal(err)
	}

	serve := func(seq uint64, where kvtier.Tier) {
		t.Helper()
		g := newProbeSeq(t, m, model, seq)
		r, valid := g.admit(ctx, kvtier.AllocRequest{Tokens: full, MaxHitTokens: len(full) - 1})
		if want := (len(full) - 1) / ebt * ebt; valid != want || r.Tokens.Of(where) != want {
			t.Fatalf("seq %d over the accepted sequence: %d valid, %+v, want %d from %v", seq, valid, r.Tokens, want, where)
		}
		g.forward(full[valid:], valid, len(full))
		g.check()
		if err := m.Free(ctx, seq); err != nil {
			t.Fatal(err)
		}
	}
	serve(2, kvtier.GPU)
	if err := enginetest.EvictGPU(ctx, m, p, 1<<40, gpuBlocks); err != nil {
		t.Fatal(err)
	}
	if err := m.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	serve(3, kvtier.Pinned)
	if err := enginetest.CheckNoLeaks(ctx, m); err != nil {
		t.Fatal(err)
	}
}

// TestProbeEngineTruncate: a prompt longer than MaxSeqLen with Truncate is
// served as its first MaxSeqLen tokens: the engine computes those (the
// result's Truncated says how many were cut), commits them (a commit past
// them is ErrBadCommit and changes nothing), decodes, and a later request,
// truncated the same way or naming the kept tokens, hits those blocks with
// the recompute's logits.
func TestProbeEngineTruncate(t *testing.T) {
	ctx := engineCtx(t)
	m := mustNew(t, engineConfig(t, 32, 0, gpu.BlockContiguous))
	defer mustClose(t, m)
	model := engineModel(t)
	p := enginetest.NewPrompts(62, refengine.TinyConfig.Vocab, ebt, 1)
	const keep = 3*ebt + 2
	long := p.Unique(keep + 2*ebt + 1)

	s := newProbeSeq(t, m, model, 1)
	r, valid := s.admit(ctx, kvtier.AllocRequest{Tokens: long, MaxSeqLen: keep, Truncate: true, MaxHitTokens: keep - 1})
	if r.Truncated != len(long)-keep || len(s.tokens) != keep || valid != 0 || len(r.Blocks) != (keep+ebt-1)/ebt {
		t.Fatalf("truncated to %d: %+v, %d valid", keep, r, valid)
	}
	if err := m.Commit(ctx, s.seq, keep+1); !errors.Is(err, kvtier.ErrBadCommit) {
		t.Fatalf("a commit past the kept tokens: %v, want ErrBadCommit", err)
	}
	rows := s.forward(s.tokens, 0, keep)
	if err := m.Commit(ctx, s.seq, keep); err != nil {
		t.Fatal(err)
	}
	for range ebt {
		tok := refengine.Argmax(rows[len(rows)-1])
		blocks, err := m.Append(ctx, s.seq, []int64{tok})
		if err != nil {
			t.Fatal(err)
		}
		s.kv.Table = append(s.kv.Table, blocks...)
		s.tokens = append(s.tokens, tok)
		rows = s.forward([]int64{tok}, len(s.tokens)-1, len(s.tokens))
		if err := m.Commit(ctx, s.seq, len(s.tokens)); err != nil {
			t.Fatal(err)
		}
	}
	s.check()
	if err := m.Free(ctx, s.seq); err != nil {
		t.Fatal(err)
	}

	for i, req := range []kvtier.AllocRequest{
		{Tokens: long, MaxSeqLen: keep, Truncate: true, MaxHitTokens: keep - 1},
		{Tokens: long[:keep], MaxHitTokens: keep - 1},
	} {
		g := newProbeSeq(t, m, model, uint64(10+i))
		r, valid := g.admit(ctx, req)
		if want := (keep - 1) / ebt * ebt; valid != want || r.Tokens.Of(kvtier.GPU) != want {
			t.Fatalf("request %d: %d valid, %+v, want %d GPU tokens", i, valid, r, want)
		}
		g.forward(g.tokens[valid:], valid, keep)
		g.check()
		if err := m.Free(ctx, g.seq); err != nil {
			t.Fatal(err)
		}
	}
	if err := enginetest.CheckNoLeaks(ctx, m); err != nil {
		t.Fatal(err)
	}
}

// TestProbeEngineAdapterKVNeverCrosses: the same tokens under a LoRA
// adapter (whose KV differs: here a model with other weights), under the
// base model and under a tenant salt are three chains. Each request gets
// only its own chain's KV, on the GPU, from pinned memory, from disk, and
// from disk after a restart: every logit equals its own model's
// recompute, and each hit comes from where the scenario put its chain.
func TestProbeEngineAdapterKVNeverCrosses(t *testing.T) {
	ctx := engineCtx(t)
	const gpuBlocks = 16
	cfg := engineConfig(t, gpuBlocks, 24, gpu.BlockContiguous)
	cfg.DiskDir, cfg.DiskBytes = t.TempDir(), 1<<22
	cfg.DiskIngestion = kvtier.IngestAll // what reaches pinned memory goes on to disk
	base := engineModel(t)
	acfg := refengine.TinyConfig
	acfg.Seed = 99
	adapter, err := refengine.New(acfg)
	if err != nil {
		t.Fatal(err)
	}
	p := enginetest.NewPrompts(63, refengine.TinyConfig.Vocab, ebt, 1)
	prompt := p.Unique(3*ebt + 1)
	type variant struct {
		salt, lora string
		model      *refengine.Model
	}
	variants := []variant{{"", "sql-lora", adapter}, {"", "", base}, {"tenant", "", base}, {"tenant", "sql-lora", adapter}}
	seq := uint64(1)
	serve := func(m *kvtier.Manager, v variant, want kvtier.Tier, wantTokens int) {
		t.Helper()
		s := newProbeSeq(t, m, v.model, seq)
		seq++
		r, valid := s.admit(ctx, kvtier.AllocRequest{Tokens: prompt, Salt: v.salt, LoRA: v.lora, MaxHitTokens: len(prompt) - 1})
		if valid != wantTokens || r.Tokens.Of(want) != wantTokens {
			t.Fatalf("salt %q lora %q: %d valid, %+v, want %d from %v", v.salt, v.lora, valid, r.Tokens, wantTokens, want)
		}
		s.forward(prompt[valid:], valid, len(prompt))
		if err := m.Commit(ctx, s.seq, len(prompt)); err != nil {
			t.Fatal(err)
		}
		s.check()
		if err := m.Free(ctx, s.seq); err != nil {
			t.Fatal(err)
		}
	}
	cached := (len(prompt) - 1) / ebt * ebt
	m := mustNew(t, cfg)
	for _, v := range variants {
		serve(m, v, kvtier.GPU, 0) // the first of each computes all
	}
	for _, v := range variants {
		serve(m, v, kvtier.GPU, cached)
	}
	// Push everything down: a GPU-sized allocation evicts every chain to
	// pinned memory, which writes it through to disk.
	for i := range 1 {
		if err := enginetest.EvictGPU(ctx, m, p, uint64(1<<40+i), gpuBlocks); err != nil {
			t.Fatal(err)
		}
		if err := m.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for _, v := range variants {
		pr, err := m.ExistsChain(ctx, kvtier.Chain{Tokens: prompt, Salt: v.salt, LoRA: v.lora})
		if err != nil || pr.Tokens.Of(kvtier.Disk) != cached {
			t.Fatalf("salt %q lora %q not on disk: %+v (%v)", v.salt, v.lora, pr, err)
		}
	}
	mustClose(t, m)
	m = mustNew(t, cfg)
	defer mustClose(t, m)
	for _, v := range variants {
		serve(m, v, kvtier.Disk, cached)
	}
}

// stepSeq is one request in TestProbeEngineStepBatching's engine.
type stepSeq struct {
	*probeSeq
	computed, decode int
	last             []float32 // logits of the last computed position
	pending          int64     // the token Append adds this step
}

// TestProbeEngineStepBatching: a continuous-batching engine that drives
// everything through Step, one message a step: the commits of the pass it
// just ran, the frees of finished requests (committed in the same message),
// the appends of the tokens it sampled, and the admissions of new requests.
// Arrivals include identical prompts admitted in the same step (neither may
// hit the other's uncommitted blocks), a request whose prompt is a finished
// one's whole sequence, prompts differing in a block's last token, and ids
// freed and admitted again in the same step. Every logit equals a recompute,
// and requests admitted after a commit hit what it published.
func TestProbeEngineStepBatching(t *testing.T) {
	ctx := engineCtx(t)
	const gpuBlocks = 48
	cfg := engineConfig(t, gpuBlocks, 32, gpu.BlockContiguous)
	m := mustNew(t, cfg)
	defer mustClose(t, m)
	model := engineModel(t)
	p := enginetest.NewPrompts(64, refengine.TinyConfig.Vocab, ebt, 3)
	const chunk = ebt + 1
	vocab := int64(refengine.TinyConfig.Vocab)

	var running []*stepSeq
	var finished [][]int64
	var hitTokens, sameStep, reused int
	nextID := uint64(1)
	admitted := 0
	for step := 0; step < 200 && (admitted < 40 || len(running) > 0); step++ {
		var req kvtier.StepRequest
		// The pass: a chunk of each prefill, a token of each decode.
		var still []*stepSeq
		var freed []uint64
		for _, s := range running {
			if s.computed < len(s.tokens) {
				end := min(s.computed+chunk, len(s.tokens))
				rows := s.forward(s.tokens[s.computed:end], s.computed, end)
				s.computed, s.last = end, rows[len(rows)-1]
				req.Commit = append(req.Commit, kvtier.CommitItem{Seq: s.seq, Tokens: end})
			}
			if s.computed < len(s.tokens) {
				still = append(still, s)
				continue
			}
			if s.decode == 0 {
				s.check()
				finished = append(finished, s.tokens)
				req.Free = append(req.Free, s.seq)
				freed = append(freed, s.seq)
				continue
			}
			s.decode--
			s.pending = refengine.Argmax(s.last)
			req.Append = append(req.Append, kvtier.AppendItem{Seq: s.seq, Tokens: []int64{s.pending}})
			still = append(still, s)
		}
		// Arrivals: up to three a step, of several kinds.
		var arrivals []*stepSeq
		for a := 0; a < 3 && admitted < 40 && len(still)+len(arrivals) < 6; a++ {
			var prompt []int64
			switch k := p.IntN(5); {
			case k == 0 && len(finished) > 0: // a finished request's whole sequence, and more
				prompt = append(append([]int64(nil), finished[p.IntN(len(finished))]...), p.Unique(p.IntN(ebt))...)
			case k == 1 && len(arrivals) > 0: // the same prompt as an arrival of this step
				prompt = append([]int64(nil), arrivals[len(arrivals)-1].tokens...)
			case k == 2: // a stem with its last block's last token changed
				s := p.Stems[p.IntN(len(p.Stems))]
				prompt = append(append([]int64(nil), s...), p.Unique(1+p.IntN(ebt))...)
				prompt[len(s)-1] = (prompt[len(s)-1] + 1) % vocab
			default:
				prompt = p.Next()
			}
			// Ids are reused: a freed id comes back in the same step.
			id := nextID
			if len(freed) > 0 {
				id, freed = freed[0], freed[1:]
				reused++
			} else {
				nextID++
			}
			s := &stepSeq{probeSeq: newProbeSeq(t, m, model, id), decode: 1 + p.IntN(2*ebt)}
			s.tokens = prompt
			arrivals = append(arrivals, s)
			req.Allocate = append(req.Allocate, kvtier.AllocRequest{Seq: id, Tokens: prompt, MaxHitTokens: len(prompt) - 1})
			admitted++
		}
		res, err := m.Step(ctx, req)
		if err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
		for i, err := range res.CommitErrs {
			if err != nil {
				t.Fatalf("step %d: commit %+v: %v", step, req.Commit[i], err)
			}
		}
		for i, err := range res.FreeErrs {
			if err != nil {
				t.Fatalf("step %d: free %d: %v", step, req.Free[i], err)
			}
		}
		for i, a := range res.Appends {
			if a.Err != nil {
				t.Fatalf("step %d: append %+v: %v", step, req.Append[i], a.Err)
			}
		}
		for _, s := range still {
			if s.computed == len(s.tokens) { // appended this step
				s.tokens = append(s.tokens, s.pending)
			}
		}
		for i, a := range res.Appends {
			for _, s := range still {
				if s.seq == req.Append[i].Seq {
					s.kv.Table = append(s.kv.Table, a.Blocks...)
				}
			}
		}
		for i, r := range res.Allocs {
			s := arrivals[i]
			if r.Err != nil {
				t.Fatalf("step %d: allocate seq %d: %v", step, s.seq, r.Err)
			}
			<-r.Ready.Done()
			out := r.Ready.Outcome()
			table := r.Blocks
			if out.Blocks != nil {
				table = out.Blocks
			}
			s.kv = enginetest.NewKV(m, table)
			s.computed = out.ValidTokens
			hitTokens += out.ValidTokens
			// Two arrivals of one prompt in one step: the second must
			// not have hit the first's blocks, which nothing computed,
			// so it starts from no more than the first.
			for _, o := range arrivals[:i] {
				if slices.Equal(o.tokens, s.tokens) && s.computed > o.computed {
					t.Fatalf("step %d: seq %d starts from %d tokens of a prompt whose first copy in the step, seq %d, starts from %d", step, s.seq, s.computed, o.seq, o.computed)
				}
				if slices.Equal(o.tokens, s.tokens) {
					sameStep++
				}
			}
			still = append(still, s)
		}
		running = still
	}
	if len(running) > 0 || admitted < 40 || hitTokens == 0 || sameStep == 0 || reused == 0 {
		t.Fatalf("%d requests admitted, %d still running, %d tokens hit, %d prompts admitted twice in a step, %d ids freed and admitted in one step",
			admitted, len(running), hitTokens, sameStep, reused)
	}
	if err := enginetest.CheckNoLeaks(ctx, m); err != nil {
		t.Fatal(err)
	}
}

// TestProbeEngineRemoteOtherModel: two models of one shape (a fine-tune:
// other weights, the same KV size) share a Redis prefix. A node of the
// second model, its local tiers empty, loads nothing the first wrote
// through, and computes its own KV; nodes of each model then load that
// model's blocks, not the other's, under the other arena layout than the
// writer's (the shared tier holds one host form), with the recompute's
// logits for each.
func TestProbeEngineRemoteOtherModel(t *testing.T) {
	addr := standaloneRedis(t)
	ctx := engineCtx(t)
	prefix := fmt.Sprintf("test-engine-model-%d", rand.Uint64())
	raw := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() {
		dropKeys(t, raw, prefix)
		raw.Close()
	})
	base := engineModel(t)
	fcfg := refengine.TinyConfig
	fcfg.Seed = 7
	tuned, err := refengine.New(fcfg)
	if err != nil {
		t.Fatal(err)
	}
	p := enginetest.NewPrompts(65, refengine.TinyConfig.Vocab, ebt, 1)
	prompts := [][]int64{p.Unique(3*ebt + 1), p.Unique(2 * ebt), p.Unique(4*ebt + 3)}

	seq := uint64(1)
	node := func(modelID string, model *refengine.Model, kind gpu.LayoutKind) (loaded int) {
		t.Helper()
		cfg := engineConfig(t, 24, 32, kind)
		cfg.ModelID = modelID
		cfg.Ingestion, cfg.DiskIngestion = kvtier.IngestAll, kvtier.IngestAll
		cfg.Remote = &kvtier.RemoteConfig{Addrs: []string{addr}, Prefix: prefix}
		m := mustNew(t, cfg)
		defer mustClose(t, m)
		for _, prompt := range prompts {
			s := newProbeSeq(t, m, model, seq)
			seq++
			r, valid := s.admit(ctx, kvtier.AllocRequest{Tokens: prompt, MaxHitTokens: len(prompt) - 1})
			loaded += r.Tokens.Of(kvtier.Remote)
			s.forward(prompt[valid:], valid, len(prompt))
			if err := m.Commit(ctx, s.seq, len(prompt)); err != nil {
				t.Fatal(err)
			}
			s.check()
			if err := m.Free(ctx, s.seq); err != nil {
				t.Fatal(err)
			}
		}
		if err := m.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		return loaded
	}
	if n := node("refengine-tiny@1", base, gpu.BlockContiguous); n != 0 {
		t.Fatalf("the first node found %d tokens in an empty prefix", n)
	}
	if n := node("refengine-tiny-finetune@1", tuned, gpu.BlockContiguous); n != 0 {
		t.Fatalf("a node of another model was promised %d tokens of the first model's blocks", n)
	}
	if n := node("refengine-tiny@1", base, gpu.LayerSeparate); n == 0 {
		t.Fatal("a node of the first model loaded nothing from the shared tier")
	}
	if n := node("refengine-tiny-finetune@1", tuned, gpu.LayerSeparate); n == 0 {
		t.Fatal("a node of the fine-tune loaded nothing its first node wrote")
	}
}

// heldLoads is the setup of the probes that act while a load is held on
// the copy stream: a Manager over a host device whose copies up wait while
// hold is on, and a prompt computed once and evicted from the GPU, so that
// its blocks are only in pinned memory.
type heldLoads struct {
	m      *kvtier.Manager
	model  *refengine.Model
	p      *enginetest.Prompts
	prompt []int64
	gate   atomic.Pointer[chan struct{}]
}

func newHeldLoads(ctx context.Context, t *testing.T, seed uint64, gpuBlocks int, kind gpu.LayoutKind, promptTokens int) *heldLoads {
	t.Helper()
	h := &heldLoads{}
	dev, err := gpu.NewHost(gpu.HostConfig{Fault: func(dir gpu.Direction, _ []gpu.CopyOp) error {
		if g := h.gate.Load(); dir == gpu.H2D && g != nil {
			<-*g
		}
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	cfg := engineConfig(t, gpuBlocks, 32, kind)
	cfg.Device = dev
	h.m = mustNew(t, cfg)
	t.Cleanup(func() { mustClose(t, h.m) })
	h.model = engineModel(t)
	h.p = enginetest.NewPrompts(seed, refengine.TinyConfig.Vocab, ebt, 1)
	h.prompt = h.p.Unique(promptTokens)
	g := (&enginetest.Engine{M: h.m, Model: h.model}).NewGen(1, h.prompt, "")
	if err := g.Run(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if err := enginetest.EvictGPU(ctx, h.m, h.p, 1<<40, gpuBlocks); err != nil {
		t.Fatal(err)
	}
	if err := h.m.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	return h
}

// hold makes copies up wait until the returned release is called.
func (h *heldLoads) hold() (release func()) {
	held := make(chan struct{})
	h.gate.Store(&held)
	return func() {
		h.gate.Store(nil)
		close(held)
	}
}

// completeLoad waits for r's load, computes the tokens it left into the
// block table the load ended with, commits s.tokens and checks every row
// against the recompute. It returns the load's outcome.
func (s *probeSeq) completeLoad(ctx context.Context, r kvtier.AllocResult) kvtier.OnboardOutcome {
	<-r.Ready.Done()
	out := r.Ready.Outcome()
	table := r.Blocks
	if out.Blocks != nil {
		table = out.Blocks
	}
	s.kv = enginetest.NewKV(s.m, table)
	s.forward(s.tokens[out.ValidTokens:], out.ValidTokens, len(s.tokens))
	if err := s.m.Commit(ctx, s.seq, len(s.tokens)); err != nil {
		s.t.Fatal(err)
	}
	s.check()
	return out
}

// TestProbeEngineSamePromptWhileLoading: a prompt's blocks are only in
// pinned memory, and its load into one sequence is held on the copy
// stream. Meanwhile a second sequence asks for the same prompt and more, a
// third for a prompt that shares its first blocks, and the first's Ready
// must not be done: nothing arrived. Neither may be served the blocks being
// loaded as if they were there: their Ready completes only after the copy,
// and every sequence, once it computed the rest, has the recompute's logits.
func TestProbeEngineSamePromptWhileLoading(t *testing.T) {
	ctx := engineCtx(t)
	h := newHeldLoads(ctx, t, 66, 32, gpu.LayerSeparate, 4*ebt+2)
	m, model, p, prompt := h.m, h.model, h.p, h.prompt
	release := h.hold()
	more := append(append([]int64(nil), prompt...), p.Unique(ebt+1)...)
	other := append(append([]int64(nil), prompt[:2*ebt]...), p.Unique(2*ebt+3)...)
	var seqs []*probeSeq
	var results []kvtier.AllocResult
	for i, tokens := range [][]int64{prompt, more, other} {
		s := newProbeSeq(t, m, model, uint64(10+i))
		s.tokens = tokens
		r, err := m.Allocate(ctx, kvtier.AllocRequest{Seq: s.seq, Tokens: tokens, MaxHitTokens: len(tokens) - 1})
		if err != nil {
			t.Fatalf("seq %d: %v", s.seq, err)
		}
		select {
		case <-r.Ready.Done():
			if out := r.Ready.Outcome(); out.ValidTokens > 0 {
				t.Fatalf("seq %d: Ready done with %d valid tokens while every copy up is held: %+v, %+v", s.seq, out.ValidTokens, r, out)
			}
		default:
		}
		seqs, results = append(seqs, s), append(results, r)
	}
	if results[0].Tokens.Below() == 0 {
		t.Fatalf("the first sequence loads nothing: %+v", results[0])
	}
	release()
	for i, s := range seqs {
		out := s.completeLoad(ctx, results[i])
		t.Logf("seq %d: %+v; outcome valid %d", s.seq, results[i].Tokens, out.ValidTokens)
	}
	for _, s := range seqs {
		if err := m.Free(ctx, s.seq); err != nil {
			t.Fatal(err)
		}
	}
	if err := enginetest.CheckNoLeaks(ctx, m); err != nil {
		t.Fatal(err)
	}
}

// TestProbeEngineFreeWhileLoading: a sequence is freed (preempted, or its
// client gone) while its load from pinned memory is held on the copy
// stream, and its id is admitted again at once; other sequences then take
// every free block and compute into them before the held copy lands. The
// late copy must land in no block another sequence computes into: after
// it lands, every sequence decodes (reading all its KV) with the
// recompute's logits.
func TestProbeEngineFreeWhileLoading(t *testing.T) {
	ctx := engineCtx(t)
	h := newHeldLoads(ctx, t, 67, 24, gpu.BlockContiguous, 5*ebt+1)
	m, model, p, prompt := h.m, h.model, h.p, h.prompt
	release := h.hold()
	r, err := m.Allocate(ctx, kvtier.AllocRequest{Seq: 2, Tokens: prompt, MaxHitTokens: len(prompt) - 1})
	if err != nil || r.Tokens.Of(kvtier.Pinned) == 0 {
		t.Fatalf("no load from pinned memory: %+v %v", r, err)
	}
	if err := m.Free(ctx, 2); err != nil {
		t.Fatal(err)
	}
	s := newProbeSeq(t, m, model, 2)
	s.tokens = prompt
	r2, err := m.Allocate(ctx, kvtier.AllocRequest{Seq: 2, Tokens: prompt, MaxHitTokens: len(prompt) - 1})
	if err != nil {
		t.Fatal(err)
	}
	// Others take what is free, and compute into it, while the copy is
	// held: their prompts are fresh, so they need no copy up.
	e := &enginetest.Engine{M: m, Model: model}
	var gens []*enginetest.Gen
	for i := uint64(0); ; i++ {
		gen := e.NewGen(100+i, p.Unique(2*ebt+1), "")
		if err := gen.Admit(ctx); errors.Is(err, kvtier.ErrNoSpace) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		if err := gen.Prefill(ctx); err != nil {
			t.Fatal(err)
		}
		gens = append(gens, gen)
	}
	if len(gens) == 0 {
		t.Fatal("no sequence found free blocks while the load was held")
	}
	release()
	<-r.Ready.Done()
	out := s.completeLoad(ctx, r2)
	if err := m.Free(ctx, 2); err != nil {
		t.Fatal(err)
	}
	t.Logf("readmitted while its load was held: %+v, %d valid; %d sequences computed meanwhile", r2.Tokens, out.ValidTokens, len(gens))
	if err := m.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	for _, gen := range gens {
		// The decode attends to the whole prompt's KV, after the late
		// copy landed wherever it landed.
		if err := gen.Decode(ctx, 1); errors.Is(err, kvtier.ErrNoSpace) {
			// A full GPU: free one and go on.
		} else if err != nil {
			t.Fatal(err)
		}
		if err := gen.Finish(ctx); err != nil {
			t.Fatal(err)
		}
		if err := gen.Check(); err != nil {
			t.Fatal(err)
		}
	}
	again := e.NewGen(3, prompt, "")
	if err := again.Run(ctx, 2); err != nil {
		t.Fatal(err)
	}
	if err := again.Check(); err != nil {
		t.Fatal(err)
	}
	if err := enginetest.CheckNoLeaks(ctx, m); err != nil {
		t.Fatal(err)
	}
}

// TestProbeEngineDeleteWhileHeld: a chain is deleted while a live sequence
// holds its first blocks, committed, and is still prefilling the rest.
// The held blocks stay with the sequence but are never served again: not
// to a request admitted meanwhile, not after the sequence commits the
// rest (written through at once, chained to the deleted blocks), not
// after it is swapped out, and not after a restart on the same disk.
func TestProbeEngineDeleteWhileHeld(t *testing.T) {
	ctx := engineCtx(t)
	cfg := engineConfig(t, 32, 32, gpu.BlockContiguous)
	cfg.DiskDir, cfg.DiskBytes = t.TempDir(), 1<<22
	cfg.Ingestion, cfg.DiskIngestion = kvtier.IngestAll, kvtier.IngestAll
	m := mustNew(t, cfg)
	model := engineModel(t)
	p := enginetest.NewPrompts(70, refengine.TinyConfig.Vocab, ebt, 1)
	prompt := p.Unique(4*ebt + 1)
	nowhere := func(when string) {
		t.Helper()
		pr, err := m.Exists(ctx, prompt, "")
		if err != nil || pr.Tokens.Sum() != 0 {
			t.Fatalf("%s: the deleted chain is still held: %+v (%v)", when, pr.Tokens, err)
		}
		lr, err := m.Lookup(ctx, kvtier.LookupRequest{Tokens: prompt})
		if err != nil || lr.Tokens.Sum() != 0 {
			t.Fatalf("%s: a lookup finds %+v of the deleted chain (%v)", when, lr.Tokens, err)
		}
	}

	e := &enginetest.Engine{M: m, Model: model, Chunk: 2 * ebt}
	a := e.NewGen(1, prompt, "")
	if err := a.Admit(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := a.PrefillChunk(ctx); err != nil {
		t.Fatal(err)
	}
	if err := m.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if pr, err := m.Exists(ctx, prompt, ""); err != nil || pr.Tokens.Of(kvtier.Disk) != 2*ebt {
		t.Fatalf("the first chunk was not written through: %+v (%v)", pr.Tokens, err)
	}
	if n, err := m.Delete(ctx, prompt, ""); err != nil || n == 0 {
		t.Fatalf("delete: %d copies, %v", n, err)
	}
	nowhere("after the delete")
	b := e.NewGen(2, prompt, "")
	if err := b.Admit(ctx); err != nil {
		t.Fatal(err)
	}
	if b.LastOut.ValidTokens != 0 {
		t.Fatalf("a request admitted after the delete starts from %d tokens", b.LastOut.ValidTokens)
	}
	if err := b.Abort(ctx, false /* garbage */); err != nil {
		t.Fatal(err)
	}
	if err := a.Prefill(ctx); err != nil {
		t.Fatal(err)
	}
	if err := m.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	nowhere("after the holder committed the rest")
	if err := a.Preempt(ctx, true /* swap */); err != nil {
		t.Fatal(err)
	}
	if err := m.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	nowhere("after the holder was swapped out")
	mustClose(t, m)
	m = mustNew(t, cfg)
	defer mustClose(t, m)
	nowhere("after a restart")
	c := (&enginetest.Engine{M: m, Model: model}).NewGen(3, prompt, "")
	if err := c.Run(ctx, 2); err != nil {
		t.Fatal(err)
	}
	if err := c.Check(); err != nil {
		t.Fatal(err)
	}
	if c.Last.Tokens.Sum() != 0 {
		t.Fatalf("after a restart the deleted chain serves %+v", c.Last.Tokens)
	}
}
