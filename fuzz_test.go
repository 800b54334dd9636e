package kvtier

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/kvtier/kvtier/blockpool"
	"github.com/kvtier/kvtier/disk"
	"github.com/kvtier/kvtier/gpu"
	"github.com/kvtier/kvtier/policy"
)

// fuzzInput decodes fuzz bytes into values. Past the end every read is zero,
// so any input decodes; the selectors steer values toward the edges that
// validation cares about (0, ±1, page multiples, MaxInt, NaN).
type fuzzInput struct {
	b []byte
}

func (in *fuzzInput) u8() byte {
	if len(in.b) == 0 {
		return 0
	}
	v := in.b[0]
	in.b = in.b[1:]
	return v
}

func (in *fuzzInput) u64() uint64 {
	var v uint64
	for i := range 8 {
		v |= uint64(in.u8()) << (8 * i)
	}
	return v
}

// i64 returns a small signed value, a multiple of 4 KiB, an edge value or
// raw 64 bits, by the selector's low two bits.
func (in *fuzzInput) i64() int64 {
	switch sel := in.u8(); sel % 4 {
	case 0:
		return int64(int8(in.u8()))
	case 1:
		return int64(int8(in.u8())) * 4096
	case 2:
		edges := [...]int64{0, -1, 1, math.MaxInt64, math.MinInt64, math.MaxInt32, math.MaxInt32 + 1,
			1 << 31, 1 << 40, math.MaxInt64 - 4095, disk.BlockSize, 2 * disk.BlockSize, 3 * disk.BlockSize}
		return edges[int(sel>>2)%len(edges)]
	default:
		return int64(in.u64())
	}
}

func (in *fuzzInput) int() int { return int(in.i64()) }

// f64 returns a float from a table of edges, a hundredth, or raw bits.
func (in *fuzzInput) f64() float64 {
	sel := in.u8()
	edges := [...]float64{0, 0.5, 1, 0.85, -0.5, 1.5, math.NaN(), math.Inf(1), math.Inf(-1),
		math.Copysign(0, -1), math.SmallestNonzeroFloat64, math.Nextafter(1, 2)}
	if int(sel) < len(edges) {
		return edges[sel]
	}
	if sel < 128 {
		return float64(sel-byte(len(edges))) / 100
	}
	return math.Float64frombits(in.u64())
}

// Sizes a successful New may allocate while fuzzing; configs whose fields are
// valid but ask for more are skipped.
const (
	fuzzMaxGPUBlocks = 4096
	fuzzMaxTierBytes = 8 << 20
)

// decodeConfig builds a Config from fuzz bytes; a set DiskDir is dir.
func decodeConfig(in *fuzzInput, dir string) Config {
	var c Config
	c.GPUBlocks = in.int()
	c.BlockTokens = in.int()
	if sel := in.u8(); sel%4 != 0 {
		c.Model = gpu.ModelSpec{Layers: in.int(), KVHeads: in.int(), HeadDim: in.int(), DType: gpu.DType(in.int())}
	}
	c.VocabSize = in.int()
	c.PinnedBytes = in.i64()
	c.PinnedPolicy = policy.Kind(in.int())
	flags := in.u8()
	c.PinnedLock = flags&1 != 0
	if flags&2 != 0 {
		c.DiskDir = dir
	}
	c.DiskSync = flags&4 != 0
	c.DiskBytes = in.i64()
	c.DiskPolicy = policy.Kind(in.int())
	c.DiskIngestion = Ingestion(in.int())
	c.DiskWriteQuota = in.int()
	c.Ingestion = Ingestion(in.int())
	c.HotHits = in.int()
	c.OffloadThreshold = in.f64()
	c.OffloadAhead = in.int()
	c.WriteQuota = in.int()
	c.DoubleGetMinBlocks = in.int()
	c.DoubleGetMinRatio = in.f64()
	c.ReadDeadlineBase = time.Duration(in.i64())
	c.ReadDeadlinePerToken = time.Duration(in.i64())
	return c
}

