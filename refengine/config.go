package refengine

import (
	"errors"
	"math"

	"github.com/kvtier/kvtier/gpu"
)

// MaxParams bounds the number of float32 weights a Config may ask for
// (1 GiB of weights): the engine is a test oracle, not a serving model,
// and a typo in a Config should fail validation, not exhaust memory.
const MaxParams = 1 << 28

// Config describes a model. Every field must be set; there are no
// defaults. Validate (also run by New) never modifies the value.
type Config struct {
	Vocab     int    // token ids are in [0, Vocab)
	DModel    int    // width of the residual stream; a multiple of Heads
	Layers    int    // transformer blocks
	Heads     int    // query heads; HeadDim = DModel / Heads, which must be even (RoPE rotates pairs)
	KVHeads   int    // key/value heads; divides Heads (KVHeads < Heads is grouped-query attention)
	MLPHidden int    // hidden width of the SiLU-gated MLP
	Seed      uint64 // seeds the PCG generator every weight is drawn from
}

// TinyConfig is a model small enough for race-enabled unit tests: 2
// layers, d_model 32, 4 query heads over 2 KV heads (GQA), head dimension
// 8, vocabulary 128. Copy it and change Seed for a different model.
var TinyConfig = Config{Vocab: 128, DModel: 32, Layers: 2, Heads: 4, KVHeads: 2, MLPHidden: 64, Seed: 1}

// SmallConfig is the size the package was designed around: vocabulary
// 512, d_model 64, 4 layers, 4 heads of dimension 16, MLP 128.
var SmallConfig = Config{Vocab: 512, DModel: 64, Layers: 4, Heads: 4, KVHeads: 4, MLPHidden: 128, Seed: 1}

// HeadDim returns DModel / Heads (0 when Heads is not positive).
func (c Config) HeadDim() int {
	if c.Heads <= 0 {
		return 0
	}
	return c.DModel / c.Heads
}

// KVDim returns KVHeads * HeadDim: the float32 count of one layer's K (or
// V) at one position, the length of the slices a KVStore exchanges.
func (c Config) KVDim() int { return c.KVHeads * c.HeadDim() }

// Spec returns the KV cache shape of the model: Layers, KVHeads, HeadDim
// and DType gpu.F32, ready for gpu.NewLayout. It is meaningful only for a
// valid Config.
func (c Config) Spec() gpu.ModelSpec {
	return gpu.ModelSpec{Layers: c.Layers, KVHeads: c.KVHeads, HeadDim: c.HeadDim(), DType: gpu.F32}
}

// Validate reports every invalid field, each as a *ConfigError, joined
// into one error that matches ErrInvalidConfig; nil if c is valid.
func (c Config) Validate() error { return errors.Join(c.fieldErrors()...) }

func (c Config) fieldErrors() []error {
	var errs []error
	bad := func(field string, v int, reason string) {
		errs = append(errs, &ConfigError{Field: field, Value: v, Reason: reason})
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"Vocab", c.Vocab}, {"DModel", c.DModel}, {"Layers", c.Layers}, {"Heads", c.Heads}, {"KVHeads", c.KVHeads}, {"MLPHidden", c.MLPHidden}} {
		if f.v <= 0 {
			bad(f.name, f.v, "must be positive")
		}
	}
	if len(errs) > 0 {
		return errs // the divisibility checks below need positive values
	}
	if c.DModel%c.Heads != 0 {
		bad("DModel", c.DModel, "must be a multiple of Heads")
	} else if c.HeadDim()%2 != 0 {
		bad("DModel", c.DModel, "DModel/Heads must be even for rotary embeddings")
	}
	if c.KVHeads > c.Heads || c.Heads%c.KVHeads != 0 {
		bad("KVHeads", c.KVHeads, "must divide Heads")
	}
	if len(errs) == 0 {
		if n, ok := c.params(); !ok || n > MaxParams {
			bad("DModel", c.DModel, "model has more than MaxParams weights")
		}
	}
	return errs
}

// params returns the number of float32 weights of a valid-shaped config,
// and false if counting overflows.
func (c Config) params() (int, bool) {
	d, kv, h, v := c.DModel, c.KVDim(), c.MLPHidden, c.Vocab
	perLayer, ok := sum(d, mul(d, d), mul(2, mul(d, kv)), mul(d, d), d, mul(3, mul(d, h)))
	if !ok {
		return 0, false
	}
	return sum(mul(2, mul(v, d)), mul(c.Layers, perLayer), d)
}

// mul multiplies two non-negative ints, returning -1 on overflow so that
// sum reports it.
func mul(a, b int) int {
	if a < 0 || b < 0 || (a != 0 && b > math.MaxInt/a) {
		return -1
	}
	return a * b
}

// sum adds non-negative ints and reports false on overflow or on a -1
// from mul.
func sum(xs ...int) (int, bool) {
	s := 0
	for _, x := range xs {
		if x < 0 || s > math.MaxInt-x {
			return 0, false
		}
		s += x
	}
	return s, true
}
