package kvtier_test

import (
	"context"
	"testing"
	"time"

	"github.com/kvtier/kvtier"
	"github.com/kvtier/kvtier/gpu"
	"github.com/kvtier/kvtier/internal/enginetest"
	"github.com/kvtier/kvtier/refengine"
)

// The engine tests drive refengine, a real transformer, through the public
// API (internal/enginetest) and compare every logit with a recompute of the
// whole sequence with no cache, bit for bit. Each asserts that the tier or
// path it names was actually exercised, so that it fails if the path is not.

const (
	ebt      = 4 // tokens per block in the engine tests
	engineTO = 60 * time.Second
)

var layouts = []gpu.LayoutKind{gpu.BlockContiguous, gpu.LayerSeparate}

func engineModel(t *testing.T) *refengine.Model {
	t.Helper()
	model, err := enginetest.NewModel()
	if err != nil {
		t.Fatal(err)
	}
	return model
}

func engineConfig(t *testing.T, gpuBlocks, pinnedSlots int, kind gpu.LayoutKind) kvtier.Config {
	t.Helper()
	cfg, err := enginetest.Config(ebt, gpuBlocks, pinnedSlots, kind)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func engineCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), engineTO)
	t.Cleanup(cancel)
	return ctx
}

func mustNew(t *testing.T, cfg kvtier.Config) *kvtier.Manager {
	t.Helper()
	m, err := kvtier.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func mustClose(t *testing.T, m *kvtier.Manager) {
	t.Helper()
	if err := m.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// serveChecked serves n requests from p one after another (seq ids from
// base), one in abortEvery aborted after its first chunk (0: none), decodes
// decode tokens each, checks every logit, and returns the tally.
func serveChecked(t *testing.T, ctx context.Context, e *enginetest.Engine, p *enginetest.Prompts, base uint64, n, decode, abortEvery int) enginetest.Tally {
	t.Helper()
	var tally enginetest.Tally
	for i := range n {
		g := e.NewGen(base+uint64(i), p.Next(), "")
		if abortEvery > 0 && i%abortEvery == abortEvery-1 {
			if err := g.Admit(ctx); err != nil {
				t.Fatal(err)
			}
			if err := g.Compute(len(g.Tokens)); err != nil {
				t.Fatal(err)
			}
			if err := g.Abort(ctx, true /* garbage */); err != nil {
				t.Fatal(err)
			}
			tally.Add(g.Tally)
			continue
		}
		if err := g.Run(ctx, decode); err != nil {
			t.Fatal(err)
		}
		if err := g.Check(); err != nil {
			t.Fatal(err)
		}
		tally.Add(g.Tally)
	}
	return tally
}

// TestReferenceEngineBitIdentical: prompts sharing prefixes, under each arena
// layout, served with hits from the GPU and loads from pinned memory and
// disk, aborts that leave garbage in their blocks, then a restart on the same
// disk directory under the other layout (loads from disk only) — every logit
// equals a full recompute with no cache, bit for bit. A restart under another
// model id serves nothing from disk.
func TestReferenceEngineBitIdentical(t *testing.T) {
	for _, kind := range layouts {
		t.Run("layout="+kind.String(), func(t *testing.T) {
			ctx := engineCtx(t)
			model := engineModel(t)
			cfg := engineConfig(t, 24, 32, kind)
			cfg.DiskDir, cfg.DiskBytes = t.TempDir(), 1<<22
			p := enginetest.NewPrompts(7, refengine.TinyConfig.Vocab, ebt, 4)
			m := mustNew(t, cfg)
			e := &enginetest.Engine{M: m, Model: model}
			tally := serveChecked(t, ctx, e, p, 1000, 60, 3, 5)
			if tally.Promised.Of(kvtier.GPU) == 0 || tally.Promised.Of(kvtier.Pinned) == 0 || tally.Loaded == 0 || tally.Aborted == 0 {
				t.Fatalf("a path was not exercised: %v", tally)
			}
			// Nothing here damages a copy: a failed or mismatched read is
			// a defect the recompute would hide (every disk read of a
			// block with a class, which the engine gives at Finish, once
			// failed its header check).
			if tally.Failed != 0 || tally.Mismatch != 0 {
				t.Fatalf("reads failed in a run with no fault: %v", tally)
			}
			if err := enginetest.CheckNoLeaks(ctx, m); err != nil {
				t.Fatal(err)
			}
			t.Logf("before restart: %v", tally)
			mustClose(t, m)

			// Restart on the same disk under the other layout: pinned
			// memory starts empty, so every load comes from disk.
			other := cfg
			other.Layout = layouts[0]
			if kind == layouts[0] {
				other.Layout = layouts[1]
			}
			m = mustNew(t, other)
			e = &enginetest.Engine{M: m, Model: model}
			tally = serveChecked(t, ctx, e, p, 2000, 20, 3, 0)
			if tally.Promised.Of(kvtier.Disk) == 0 || tally.Loaded == 0 || tally.Failed != 0 || tally.Mismatch != 0 {
				t.Fatalf("no load from disk after the restart, or one failed: %v", tally)
			}
			t.Logf("after restart: %v", tally)
			mustClose(t, m)

			// Another model on the same directory: the disk serves nothing.
			other.ModelID = "refengine-tiny-finetune@1"
			m = mustNew(t, other)
			defer mustClose(t, m)
			for _, s := range p.Stems {
				if pr, err := m.Exists(ctx, s, ""); err != nil || pr.Tokens.Of(kvtier.Disk) != 0 || pr.Tokens.Of(kvtier.Pinned) != 0 {
					t.Fatalf("another model id sees %+v (%v) of a stem", pr, err)
				}
			}
			if st, _ := m.Stats(ctx); st.DiskOpen.Records != 0 {
				t.Fatalf("the disk kept %d records of another model", st.DiskOpen.Records)
			}
		})
	}
}

// TestReferenceEngineCorruptDisk: blocks written through to disk, then bytes
// flipped in the disk file between runs (a payload in one slot, a header in
// the next, the third untouched); after a restart, the same prompts are
// served with bit-identical logits: damaged records are dropped at open or
// fail their check when read, and are recomputed.
func TestReferenceEngineCorruptDisk(t *testing.T) {
	ctx := engineCtx(t)
	model := engineModel(t)
	cfg := engineConfig(t, 24, 16, gpu.LayerSeparate)
	cfg.DiskDir, cfg.DiskBytes = t.TempDir(), 1<<22
	cfg.Ingestion, cfg.DiskIngestion = kvtier.IngestAll, kvtier.IngestAll
	m := mustNew(t, cfg)
	serveChecked(t, ctx, &enginetest.Engine{M: m, Model: model}, enginetest.NewPrompts(11, refengine.TinyConfig.Vocab, ebt, 4), 1, 30, 2, 0)
	st, err := m.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	mustClose(t, m)
	damaged, err := enginetest.CorruptDisk(cfg.DiskDir, m.Layout().BlockBytes())
	if err != nil || damaged == 0 {
		t.Fatalf("corrupting the disk: %d slots, %v", damaged, err)
	}

	m = mustNew(t, cfg)
	defer mustClose(t, m)
	tally := serveChecked(t, ctx, &enginetest.Engine{M: m, Model: model}, enginetest.NewPrompts(11, refengine.TinyConfig.Vocab, ebt, 4), 1000, 30, 2, 0)
	st2, err := m.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	dropped := st2.DiskOpen.DroppedTotal()
	t.Logf("disk held %d blocks, %d slots damaged; reopened with %d records, %d dropped; %v; disk %v", st.Tier(kvtier.Disk).UsedBlocks, damaged, st2.DiskOpen.Records, dropped, tally, st2.Tier(kvtier.Disk))
	if st2.DiskOpen.Records == 0 || st2.DiskOpen.Records >= st.Tier(kvtier.Disk).UsedBlocks {
		t.Fatalf("the reopened disk kept %d of %d records (%d dropped): the damaged headers were not seen", st2.DiskOpen.Records, st.Tier(kvtier.Disk).UsedBlocks, dropped)
	}
	if tally.Promised.Of(kvtier.Disk) == 0 {
		t.Fatalf("no request asked the disk after the restart: %v", tally)
	}
	if tally.Failed == 0 && st2.Tier(kvtier.Disk).Failed == 0 {
		t.Fatalf("no damaged payload was read: %v; disk %v", tally, st2.Tier(kvtier.Disk))
	}
}