// encodeConfigSeed is the inverse of decodeConfig for a seed's fields, so
// seeds are written as configs. Ints and floats take the raw-bits selectors.
func encodeConfigSeed(c Config) []byte {
	var b []byte
	i := func(v int64) {
		b = append(b, 3)
		for k := range 8 {
			b = append(b, byte(uint64(v)>>(8*k)))
		}
	}
	f := func(v float64) {
		b = append(b, 0xff)
		for k := range 8 {
			b = append(b, byte(math.Float64bits(v)>>(8*k)))
		}
	}
	i(int64(c.GPUBlocks))
	i(int64(c.BlockTokens))
	if c.Model == (gpu.ModelSpec{}) {
		b = append(b, 0)
	} else {
		b = append(b, 1)
		i(int64(c.Model.Layers))
		i(int64(c.Model.KVHeads))
		i(int64(c.Model.HeadDim))
		i(int64(c.Model.DType))
	}
	i(int64(c.VocabSize))
	i(c.PinnedBytes)
	i(int64(c.PinnedPolicy))
	var flags byte
	if c.PinnedLock {
		flags |= 1
	}
	if c.DiskDir != "" {
		flags |= 2
	}
	if c.DiskSync {
		flags |= 4
	}
	b = append(b, flags)
	i(c.DiskBytes)
	i(int64(c.DiskPolicy))
	i(int64(c.DiskIngestion))
	i(int64(c.DiskWriteQuota))
	i(int64(c.Ingestion))
	i(int64(c.HotHits))
	f(c.OffloadThreshold)
	i(int64(c.OffloadAhead))
	i(int64(c.WriteQuota))
	i(int64(c.DoubleGetMinBlocks))
	f(c.DoubleGetMinRatio)
	i(int64(c.ReadDeadlineBase))
	i(int64(c.ReadDeadlinePerToken))
	return b
}

// mulNoOverflow multiplies non-negative ints, reporting whether the product
// fits in an int.
func mulNoOverflow(xs ...int) (int, bool) {
	p := uint64(1)
	for _, x := range xs {
		if x < 0 {
			return 0, false
		}
		hi, lo := bits.Mul64(p, uint64(x))
		if hi != 0 || lo > math.MaxInt {
			return 0, false
		}
		p = lo
	}
	return int(p), true
}

// configVerdict is the reference model of New's validation, written from the
// field docs of Config (not from withDefaults).
type configVerdict struct {
	fieldsOK   bool // every field valid as documented
	blockBytes int
	gpuBytes   int   // GPUBlocks * blockBytes (when arenaOK)
	arenaOK    bool  // GPUBlocks * blockBytes fits in an int
	pinSlots   int64 // pinned slots New will create (0: tier off)
	pinnedOK   bool  // the pinned tier's geometry holds at least one slot
	diskOK     bool  // the disk tier's geometry holds at least one slot
}

func judgeConfig(c Config) configVerdict {
	var v configVerdict
	ok := c.GPUBlocks >= 1 && c.GPUBlocks <= math.MaxInt32
	bt := c.BlockTokens
	if bt == 0 {
		bt = 16
	}
	ok = ok && bt >= 1
	m := c.Model
	if m == (gpu.ModelSpec{}) {
		m = gpu.TinySpec
	}
	ok = ok && m.Layers > 0 && m.KVHeads > 0 && m.HeadDim > 0 && m.DType.Valid()
	if ok {
		bb, fits := mulNoOverflow(bt, m.KVHeads, m.HeadDim, m.DType.Size(), 2, m.Layers)
		ok = fits
		v.blockBytes = bb
	}
	ok = ok && c.VocabSize >= 0 && c.PinnedBytes >= 0
	ok = ok && (c.PinnedPolicy == 0 || c.PinnedPolicy.Valid())
	validIngest := func(i Ingestion) bool { return i == 0 || i == IngestEvict || i == IngestAll || i == IngestHot }
	ok = ok && validIngest(c.Ingestion)
	if c.DiskDir != "" {
		ok = ok && c.PinnedBytes > 0 && c.DiskBytes > 0 && (c.DiskPolicy == 0 || c.DiskPolicy.Valid()) &&
			validIngest(c.DiskIngestion) && c.DiskWriteQuota >= 0
	} else {
		ok = ok && c.DiskBytes == 0
	}
	ok = ok && c.HotHits >= 0 && c.OffloadAhead >= 0 && c.WriteQuota >= 0 && c.DoubleGetMinBlocks >= 0
	// "in (0, 1]", 0 meaning the default; NaN is in no interval.
	ok = ok && (c.OffloadThreshold == 0 || (c.OffloadThreshold > 0 && c.OffloadThreshold <= 1))
	ok = ok && c.DoubleGetMinRatio >= 0 && c.DoubleGetMinRatio <= 1
	v.fieldsOK = ok
	if !ok {
		return v
	}
	v.gpuBytes, v.arenaOK = mulNoOverflow(c.GPUBlocks, v.blockBytes)
	page := int64(os.Getpagesize())
	v.pinnedOK = true
	if c.PinnedBytes > 0 {
		stride := int64(math.MaxInt64)
		if int64(v.blockBytes) <= math.MaxInt64-page {
			stride = (int64(v.blockBytes) + page - 1) / page * page
		}
		v.pinSlots = c.PinnedBytes / stride
		v.pinnedOK = v.pinSlots >= 1 && v.pinSlots <= math.MaxInt32
	}
	v.diskOK = true
	if c.DiskDir != "" {
		slot := disk.SlotBytes(v.blockBytes)
		v.diskOK = slot > 0 && c.DiskBytes/slot >= 1
	}
	return v
}

