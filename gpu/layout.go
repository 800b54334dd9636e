package gpu

import (
	"errors"
	"fmt"
	"math"
	"strings"
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

// LayoutKind says how an arena of device memory places its blocks' KV.
// Whatever the kind, one block in host memory (a CopyOp's Host, a pinned
// slot, a disk record) is the same contiguous [layer][kv][token][head][dim]
// bytes, so lower tiers never see the kind. The zero value is invalid.
type LayoutKind int

const (
	// BlockContiguous: the arena is [block][layer][kv][token][head][dim].
	// A block is one contiguous range of BlockBytes, identical to its host
	// form, so a tier copy is one memcpy per block. A kernel addresses
	// layer l's K of every block with a block stride of BlockBytes.
	BlockContiguous LayoutKind = iota + 1
	// LayerSeparate: the arena is [layer][kv][block][token][head][dim],
	// vLLM's FlashAttention cache (one key and one value tensor per layer,
	// each [num_blocks][block_size][num_kv_heads][head_size]). Each
	// (layer, K or V) of the whole arena is one dense tensor a kernel takes
	// as its key or value cache; a tier copy gathers (D2H) or scatters
	// (H2D) a block's 2 x Layers regions to or from its contiguous host
	// form.
	LayerSeparate
)

// Valid reports whether k is one of the defined kinds.
func (k LayoutKind) Valid() bool { return k == BlockContiguous || k == LayerSeparate }

func (k LayoutKind) String() string {
	switch k {
	case BlockContiguous:
		return "block-contiguous"
	case LayerSeparate:
		return "layer-separate"
	}
	return fmt.Sprintf("LayoutKind(%d)", int(k))
}

// ParseLayoutKind parses a name as written by String.
func ParseLayoutKind(s string) (LayoutKind, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "block-contiguous":
		return BlockContiguous, nil
	case "layer-separate":
		return LayerSeparate, nil
	}
	return 0, fmt.Errorf("%w: unknown layout kind %q", ErrInvalidSpec, s)
}

// Layout places the KV cache in memory. A block holds BlockTokens tokens
// for every layer; in its host form (and in a BlockContiguous arena) it is
// laid out as
//
//	[layer][kv][token][head][dim]
//
// so each (layer, K or V) pair owns one contiguous region of RegionBytes
// bytes, at Region inside the block. Kind says where those regions lie in
// a device arena (ArenaOffset, LayerView, LayerTensor). Layout is an
// immutable value; build it with NewLayout or NewLayoutKind.
type Layout struct {
	spec          ModelSpec
	kind          LayoutKind
	blockTokens   int
	bytesPerToken int
	tokenBytes    int
	regionBytes   int
	blockBytes    int
}

// NewLayout validates spec and blockTokens and computes the sizes of a
// BlockContiguous layout. Bytes per token are 2 (K and V) x layers x
// kvHeads x headDim x dtype size.
func NewLayout(spec ModelSpec, blockTokens int) (Layout, error) {
	return NewLayoutKind(spec, blockTokens, BlockContiguous)
}

// NewLayoutKind is NewLayout for an arena layout of the given kind.
func NewLayoutKind(spec ModelSpec, blockTokens int, kind LayoutKind) (Layout, error) {
	errs := spec.fieldErrors()
	if blockTokens <= 0 {
		errs = append(errs, &SpecError{Field: "BlockTokens", Value: blockTokens, Reason: "must be positive"})
	}
	if !kind.Valid() {
		errs = append(errs, &SpecError{Field: "Kind", Value: int(kind), Reason: "unknown layout kind"})
	}
	if len(errs) > 0 {
		return Layout{}, errors.Join(errs...)
	}
	token, ok0 := mulAll(spec.KVHeads, spec.HeadDim, spec.DType.Size())
	region, ok := mulAll(blockTokens, token)
	perToken, ok2 := mulAll(2, spec.Layers, token)
	block, ok3 := mulAll(region, 2, spec.Layers)
	if !ok0 || !ok || !ok2 || !ok3 {
		return Layout{}, &SpecError{Field: "BlockTokens", Value: blockTokens, Reason: "block size overflows int"}
	}
	return Layout{
		spec:          spec,
		kind:          kind,
		blockTokens:   blockTokens,
		bytesPerToken: perToken,
		tokenBytes:    token,
		regionBytes:   region,
		blockBytes:    block,
	}, nil
}

// Kind returns how the layout places blocks in an arena.
func (l Layout) Kind() LayoutKind { return l.kind }

// TokenBytes returns the bytes of one token's K (or V) in one layer:
// KVHeads x HeadDim x dtype size. A region is BlockTokens of them.
func (l Layout) TokenBytes() int { return l.tokenBytes }

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
	if err := l.checkLayerKV(layer, kv); err != nil {
		panic(err.Error())
	}
	return l.segment(layer, kv) * l.regionBytes, l.regionBytes
}

// segment numbers the (layer, kv) regions of a block in host order.
func (l Layout) segment(layer int, kv KV) int { return layer*2 + int(kv-Key) }

