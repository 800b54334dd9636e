package kvtier_test

import (
	"context"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/kvtier/kvtier"
	"github.com/kvtier/kvtier/gpu"
	"github.com/kvtier/kvtier/refengine"
)

// blockKV is a refengine.KVStore over a sequence's block table in the
// Manager's arena: position p lives in block table[p/bt] at slot p%bt of each
// (layer, K or V) region.
type blockKV struct {
	m     *kvtier.Manager
	table []kvtier.BlockID
	buf   []byte
}

func (b *blockKV) at(layer, pos int, kv gpu.KV, n int) (block, off int) {
	l := b.m.Layout()
	bt := l.BlockTokens()
	region, _ := l.Region(layer, kv)
	return int(b.table[pos/bt]), region + (pos%bt)*n*4
}

func (b *blockKV) ReadKV(layer, pos int, k, v []float32) error {
	for _, x := range []struct {
		kv  gpu.KV
		dst []float32
	}{{gpu.Key, k}, {gpu.Value, v}} {
		blk, off := b.at(layer, pos, x.kv, len(x.dst))
		b.buf = b.buf[:0]
		b.buf = append(b.buf, make([]byte, 4*len(x.dst))...)
		if err := b.m.Arena().ReadBlock(blk, off, b.buf); err != nil {
			return err
		}
		for i := range x.dst {
			x.dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(b.buf[4*i:]))
		}
	}
	return nil
}

func (b *blockKV) WriteKV(layer, pos int, k, v []float32) error {
	for _, x := range []struct {
		kv  gpu.KV
		src []float32
	}{{gpu.Key, k}, {gpu.Value, v}} {
		blk, off := b.at(layer, pos, x.kv, len(x.src))
		b.buf = b.buf[:0]
		for _, f := range x.src {
			b.buf = binary.LittleEndian.AppendUint32(b.buf, math.Float32bits(f))
		}
		if err := b.m.Arena().WriteBlock(blk, off, b.buf); err != nil {
			return err
		}
	}
	return nil
}

// serve runs one request through the Manager as an engine would: allocate,
// wait for Ready, compute from the valid prefix, commit, decode n tokens
// (append, compute, commit), free. It returns the logits of every position
// it computed from the prompt's last token on, keyed by position.
func serve(t *testing.T, ctx context.Context, m *kvtier.Manager, model *refengine.Model, seq uint64, prompt []int64, n int) (map[int][]float32, int) {
	t.Helper()
	r, err := m.Allocate(ctx, kvtier.AllocRequest{Seq: seq, Tokens: prompt})
	if err != nil {
		t.Fatal(err)
	}
	<-r.Ready.Done()
	out := r.Ready.Outcome()
	kv := &blockKV{m: m, table: r.Blocks}
	if out.Blocks != nil {
		kv.table = out.Blocks
	}
	valid := out.ValidTokens
	logits, err := model.Forward(kv, prompt[valid:], valid)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Commit(ctx, seq, len(prompt)); err != nil {
		t.Fatal(err)
	}
	got := map[int][]float32{len(prompt) - 1: logits[len(logits)-1]}
	tok := refengine.Argmax(logits[len(logits)-1])
	for i := range n {
		pos := len(prompt) + i
		blocks, err := m.Append(ctx, seq, []int64{tok})
		if err != nil {
			t.Fatal(err)
		}
		kv.table = append(kv.table, blocks...)
		l, err := model.Forward(kv, []int64{tok}, pos)
		if err != nil {
			t.Fatal(err)
		}
		if err := m.Commit(ctx, seq, pos+1); err != nil {
			t.Fatal(err)
		}
		got[pos] = l[0]
		tok = refengine.Argmax(l[0])
	}
	if err := m.Free(ctx, seq); err != nil {
		t.Fatal(err)
	}
	return got, valid
}