// tooLargeToFuzz reports whether New, once past field validation (asked of
// withDefaults, so a field the reference model rejects but New accepts is
// covered too), would allocate more than the fuzzing budget.
func tooLargeToFuzz(cfg Config) bool {
	c, err := cfg.withDefaults()
	if err != nil {
		return false // New returns before allocating
	}
	l, err := gpu.NewLayout(c.Model, c.BlockTokens)
	if err != nil {
		return false
	}
	gpuBytes, fits := mulNoOverflow(c.GPUBlocks, l.BlockBytes())
	return c.GPUBlocks > fuzzMaxGPUBlocks || (fits && gpuBytes > fuzzMaxTierBytes) ||
		c.PinnedBytes > fuzzMaxTierBytes || c.DiskBytes > fuzzMaxTierBytes
}

// sameConfig compares configs bit for bit (NaN equals NaN).
func sameConfig(a, b Config) bool {
	if math.Float64bits(a.OffloadThreshold) != math.Float64bits(b.OffloadThreshold) ||
		math.Float64bits(a.DoubleGetMinRatio) != math.Float64bits(b.DoubleGetMinRatio) {
		return false
	}
	a.OffloadThreshold, b.OffloadThreshold = 0, 0
	a.DoubleGetMinRatio, b.DoubleGetMinRatio = 0, 0
	return a == b
}

// FuzzConfig feeds arbitrary field values to New. New must never panic or
// modify its argument; it fails with an error matching ErrBadConfig exactly
// when the reference model (the field docs) says the config is invalid, and a
// Manager it returns works and closes cleanly.
func FuzzConfig(f *testing.F) {
	// Seeds: testdata/fuzz/FuzzConfig, written by TestWriteFuzzSeeds.
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg := decodeConfig(&fuzzInput{b: data}, t.TempDir())
		before := cfg
		v := judgeConfig(cfg)
		if tooLargeToFuzz(cfg) {
			t.Skip("New would allocate more than the fuzzing budget")
		}
		m, err := New(cfg)
		if !sameConfig(cfg, before) {
			t.Fatalf("New modified its argument:\n got %+v\nwant %+v", cfg, before)
		}
		wantOK := v.fieldsOK && v.arenaOK && v.pinnedOK && v.diskOK
		if err != nil {
			if wantOK {
				t.Fatalf("New(%+v) = %v; the field docs allow this config", cfg, err)
			}
			if !errors.Is(err, ErrBadConfig) {
				t.Fatalf("New(%+v) = %v, which does not match ErrBadConfig", cfg, err)
			}
			var ce *ConfigError
			if errors.As(err, &ce) && ce.Field == "" {
				t.Fatalf("ConfigError without a field: %v", err)
			}
			return
		}
		if !wantOK {
			_ = m.Close(context.Background())
			t.Fatalf("New(%+v) succeeded; the field docs reject this config (%+v)", cfg, v)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		st, err := m.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st.Tier(GPU).Blocks != cfg.GPUBlocks || int64(st.Tier(Pinned).Blocks) != v.pinSlots {
			t.Fatalf("tiers of %d GPU and %d pinned blocks, want %d and %d", st.Tier(GPU).Blocks, st.Tier(Pinned).Blocks, cfg.GPUBlocks, v.pinSlots)
		}
		if res, err := m.Allocate(ctx, AllocRequest{Seq: 1, Tokens: []int64{0}}); err != nil {
			t.Fatalf("Allocate one token: %v", err)
		} else if len(res.Blocks) != 1 {
			t.Fatalf("Allocate one token: %d blocks", len(res.Blocks))
		}
		if err := m.Free(ctx, 1); err != nil {
			t.Fatal(err)
		}
		if err := m.Close(ctx); err != nil {
			t.Fatalf("Close: %v", err)
		}
		if err := m.Close(ctx); !errors.Is(err, ErrClosed) {
			t.Fatalf("second Close: %v, want ErrClosed", err)
		}
	})
}