func (l Layout) checkLayerKV(layer int, kv KV) error {
	if layer < 0 || layer >= l.spec.Layers {
		return fmt.Errorf("%w: layer %d outside [0,%d)", ErrOutOfRange, layer, l.spec.Layers)
	}
	if kv != Key && kv != Value {
		return fmt.Errorf("%w: invalid %v", ErrOutOfRange, kv)
	}
	return nil
}

// ArenaOffset returns the byte offset of block's (layer, kv) region
// (RegionBytes long, [token][head][dim]) inside an arena of numBlocks
// blocks laid out by l:
//
//	BlockContiguous: block*BlockBytes + (layer*2+kv)*RegionBytes
//	LayerSeparate:   ((layer*2+kv)*numBlocks + block)*RegionBytes
//
// where kv is 0 for K and 1 for V. It fails with ErrOutOfRange for a
// block, layer or kv outside the arena or the model, with ErrInvalidSize
// when numBlocks is not positive or the arena overflows, or with
// ErrInvalidSpec for a Layout not built by NewLayout (the zero Layout).
func (l Layout) ArenaOffset(numBlocks, block, layer int, kv KV) (int, error) {
	if err := l.checkArena(numBlocks, block, layer, kv); err != nil {
		return 0, err
	}
	return l.arenaOffset(numBlocks, block, layer, kv), nil
}

func (l Layout) arenaOffset(numBlocks, block, layer int, kv KV) int {
	seg := l.segment(layer, kv)
	if l.kind == LayerSeparate {
		return (seg*numBlocks + block) * l.regionBytes
	}
	return block*l.blockBytes + seg*l.regionBytes
}

func (l Layout) checkArena(numBlocks, block, layer int, kv KV) error {
	if !l.kind.Valid() {
		return fmt.Errorf("%w: layout of kind %v (use NewLayout)", ErrInvalidSpec, l.kind)
	}
	if _, err := checkArenaSize(numBlocks, l.blockBytes); err != nil {
		return err
	}
	if block < 0 || block >= numBlocks {
		return fmt.Errorf("%w: block %d outside [0,%d)", ErrOutOfRange, block, numBlocks)
	}
	return l.checkLayerKV(layer, kv)
}

// LayerView returns a [token][head][dim] view of block's K or V of one
// layer inside an arena of numBlocks blocks laid out by l: its storage is
// the whole arena (numBlocks x BlockBytes), its offset ArenaOffset. The
// view is contiguous in both kinds. Errors are ArenaOffset's.
func (l Layout) LayerView(numBlocks, block, layer int, kv KV) (TensorView, error) {
	off, err := l.ArenaOffset(numBlocks, block, layer, kv)
	if err != nil {
		return TensorView{}, err
	}
	return NewTensorView(numBlocks*l.blockBytes, l.spec.DType,
		[]int{l.blockTokens, l.spec.KVHeads, l.spec.HeadDim}, nil, off)
}

// LayerTensor returns a [block][token][head][dim] view of one layer's K or
// V over every block of an arena of numBlocks blocks: the key or value
// cache an attention kernel indexes with a block table. It is dense for
// LayerSeparate; for BlockContiguous the block stride is BlockBytes.
// Errors are ArenaOffset's.
func (l Layout) LayerTensor(numBlocks, layer int, kv KV) (TensorView, error) {
	off, err := l.ArenaOffset(numBlocks, 0, layer, kv)
	if err != nil {
		return TensorView{}, err
	}
	size := l.spec.DType.Size()
	blockStride := l.blockBytes / size
	if l.kind == LayerSeparate {
		blockStride = l.regionBytes / size
	}
	heads, dim := l.spec.KVHeads, l.spec.HeadDim
	return NewTensorView(numBlocks*l.blockBytes, l.spec.DType,
		[]int{numBlocks, l.blockTokens, heads, dim},
		[]int{blockStride, heads * dim, dim, 1}, off)
}

// BlockView returns a 5-D view [layer][kv][token][head][dim] of one block
// whose storage is exactly BlockBytes bytes; kv index 0 is K and 1 is V.
// Add the block's base offset in an arena to the addresses it yields.
//
// A Layout not built by NewLayout or NewLayoutKind (the zero Layout) has
// no block to view, and BlockView has no error to return: like Region
// given a layer outside the model, it is a contract violation and panics,
// with ErrInvalidSpec's message ("kvtier: invalid model spec: ..."). The
// calls that return an error (NewKVArena, ArenaOffset, LayerView,
// LayerTensor) refuse such a Layout with ErrInvalidSpec instead.
func (l Layout) BlockView() TensorView {
	if !l.kind.Valid() {
		panic(fmt.Errorf("%w: BlockView of a Layout not built by NewLayout or NewLayoutKind (kind %v)", ErrInvalidSpec, l.kind).Error())
	}
	v, err := NewTensorView(l.blockBytes, l.spec.DType,
		[]int{l.spec.Layers, 2, l.blockTokens, l.spec.KVHeads, l.spec.HeadDim}, nil, 0)
	if err != nil {
		panic("kvtier: gpu: block view of a layout NewLayout validated: " + err.Error())
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