// checkAgainstReference recomputes the whole sequence with no cache and
// compares every logit bit for bit.
func checkAgainstReference(t *testing.T, model *refengine.Model, prompt []int64, got map[int][]float32, n int) {
	t.Helper()
	seq := append([]int64(nil), prompt...)
	tok := refengine.Argmax(got[len(prompt)-1])
	for i := range n {
		seq = append(seq, tok)
		tok = refengine.Argmax(got[len(prompt)+i])
	}
	want, err := model.Reference(seq[:len(prompt)+n])
	if err != nil {
		t.Fatal(err)
	}
	for pos, l := range got {
		for j := range l {
			if math.Float32bits(l[j]) != math.Float32bits(want[pos][j]) {
				t.Fatalf("position %d logit %d: %v with the cache, %v recomputed", pos, j, l[j], want[pos][j])
			}
		}
	}
}

// TestReferenceEngineBitIdentical drives a real transformer through the
// public API: prompts sharing prefixes, hits from the GPU, pinned memory and
// disk, aborted requests, a restart on the same disk directory — every logit
// equals a full recompute with no cache, bit for bit. A restart under another
// model id serves nothing from disk.
func TestReferenceEngineBitIdentical(t *testing.T) {
	ctx := context.Background()
	model, err := refengine.New(refengine.TinyConfig)
	if err != nil {
		t.Fatal(err)
	}
	const bt = 4
	spec := refengine.TinyConfig.Spec()
	layout, err := gpu.NewLayout(spec, bt)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cfg := kvtier.Config{GPUBlocks: 24, BlockTokens: bt, Model: spec, VocabSize: refengine.TinyConfig.Vocab, ModelID: "refengine-tiny@1",
		PinnedBytes: int64(16 * ((layout.BlockBytes() + 4095) / 4096 * 4096)), DiskDir: dir, DiskBytes: 1 << 22,
		ReadDeadlineBase: -1}
	rng := rand.New(rand.NewPCG(7, 8))
	stems := make([][]int64, 4)
	for i := range stems {
		stems[i] = make([]int64, 8+4*i)
		for j := range stems[i] {
			stems[i][j] = rng.Int64N(int64(refengine.TinyConfig.Vocab))
		}
	}
	prompt := func() []int64 {
		p := append([]int64(nil), stems[rng.IntN(len(stems))]...)
		for range 1 + rng.IntN(9) {
			p = append(p, rng.Int64N(int64(refengine.TinyConfig.Vocab)))
		}
		if len(p)%bt == 0 {
			p = append(p, 1) // keep a partial last block: its token is always computed
		}
		return p
	}
	run := func(m *kvtier.Manager, base uint64, reqs int) (hits int) {
		for i := range reqs {
			p := prompt()
			if rng.IntN(5) == 0 { // an abort: allocated, never computed
				if _, err := m.Allocate(ctx, kvtier.AllocRequest{Seq: base + uint64(i), Tokens: p}); err != nil {
					t.Fatal(err)
				}
				if err := m.Free(ctx, base+uint64(i)); err != nil {
					t.Fatal(err)
				}
				continue
			}
			got, valid := serve(t, ctx, m, model, base+uint64(i), p, 3)
			checkAgainstReference(t, model, p, got, 3)
			hits += valid
		}
		return hits
	}
	m, err := kvtier.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if hits := run(m, 1000, 60); hits == 0 {
		t.Fatal("no request hit the cache: the test proves nothing")
	}
	st, err := m.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.GPU.Onboarded == 0 {
		t.Fatalf("nothing was onboarded from a lower tier: %v", st.GPU)
	}
	if err := m.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// Restart on the same disk: hits from disk, still bit-identical.
	m, err = kvtier.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if hits := run(m, 2000, 20); hits == 0 {
		t.Fatal("no hit after the restart")
	}
	if err := m.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// Another model on the same directory: the disk serves nothing.
	other := cfg
	other.ModelID = "refengine-tiny-finetune@1"
	m, err = kvtier.New(other)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close(ctx)
	for _, s := range stems {
		if p, err := m.Exists(ctx, s, ""); err != nil || p.DiskTokens != 0 || p.PinnedTokens != 0 {
			t.Fatalf("another model id sees %+v (%v) of a stem", p, err)
		}
	}
	if st, _ := m.Stats(ctx); st.DiskOpen.Records != 0 {
		t.Fatalf("the disk kept %d records of another model", st.DiskOpen.Records)
	}
}