// Request fuzzing: a fixed small Manager with a pinned tier, driven by a
// byte-decoded program of batches and checked against a model of which
// sequences are live.
const (
	reqGPUBlocks   = 8
	reqBlockTokens = 4
	reqVocab       = 1000
	reqPinnedSlots = 16 // TinySpec blocks of 4 tokens are 256 bytes: one page a slot
	reqMaxOps      = 24
)

var reqSalts = [...]string{"", "a", "tenant-b"}

// reqSeq decodes a sequence id: mostly a few small ids, so batches collide.
func reqSeq(in *fuzzInput) uint64 {
	b := in.u8()
	if b >= 0xf8 {
		return math.MaxUint64 - uint64(b&7)
	}
	return uint64(b % 6)
}

// reqTokens decodes a token list: a shared-prefix pattern of up to 47 tokens,
// and optionally one poisoned token (negative, at or past the vocabulary).
func reqTokens(in *fuzzInput, vocab int) []int64 {
	n := int(in.u8() % 48)
	pat := in.u8()
	poison := in.u8()
	toks := make([]int64, n)
	shared := int(pat & 0x1f)
	for i := range toks {
		if i < shared {
			toks[i] = int64(i)
		} else {
			toks[i] = int64(pat)*31 + int64(i)
		}
		if vocab > 0 {
			toks[i] %= int64(vocab)
		}
	}
	if poison&0x80 != 0 && n > 0 {
		bad := [...]int64{-1, int64(vocab), math.MaxInt64, math.MinInt64, int64(vocab) - 1, 0}
		toks[int(poison&0x3f)%n] = bad[int(poison>>6&1)*3+int(poison&0x3f)%3]
	}
	return toks
}

func outOfVocab(toks []int64, vocab int) bool {
	if vocab <= 0 {
		return false
	}
	for _, t := range toks {
		if t < 0 || t >= int64(vocab) {
			return true
		}
	}
	return false
}

// isOneOf reports whether err matches one of targets (nil matches a nil target).
func isOneOf(err error, targets ...error) bool {
	for _, t := range targets {
		if t == nil && err == nil || t != nil && errors.Is(err, t) {
			return true
		}
	}
	return false
}

