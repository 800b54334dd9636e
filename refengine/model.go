package refengine

import (
	"math"
	"math/rand/v2"

	"github.com/kvtier/kvtier/gpu"
)

// Model is a decoder-only transformer with weights drawn from Config.Seed.
// It is immutable after New and safe for concurrent use: every call
// allocates its own scratch, and all mutable state lives in the KVStore
// the caller passes (one store must not be used by two calls at once).
type Model struct {
	cfg     Config
	headDim int
	kvDim   int
	invFreq []float64 // RoPE inverse frequencies, headDim/2

	embed     []float32 // [Vocab][DModel]
	layers    []layerWeights
	finalNorm []float32 // [DModel]
	lmHead    []float32 // [Vocab][DModel], untied from embed
}

// layerWeights are one transformer block's weights, all row-major
// [out][in].
type layerWeights struct {
	attnNorm []float32 // [DModel]
	wq       []float32 // [Heads*HeadDim][DModel]
	wk       []float32 // [KVHeads*HeadDim][DModel]
	wv       []float32 // [KVHeads*HeadDim][DModel]
	wo       []float32 // [DModel][Heads*HeadDim]
	mlpNorm  []float32 // [DModel]
	wGate    []float32 // [MLPHidden][DModel]
	wUp      []float32 // [MLPHidden][DModel]
	wDown    []float32 // [DModel][MLPHidden]
}

// pcgStream is the second PCG word; the first is Config.Seed.
const pcgStream = 0x6b767469_65722d72 // "kvtier-r"

// New validates cfg and draws the weights. The weights are a pure
// function of cfg: two Models built from equal Configs compute
// bit-identical logits. New keeps a copy of cfg and never modifies it.
func New(cfg Config) (*Model, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	m := &Model{cfg: cfg, headDim: cfg.HeadDim(), kvDim: cfg.KVDim()}
	m.invFreq = newInvFreq(m.headDim)

	w := weightSource{rand.New(rand.NewPCG(cfg.Seed, pcgStream))}
	d, h, kv, q := cfg.DModel, cfg.MLPHidden, m.kvDim, cfg.Heads*m.headDim
	// Scales keep activations near unit variance: 1/sqrt(fan_in) for every
	// projection, and the two that write into the residual stream are
	// further divided by sqrt(2*Layers) so the stream does not grow with
	// depth.
	in := func(n int) float64 { return 1 / math.Sqrt(float64(n)) }
	resid := 1 / math.Sqrt(float64(2*cfg.Layers))

	m.embed = w.uniform(cfg.Vocab*d, 1)
	m.layers = make([]layerWeights, cfg.Layers)
	for l := range m.layers {
		m.layers[l] = layerWeights{
			attnNorm: w.gain(d),
			wq:       w.uniform(q*d, in(d)),
			wk:       w.uniform(kv*d, in(d)),
			wv:       w.uniform(kv*d, in(d)),
			wo:       w.uniform(d*q, in(q)*resid),
			mlpNorm:  w.gain(d),
			wGate:    w.uniform(h*d, in(d)),
			wUp:      w.uniform(h*d, in(d)),
			wDown:    w.uniform(d*h, in(h)*resid),
		}
	}
	m.finalNorm = w.gain(d)
	m.lmHead = w.uniform(cfg.Vocab*d, 2*in(d))
	return m, nil
}

// Config returns a copy of the model's configuration.
func (m *Model) Config() Config { return m.cfg }

// Spec returns the shape of the model's KV cache (Layers, KVHeads,
// HeadDim, DType gpu.F32) for gpu.NewLayout.
func (m *Model) Spec() gpu.ModelSpec { return m.cfg.Spec() }

// KVDim returns KVHeads*HeadDim, the length of the k and v slices a
// KVStore exchanges.
func (m *Model) KVDim() int { return m.kvDim }

// weightSource draws weights from a PCG stream. It uses only Uint64,
// whose output math/rand/v2 specifies exactly, so the weights do not
// change with the Go release (NormFloat64's algorithm is not promised).
type weightSource struct{ r *rand.Rand }

// uniform returns n values uniform on [-a, a) with a = std*sqrt(3), so
// their standard deviation is std.
func (w weightSource) uniform(n int, std float64) []float32 {
	a := std * math.Sqrt(3)
	out := make([]float32, n)
	for i := range out {
		u := float64(w.r.Uint64()>>11) / (1 << 53) // [0, 1)
		out[i] = float32((2*u - 1) * a)
	}
	return out
}

// gain returns n RMSNorm gains near 1, perturbed so a norm is not the
// identity scaling.
func (w weightSource) gain(n int) []float32 {
	g := w.uniform(n, 0.1)
	for i := range g {
		g[i] += 1
	}
	return g
}
