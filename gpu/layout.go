package gpu

import (
	"errors"
	"fmt"
	"math"
)

// KV selects the key or the value half of a layer's cache.
type KV int

const (
	Key   KV = iota + 1 // the K tensor
	Value               // the V tensor
)

func (kv KV) String() string {
	switch kv {
	case Key:
		return "K"
	case Value:
		return "V"
	}
	return fmt.Sprintf("KV(%d)", int(kv))
}

// ModelSpec is the shape of a model's KV cache: what one token costs.
type ModelSpec struct {
	Layers  int   // transformer layers
	KVHeads int   // key/value heads per layer (after GQA grouping)
	HeadDim int   // elements per head
	DType   DType // element type of the cache
}

// Llama3_8B is a Llama-3-8B-like spec: 32 layers, 8 KV heads, head
// dimension 128, bf16, so 128 KiB per token.
var Llama3_8B = ModelSpec{Layers: 32, KVHeads: 8, HeadDim: 128, DType: BF16}

// TinySpec is a toy spec for tests: 2 layers, 2 KV heads, head dimension 4,
// f16, so 64 bytes per token.
var TinySpec = ModelSpec{Layers: 2, KVHeads: 2, HeadDim: 4, DType: F16}

// Validate reports every invalid field, each as a *SpecError joined into
// one error that matches ErrInvalidSpec.
func (s ModelSpec) Validate() error { return errors.Join(s.fieldErrors()...) }

func (s ModelSpec) fieldErrors() []error {
	var errs []error
	positive := func(field string, v int) {
		if v <= 0 {
			errs = append(errs, &SpecError{Field: field, Value: v, Reason: "must be positive"})
		}
	}
	positive("Layers", s.Layers)
	positive("KVHeads", s.KVHeads)
	positive("HeadDim", s.HeadDim)
	if !s.DType.Valid() {
		errs = append(errs, &SpecError{Field: "DType", Value: int(s.DType), Reason: "unknown dtype"})
	}
	return errs
}

// Layout places one block of KV cache in memory. A block holds
// BlockTokens tokens for every layer, laid out as
//
//	[layer][kv][token][head][dim]
//
// so each (layer, K or V) pair owns one contiguous region of RegionBytes
// bytes. Layout is an immutable value; build it with NewLayout.
type Layout struct {
	spec          ModelSpec
	blockTokens   int
	bytesPerToken int
	regionBytes   int
	blockBytes    int
}

// NewLayout validates spec and blockTokens and computes the sizes. Bytes
// per token are 2 (K and V) x layers x kvHeads x headDim x dtype size.
func NewLayout(spec ModelSpec, blockTokens int) (Layout, error) {
	errs := spec.fieldErrors()
	if blockTokens <= 0 {
		errs = append(errs, &SpecError{Field: "BlockTokens", Value: blockTokens, Reason: "must be positive"})
	}
	if len(errs) > 0 {
		return Layout{}, errors.Join(errs...)
	}
	region, ok := mulAll(blockTokens, spec.KVHeads, spec.HeadDim, spec.DType.Size())
	perToken, ok2 := mulAll(2, spec.Layers, spec.KVHeads, spec.HeadDim, spec.DType.Size())
	block, ok3 := mulAll(region, 2, spec.Layers)
	if !ok || !ok2 || !ok3 {
		return Layout{}, &SpecError{Field: "BlockTokens", Value: blockTokens, Reason: "block size overflows int"}
	}
	return Layout{
		spec:          spec,
		blockTokens:   blockTokens,
		bytesPerToken: perToken,
		regionBytes:   region,
		blockBytes:    block,
	}, nil
}

// Spec returns the model spec the layout was built from.
func (l Layout) Spec() ModelSpec { return l.spec }

// BlockTokens returns the number of tokens one block holds.
func (l Layout) BlockTokens() int { return l.blockTokens }

// BytesPerToken returns the KV bytes one token costs across all layers.
func (l Layout) BytesPerToken() int { return l.bytesPerToken }

// BlockBytes returns the size of one block: BlockTokens x BytesPerToken.
func (l Layout) BlockBytes() int { return l.blockBytes }

// RegionBytes returns the size of one (layer, K or V) region of a block.
func (l Layout) RegionBytes() int { return l.regionBytes }

// Region returns the byte offset and size, inside a block, of the K or V
// tensor of one layer. The regions of all (layer, kv) pairs tile the block
// exactly. An out-of-range layer or kv is a contract violation and panics.
func (l Layout) Region(layer int, kv KV) (off, size int) {
	if layer < 0 || layer >= l.spec.Layers {
		panic(fmt.Sprintf("kvtier: layer %d out of range [0,%d)", layer, l.spec.Layers))
	}
	if kv != Key && kv != Value {
		panic(fmt.Sprintf("kvtier: invalid %v", kv))
	}
	return (layer*2 + int(kv-Key)) * l.regionBytes, l.regionBytes
}

// BlockView returns a 5-D view [layer][kv][token][head][dim] of one block
// whose storage is exactly BlockBytes bytes; kv index 0 is K and 1 is V.
// Add the block's base offset in an arena to the addresses it yields.
func (l Layout) BlockView() TensorView {
	v, err := NewTensorView(l.blockBytes, l.spec.DType,
		[]int{l.spec.Layers, 2, l.blockTokens, l.spec.KVHeads, l.spec.HeadDim}, nil, 0)
	if err != nil {
		panic("kvtier: block view of a valid layout: " + err.Error())
	}
	return v
}

// mulAll multiplies non-negative ints and reports false on overflow.
func mulAll(xs ...int) (int, bool) {
	p := 1
	for _, x := range xs {
		if x < 0 {
			return 0, false
		}
		if x != 0 && p > math.MaxInt/x {
			return 0, false
		}
		p *= x
	}
	return p, true
}