// FuzzRequests drives one Manager with a fuzzed program of AllocateBatch (or
// AllocateInOrder: after a request's ErrNoSpace, the model allows only
// ErrNoSpace for the requests after it that pass the up-front checks),
// AppendBatch, FreeBatch, Exists and Delete. After every call: no call error,
// every per-request error is one of the documented sentinels and the one the
// model of live sequences predicts, a call whose requests were all rejected
// (or a query) changes no Stats, and at the end, with every sequence freed and
// Flush, all GPU blocks are free and nothing is in flight.
func FuzzRequests(f *testing.F) {
	// Seeds: testdata/fuzz/FuzzRequests, written by TestWriteFuzzSeeds.
	f.Fuzz(func(t *testing.T, data []byte) {
		in := &fuzzInput{b: data}
		vocab := 0
		if in.u8()&1 != 0 {
			vocab = reqVocab
		}
		ingest := [...]Ingestion{IngestEvict, IngestAll, IngestHot}[in.u8()%3]
		m, err := New(Config{
			GPUBlocks: reqGPUBlocks, BlockTokens: reqBlockTokens, VocabSize: vocab,
			PinnedBytes: reqPinnedSlots * int64(os.Getpagesize()), Ingestion: ingest, HotHits: 1,
			ReadDeadlineBase: -1, // no timers: the state after Flush is stable
		})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		defer func() {
			if err := m.Close(ctx); err != nil {
				t.Errorf("Close: %v", err)
			}
		}()
		stats := func() Stats {
			t.Helper()
			if err := m.Flush(ctx); err != nil {
				t.Fatalf("Flush: %v", err)
			}
			s, err := m.Stats(ctx)
			if err != nil {
				t.Fatalf("Stats: %v", err)
			}
			return s
		}
		live := map[uint64]int{} // the model: live sequence -> its tokens
		for op := 0; op < reqMaxOps && len(in.b) > 0; op++ {
			before := stats()
			changed := true // whether the call may change state
			desc := ""
			switch in.u8() % 5 {
			case 0, 1: // AllocateBatch or AllocateInOrder (weighted: they have the most validation)
				nb := in.u8()
				n, ordered := 1+int(nb%3), nb&0x80 != 0
				reqs := make([]AllocRequest, n)
				for i := range reqs {
					reqs[i] = AllocRequest{Seq: reqSeq(in), Tokens: reqTokens(in, vocab), Salt: reqSalts[in.u8()%3]}
					if ml := in.u8(); ml&0x80 != 0 {
						reqs[i].MaxSeqLen = int(ml & 0x1f)
						reqs[i].Truncate = ml&0x40 != 0
					}
				}
				desc = fmt.Sprintf("AllocateBatch(%+v)", reqs)
				allocate := m.AllocateBatch
				if ordered {
					desc, allocate = "AllocateInOrder"+desc[len("AllocateBatch"):], m.AllocateInOrder
				}
				res, err := allocate(ctx, reqs)
				if err != nil || len(res) != n {
					t.Fatalf("%s: %d results, %v", desc, len(res), err)
				}
				stopped := false          // in order: a request found no space, the rest are not tried
				seen := map[uint64]bool{} // a batch names each sequence once
				won := map[uint64]bool{}
				changed = false
				for i, r := range reqs {
					toks := r.Tokens
					var det error // the error the model predicts before the pool
					switch {
					case r.MaxSeqLen > 0 && len(toks) > r.MaxSeqLen && !r.Truncate:
						det = ErrTooLong
					case r.MaxSeqLen > 0 && len(toks) > r.MaxSeqLen:
						toks = toks[:r.MaxSeqLen]
					}
					got := res[i].Err
					allowed := []error{det}
					if seen[r.Seq] {
						allowed, det = []error{blockpool.ErrBadArgument}, blockpool.ErrBadArgument
					}
					seen[r.Seq] = true
					if det == nil {
						_, isLive := live[r.Seq]
						switch {
						case stopped:
							allowed = []error{blockpool.ErrNoSpace}
						case len(toks) == 0:
							allowed = []error{blockpool.ErrEmptySequence}
						case isLive:
							allowed = []error{blockpool.ErrSequenceExists}
						case outOfVocab(toks, vocab):
							allowed = []error{blockpool.ErrTokenOutOfRange}
						case (len(toks)+reqBlockTokens-1)/reqBlockTokens > reqGPUBlocks:
							allowed = []error{blockpool.ErrNoSpace}
						default:
							allowed = []error{nil, blockpool.ErrNoSpace}
						}
					}
					if !isOneOf(got, allowed...) {
						t.Fatalf("%s: request %d: error %v, want one of %v", desc, i, got, allowed)
					}
					if ordered && det == nil && errors.Is(got, blockpool.ErrNoSpace) {
						stopped = true
					}
					if got != nil {
						if res[i].Ready != nil || res[i].Blocks != nil {
							t.Fatalf("%s: request %d failed (%v) yet has blocks or a completion", desc, i, got)
						}
						continue
					}
					changed = true
					if won[r.Seq] {
						t.Fatalf("%s: sequence %d allocated twice in one batch", desc, r.Seq)
					}
					won[r.Seq] = true
					if want := (len(toks) + reqBlockTokens - 1) / reqBlockTokens; len(res[i].Blocks) != want {
						t.Fatalf("%s: request %d: %d blocks, want %d", desc, i, len(res[i].Blocks), want)
					}
					if want := len(r.Tokens) - len(toks); res[i].Truncated != want {
						t.Fatalf("%s: request %d: Truncated %d, want %d", desc, i, res[i].Truncated, want)
					}
					if res[i].Ready == nil {
						t.Fatalf("%s: request %d: no Ready completion", desc, i)
					}
					select {
					case <-res[i].Ready.Done():
					case <-ctx.Done():
						t.Fatalf("%s: request %d: Ready never completed", desc, i)
					}
					if o := res[i].Ready.Outcome(); o.ValidTokens < 0 || o.ValidTokens > len(toks) {
						t.Fatalf("%s: request %d: %d valid tokens of %d", desc, i, o.ValidTokens, len(toks))
					}
					live[r.Seq] = len(toks)
				}
			case 2: // AppendBatch
				n := 1 + int(in.u8()%3)
				items := make([]AppendItem, n)
				for i := range items {
					items[i] = AppendItem{Seq: reqSeq(in), Tokens: reqTokens(in, vocab)}
				}
				desc = fmt.Sprintf("AppendBatch(%+v)", items)
				errs, err := m.AppendBatch(ctx, items)
				if err != nil || len(errs) != n {
					t.Fatalf("%s: %d errors, %v", desc, len(errs), err)
				}
				changed = false
				seen := map[uint64]bool{} // a batch names each sequence once
				for i, it := range items {
					var allowed []error
					have, isLive := live[it.Seq]
					switch {
					case seen[it.Seq]:
						allowed = []error{blockpool.ErrBadArgument}
					case !isLive:
						allowed = []error{blockpool.ErrUnknownSequence}
					case outOfVocab(it.Tokens, vocab):
						allowed = []error{blockpool.ErrTokenOutOfRange}
					case (have+len(it.Tokens)+reqBlockTokens-1)/reqBlockTokens > reqGPUBlocks:
						allowed = []error{blockpool.ErrNoSpace}
					default:
						allowed = []error{nil, blockpool.ErrNoSpace}
					}
					seen[it.Seq] = true
					if !isOneOf(errs[i].Err, allowed...) {
						t.Fatalf("%s: item %d: error %v, want one of %v", desc, i, errs[i].Err, allowed)
					}
					if errs[i].Err == nil {
						// Even an empty append may change state: under IngestAll
						// it writes down the blocks the sequence has moved past.
						changed = true
						live[it.Seq] = have + len(it.Tokens)
					}
				}
			case 3: // FreeBatch
				n := 1 + int(in.u8()%3)
				seqs := make([]uint64, n)
				for i := range seqs {
					seqs[i] = reqSeq(in)
				}
				desc = fmt.Sprintf("FreeBatch(%v)", seqs)
				errs, err := m.FreeBatch(ctx, seqs)
				if err != nil || len(errs) != n {
					t.Fatalf("%s: %d errors, %v", desc, len(errs), err)
				}
				changed = false
				for i, s := range seqs {
					want := error(nil)
					if _, ok := live[s]; !ok {
						want = blockpool.ErrUnknownSequence
					}
					if !isOneOf(errs[i], want) {
						t.Fatalf("%s: item %d: error %v, want %v", desc, i, errs[i], want)
					}
					if errs[i] == nil {
						changed = true
						delete(live, s)
					}
				}
			case 4: // Exists or Delete
				toks, salt := reqTokens(in, vocab), reqSalts[in.u8()%3]
				if in.u8()&1 == 0 {
					desc = fmt.Sprintf("Exists(%v, %q)", toks, salt)
					p, err := m.Exists(ctx, toks, salt)
					if err != nil {
						t.Fatalf("%s: %v", desc, err)
					}
					for _, n := range []int{p.Tokens.Of(GPU), p.Tokens.Of(Pinned), p.Tokens.Of(Disk)} {
						if n < 0 || n > len(toks) || n%reqBlockTokens != 0 {
							t.Fatalf("%s = %+v: counts must be whole blocks within the %d tokens", desc, p, len(toks))
						}
					}
					changed = false
				} else {
					desc = fmt.Sprintf("Delete(%v, %q)", toks, salt)
					n, err := m.Delete(ctx, toks, salt)
					if err != nil || n < 0 || n > 2*(len(toks)/reqBlockTokens) {
						t.Fatalf("%s = %d, %v", desc, n, err)
					}
				}
			}
			t.Logf("op %d: %s", op, desc)
			if after := stats(); !changed && !reflect.DeepEqual(before, after) {
				t.Fatalf("%s was rejected (or is a query) yet changed the stats:\nbefore %+v\nafter  %+v", desc, before, after)
			}
		}
		seqs := make([]uint64, 0, len(live))
		for s := range live {
			seqs = append(seqs, s)
		}
		errs, err := m.FreeBatch(ctx, seqs)
		if err != nil {
			t.Fatal(err)
		}
		for i, e := range errs {
			if e != nil {
				t.Fatalf("freeing live sequence %d: %v", seqs[i], e)
			}
		}
		s := stats()
		if s.Tier(GPU).Extra["free"] != reqGPUBlocks || s.Tier(GPU).Extra["sequences"] != 0 || s.Tier(GPU).InFlight != 0 || s.Tier(Pinned).InFlight != 0 {
			t.Fatalf("after freeing everything and Flush: GPU %+v %v, pinned %+v; want all %d blocks free, nothing in flight",
				s.Tier(GPU), s.Tier(GPU).Extra, s.Tier(Pinned), reqGPUBlocks)
		}
	})
}

// configSeeds are FuzzConfig's seed corpus: valid configs of each tier set and
// one per validation branch.
var configSeeds = map[string]Config{
	"gpu-only":              {GPUBlocks: 8},
	"pinned-hot":            {GPUBlocks: 8, BlockTokens: 4, PinnedBytes: 4 * 4096, Ingestion: IngestHot, HotHits: 1},
	"all-tiers":             {GPUBlocks: 4, PinnedBytes: 1 << 20, DiskDir: "x", DiskBytes: 1 << 20, DiskIngestion: IngestAll, DiskSync: true},
	"many-bad-fields":       {GPUBlocks: 0, BlockTokens: -1, VocabSize: -1, PinnedBytes: -1, OffloadThreshold: 1.5, DoubleGetMinRatio: -0.5, HotHits: -1},
	"layout-overflow":       {GPUBlocks: 2, Model: gpu.ModelSpec{Layers: 1 << 40, KVHeads: 1 << 20, HeadDim: 1 << 20, DType: gpu.F32}},
	"arena-overflow":        {GPUBlocks: 4, Model: gpu.ModelSpec{Layers: 1 << 40, KVHeads: 1 << 10, HeadDim: 1 << 10, DType: gpu.U8}, BlockTokens: 1},
	"bad-dtype":             {GPUBlocks: 2, Model: gpu.ModelSpec{Layers: 1, KVHeads: 1, HeadDim: 1, DType: 99}},
	"pinned-under-one-slot": {GPUBlocks: 2, PinnedBytes: 100},
	"disk-bytes-no-dir":     {GPUBlocks: 2, DiskBytes: 4096},
	"disk-no-pinned":        {GPUBlocks: 2, DiskDir: "x", DiskBytes: 1 << 20},
	"disk-under-one-slot":   {GPUBlocks: 2, PinnedBytes: 4096, DiskDir: "x", DiskBytes: 4096},
	"bad-policies":          {GPUBlocks: 2, PinnedBytes: 4096, PinnedPolicy: 99, DiskDir: "x", DiskBytes: 1 << 20, DiskPolicy: -1, DiskIngestion: 7, Ingestion: 4},
	"nan-threshold":         {GPUBlocks: 2, OffloadThreshold: math.NaN()},
	"nan-ratio":             {GPUBlocks: 2, DoubleGetMinRatio: math.NaN()},
	"deadlines-off":         {GPUBlocks: 2, ReadDeadlineBase: -1, ReadDeadlinePerToken: time.Hour},
	"blockpool-too-many":    {GPUBlocks: math.MaxInt32 + 1},
}

// reqProgram builds FuzzRequests inputs in the order the fuzz body decodes them.
type reqProgram struct{ b []byte }

// seedTokens are reqTokens' three bytes: length, pattern (low 5 bits: shared
// prefix length) and poison (high bit on: poison one token).
type seedTokens struct{ n, pat, poison byte }

type seedAlloc struct {
	seq  byte
	toks seedTokens
	salt byte
	ml   byte // high bit on: MaxSeqLen = low 5 bits, 0x40: Truncate
}

func newReqProgram(vocab bool, ingest byte) *reqProgram {
	p := &reqProgram{}
	if vocab {
		p.b = append(p.b, 1)
	} else {
		p.b = append(p.b, 0)
	}
	p.b = append(p.b, ingest)
	return p
}

func (p *reqProgram) tokens(t seedTokens) { p.b = append(p.b, t.n, t.pat, t.poison) }

func (p *reqProgram) alloc(reqs ...seedAlloc) *reqProgram {
	p.b = append(p.b, 0, byte(len(reqs)-1))
	for _, r := range reqs {
		p.b = append(p.b, r.seq)
		p.tokens(r.toks)
		p.b = append(p.b, r.salt, r.ml)
	}
	return p
}

func (p *reqProgram) appendTo(seq byte, t seedTokens) *reqProgram {
	p.b = append(p.b, 2, 0, seq)
	p.tokens(t)
	return p
}

func (p *reqProgram) free(seqs ...byte) *reqProgram {
	p.b = append(p.b, 3, byte(len(seqs)-1))
	p.b = append(p.b, seqs...)
	return p
}

func (p *reqProgram) query(t seedTokens, salt byte, del bool) *reqProgram {
	p.b = append(p.b, 4)
	p.tokens(t)
	p.b = append(p.b, salt, map[bool]byte{false: 0, true: 1}[del])
	return p
}

// requestSeeds are FuzzRequests' seed corpus, one per validation branch and
// tier path.
func requestSeeds() map[string][]byte {
	ten, sixteen := seedTokens{10, 5, 0}, seedTokens{16, 0x10, 0}
	return map[string][]byte{
		"alloc-append-free": newReqProgram(true, 0).alloc(seedAlloc{seq: 1, toks: ten}).
			appendTo(1, seedTokens{3, 1, 0}).free(1).b,
		"duplicate-in-batch-then-exists": newReqProgram(true, 0).
			alloc(seedAlloc{seq: 2, toks: seedTokens{8, 3, 0}}, seedAlloc{seq: 2, toks: seedTokens{8, 3, 0}}).
			alloc(seedAlloc{seq: 2, toks: seedTokens{8, 3, 0}}).b,
		"empty-too-long-truncate": newReqProgram(true, 0).alloc(
			seedAlloc{seq: 3, toks: seedTokens{0, 0, 0}},
			seedAlloc{seq: 4, toks: seedTokens{20, 0, 0}, ml: 0x80 | 5},
			seedAlloc{seq: 5, toks: seedTokens{20, 0, 0}, ml: 0xc0 | 5}).b,
		"out-of-vocab": newReqProgram(true, 0).
			alloc(seedAlloc{seq: 1, toks: seedTokens{9, 2, 0x81}}, seedAlloc{seq: 2, toks: seedTokens{9, 2, 0xc2}}).
			alloc(seedAlloc{seq: 3, toks: seedTokens{6, 2, 0}}).
			appendTo(3, seedTokens{4, 0, 0x80}).appendTo(1, seedTokens{2, 0, 0}).b,
		"negative-tokens-no-vocab": newReqProgram(false, 0).
			alloc(seedAlloc{seq: 1, toks: seedTokens{9, 2, 0x80}}).appendTo(1, seedTokens{5, 0, 0x83}).free(1, 1).b,
		"no-space": newReqProgram(false, 0).alloc(seedAlloc{seq: 1, toks: seedTokens{47, 1, 0}}).
			alloc(seedAlloc{seq: 1, toks: seedTokens{28, 1, 0}}).appendTo(1, seedTokens{8, 1, 0}).b,
		"prefix-hit-exists-delete": newReqProgram(true, 0).
			alloc(seedAlloc{seq: 1, toks: sixteen}).free(1).alloc(seedAlloc{seq: 2, toks: sixteen}).
			query(sixteen, 0, false).query(sixteen, 1, false).free(2).query(sixteen, 0, true).query(sixteen, 0, false).b,
		"evict-to-pinned-and-onboard": newReqProgram(true, 0).
			alloc(seedAlloc{seq: 1, toks: seedTokens{16, 7, 0}}).free(1).
			alloc(seedAlloc{seq: 2, toks: seedTokens{32, 9, 0}}).free(2).
			query(seedTokens{16, 7, 0}, 0, false).
			alloc(seedAlloc{seq: 1, toks: seedTokens{18, 7, 0}}).free(1).b,
		"huge-seq-ids-double-free": newReqProgram(false, 0).
			alloc(seedAlloc{seq: 0xff, toks: seedTokens{4, 1, 0}}).free(0xff, 0xff).b,
		"ingest-all-appends": newReqProgram(false, 1).alloc(seedAlloc{seq: 1, toks: seedTokens{3, 4, 0}}).
			appendTo(1, seedTokens{5, 4, 0}).appendTo(1, seedTokens{8, 4, 0}).free(1).
			alloc(seedAlloc{seq: 1, toks: seedTokens{16, 4, 0}}).b,
		"ingest-hot-repeat-hits": newReqProgram(false, 2).
			alloc(seedAlloc{seq: 1, toks: sixteen}).free(1).alloc(seedAlloc{seq: 1, toks: sixteen}).free(1).
			alloc(seedAlloc{seq: 1, toks: sixteen}, seedAlloc{seq: 2, toks: sixteen}).free(1, 2).b,
	}
}

// TestWriteFuzzSeeds writes the seed corpora above to testdata/fuzz when
// KVTIER_WRITE_FUZZ_SEEDS is set; otherwise it checks they are committed.
func TestWriteFuzzSeeds(t *testing.T) {
	files := map[string][]byte{}
	for name, c := range configSeeds {
		files["FuzzConfig/"+name] = encodeConfigSeed(c)
	}
	for name, b := range requestSeeds() {
		files["FuzzRequests/"+name] = b
	}
	write := os.Getenv("KVTIER_WRITE_FUZZ_SEEDS") != ""
	for name, b := range files {
		path := filepath.Join("testdata", "fuzz", name)
		want := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", b)
		if write {
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(path)
		if err != nil || string(got) != want {
			t.Errorf("seed %s is not committed or is stale (%v); run with KVTIER_WRITE_FUZZ_SEEDS=1", path, err)
		}
	}
}
