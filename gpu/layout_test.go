package gpu

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestLayoutLlama3_8B(t *testing.T) {
	l, err := NewLayout(Llama3_8B, 16)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := l.BytesPerToken(), 128<<10; got != want {
		t.Errorf("BytesPerToken = %d, want %d (128 KiB)", got, want)
	}
	if got, want := l.BlockBytes(), 16*128<<10; got != want {
		t.Errorf("BlockBytes = %d, want %d (2 MiB)", got, want)
	}
	if got, want := l.RegionBytes(), 16*8*128*2; got != want {
		t.Errorf("RegionBytes = %d, want %d", got, want)
	}
	if l.Spec() != Llama3_8B || l.BlockTokens() != 16 {
		t.Errorf("Spec/BlockTokens not kept: %+v %d", l.Spec(), l.BlockTokens())
	}
}

// TestLayoutRegionsTileBlock checks that the (layer, K/V) regions cover
// every byte of a block exactly once, in [layer][kv] order.
func TestLayoutRegionsTileBlock(t *testing.T) {
	for _, spec := range []ModelSpec{TinySpec, Llama3_8B, {Layers: 3, KVHeads: 1, HeadDim: 5, DType: F32}} {
		l, err := NewLayout(spec, 3)
		if err != nil {
			t.Fatal(err)
		}
		next := 0
		for layer := range spec.Layers {
			for _, kv := range []KV{Key, Value} {
				off, size := l.Region(layer, kv)
				if off != next {
					t.Fatalf("%+v: region (%d,%v) at %d, want %d (gap or overlap)", spec, layer, kv, off, next)
				}
				if size != l.RegionBytes() || size <= 0 {
					t.Fatalf("%+v: region size %d, want %d", spec, size, l.RegionBytes())
				}
				next += size
			}
		}
		if next != l.BlockBytes() {
			t.Errorf("%+v: regions end at %d, block is %d", spec, next, l.BlockBytes())
		}
		if l.BlockBytes() != l.BlockTokens()*l.BytesPerToken() {
			t.Errorf("%+v: BlockBytes %d != tokens x bytes/token", spec, l.BlockBytes())
		}
	}
}

// TestLayoutBlockViewMatchesRegions ties the 5-D block view to Region:
// element (layer, kv, token, head, dim) lies inside its region, at
// ((token*heads+head)*dim+d)*size.
func TestLayoutBlockViewMatchesRegions(t *testing.T) {
	l, err := NewLayout(TinySpec, 4)
	if err != nil {
		t.Fatal(err)
	}
	v := l.BlockView()
	if !v.IsContiguous() || v.NumBytes() != l.BlockBytes() {
		t.Fatalf("block view %v not contiguous over %d bytes", v, l.BlockBytes())
	}
	s := TinySpec
	for layer := range s.Layers {
		for kvi, kv := range []KV{Key, Value} {
			base, _ := l.Region(layer, kv)
			for tok := range 4 {
				for h := range s.KVHeads {
					for d := range s.HeadDim {
						got, err := v.Address(layer, kvi, tok, h, d)
						if err != nil {
							t.Fatal(err)
						}
						want := base + ((tok*s.KVHeads+h)*s.HeadDim+d)*s.DType.Size()
						if got != want {
							t.Fatalf("Address(%d,%d,%d,%d,%d) = %d, want %d", layer, kvi, tok, h, d, got, want)
						}
					}
				}
			}
		}
	}
}

func TestLayoutValidation(t *testing.T) {
	_, err := NewLayout(ModelSpec{Layers: 0, KVHeads: -1, HeadDim: 8, DType: 0}, 0)
	if !errors.Is(err, ErrInvalidSpec) {
		t.Fatalf("error %v does not match ErrInvalidSpec", err)
	}
	var fields []string
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		var se *SpecError
		if !errors.As(e, &se) {
			t.Fatalf("joined error %v is not a *SpecError", e)
		}
		fields = append(fields, se.Field)
	}
	if want := []string{"Layers", "KVHeads", "DType", "BlockTokens"}; !slices.Equal(fields, want) {
		t.Errorf("invalid fields = %v, want %v", fields, want)
	}

	huge := ModelSpec{Layers: 1 << 20, KVHeads: 1 << 20, HeadDim: 1 << 20, DType: F32}
	if _, err := NewLayout(huge, 1<<20); !errors.Is(err, ErrInvalidSpec) {
		t.Errorf("overflowing layout: error %v, want ErrInvalidSpec", err)
	}
}

func TestLayoutRegionPanicsOutOfRange(t *testing.T) {
	l, err := NewLayout(TinySpec, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		layer int
		kv    KV
	}{{-1, Key}, {TinySpec.Layers, Value}, {0, 0}, {0, 3}} {
		func() {
			defer func() {
				r, _ := recover().(string)
				if len(r) < 8 || r[:8] != "kvtier: " {
					t.Errorf("Region(%d,%v): recovered %q, want a kvtier: panic", c.layer, c.kv, r)
				}
			}()
			l.Region(c.layer, c.kv)
		}()
	}
}

// TestLayoutZeroValue: the zero Layout is refused by every call, never
// answered with a view or offset of nothing: the calls that return an
// error fail with ErrInvalidSpec, as NewKVArena does, and BlockView, which returns none, panics
// with ErrInvalidSpec's message naming the problem.
func TestLayoutZeroValue(t *testing.T) {
	var l Layout
	if _, err := l.ArenaOffset(4, 0, 0, Key); !errors.Is(err, ErrInvalidSpec) {
		t.Errorf("ArenaOffset: %v, want ErrInvalidSpec", err)
	}
	if _, err := l.LayerView(4, 0, 0, Key); !errors.Is(err, ErrInvalidSpec) {
		t.Errorf("LayerView: %v, want ErrInvalidSpec", err)
	}
	if _, err := l.LayerTensor(4, 0, Key); !errors.Is(err, ErrInvalidSpec) {
		t.Errorf("LayerTensor: %v, want ErrInvalidSpec", err)
	}
	func() {
		defer func() {
			r, _ := recover().(string)
			if !strings.HasPrefix(r, ErrInvalidSpec.Error()+": ") || !strings.Contains(r, "BlockView of a Layout not built by NewLayout") {
				t.Errorf("BlockView: recovered %q, want a panic with ErrInvalidSpec's message naming BlockView", r)
			}
		}()
		v := l.BlockView()
		t.Errorf("BlockView of the zero Layout returned %v", v)
	}()
}

var kinds = []LayoutKind{BlockContiguous, LayerSeparate}

func TestLayoutKind(t *testing.T) {
	l, err := NewLayout(TinySpec, 4)
	if err != nil || l.Kind() != BlockContiguous {
		t.Fatalf("NewLayout kind = %v, %v; want block-contiguous", l.Kind(), err)
	}
	for _, k := range kinds {
		got, err := ParseLayoutKind(k.String())
		if err != nil || got != k {
			t.Errorf("ParseLayoutKind(%q) = %v, %v", k, got, err)
		}
	}
	if _, err := ParseLayoutKind("paged"); !errors.Is(err, ErrInvalidSpec) {
		t.Errorf("ParseLayoutKind(paged) = %v", err)
	}
	var se *SpecError
	if _, err := NewLayoutKind(TinySpec, 4, 0); !errors.As(err, &se) || se.Field != "Kind" {
		t.Errorf("NewLayoutKind with kind 0: %v, want a SpecError for Kind", err)
	}
	// The host form of a block does not depend on the kind.
	ls, err := NewLayoutKind(TinySpec, 4, LayerSeparate)
	if err != nil {
		t.Fatal(err)
	}
	if ls.BlockBytes() != l.BlockBytes() || ls.BlockView().String() != l.BlockView().String() {
		t.Error("a layer-separate block's host form differs from a block-contiguous one's")
	}
}

// TestLayoutArenaOffsetsTileArena: in both kinds the (block, layer, kv)
// regions cover an arena exactly once, where the doc says they are.
func TestLayoutArenaOffsetsTileArena(t *testing.T) {
	const blocks = 5
	for _, kind := range kinds {
		l, err := NewLayoutKind(testSpec, 3, kind)
		if err != nil {
			t.Fatal(err)
		}
		seen := make([]bool, blocks*l.BlockBytes())
		for b := range blocks {
			for layer := range testSpec.Layers {
				for kvi, kv := range []KV{Key, Value} {
					off, err := l.ArenaOffset(blocks, b, layer, kv)
					if err != nil {
						t.Fatal(err)
					}
					seg := layer*2 + kvi
					want := b*l.BlockBytes() + seg*l.RegionBytes() // [block][layer][kv]
					if kind == LayerSeparate {
						want = (seg*blocks + b) * l.RegionBytes() // [layer][kv][block]
					}
					if off != want {
						t.Fatalf("%v: ArenaOffset(%d,%d,%v) = %d, want %d", kind, b, layer, kv, off, want)
					}
					for i := off; i < off+l.RegionBytes(); i++ {
						if seen[i] {
							t.Fatalf("%v: byte %d in two regions", kind, i)
						}
						seen[i] = true
					}
				}
			}
		}
		if i := slices.Index(seen, false); i >= 0 {
			t.Errorf("%v: byte %d in no region", kind, i)
		}
	}
}

// TestLayoutLayerViews: LayerView of a block and LayerTensor of the arena
// address the same bytes, inside the region ArenaOffset names.
func TestLayoutLayerViews(t *testing.T) {
	const blocks = 3
	s := testSpec
	for _, kind := range kinds {
		l, err := NewLayoutKind(s, 4, kind)
		if err != nil {
			t.Fatal(err)
		}
		for layer := range s.Layers {
			for _, kv := range []KV{Key, Value} {
				all, err := l.LayerTensor(blocks, layer, kv)
				if err != nil {
					t.Fatal(err)
				}
				if all.IsContiguous() != (kind == LayerSeparate) || all.StorageBytes() != blocks*l.BlockBytes() {
					t.Fatalf("%v: LayerTensor %v: contiguous %v", kind, all, all.IsContiguous())
				}
				for b := range blocks {
					v, err := l.LayerView(blocks, b, layer, kv)
					if err != nil {
						t.Fatal(err)
					}
					base, _ := l.ArenaOffset(blocks, b, layer, kv)
					if !v.IsContiguous() || v.Offset() != base || v.NumBytes() != l.RegionBytes() {
						t.Fatalf("%v: LayerView(%d,%d,%v) = %v, want contiguous at %d", kind, b, layer, kv, v, base)
					}
					for tok := range 4 {
						for h := range s.KVHeads {
							for d := range s.HeadDim {
								got, err := v.Address(tok, h, d)
								want := base + ((tok*s.KVHeads+h)*s.HeadDim+d)*s.DType.Size()
								if err != nil || got != want {
									t.Fatalf("%v: Address(%d,%d,%d) = %d, %v; want %d", kind, tok, h, d, got, err, want)
								}
								if got2, _ := all.Address(b, tok, h, d); got2 != got {
									t.Fatalf("%v: LayerTensor address %d, LayerView %d", kind, got2, got)
								}
							}
						}
					}
				}
			}
		}
	}
}

func TestLayoutArenaOffsetErrors(t *testing.T) {
	l, err := NewLayoutKind(TinySpec, 2, LayerSeparate)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		blocks, block, layer int
		kv                   KV
		want                 error
	}{
		{4, -1, 0, Key, ErrOutOfRange},
		{4, 4, 0, Key, ErrOutOfRange},
		{4, 0, TinySpec.Layers, Key, ErrOutOfRange},
		{4, 0, 0, 0, ErrOutOfRange},
		{0, 0, 0, Key, ErrInvalidSize},
	} {
		if _, err := l.ArenaOffset(c.blocks, c.block, c.layer, c.kv); !errors.Is(err, c.want) {
			t.Errorf("ArenaOffset(%d,%d,%d,%v) = %v, want %v", c.blocks, c.block, c.layer, c.kv, err, c.want)
		}
		if _, err := l.LayerView(c.blocks, c.block, c.layer, c.kv); !errors.Is(err, c.want) {
			t.Errorf("LayerView(%d,%d,%d,%v) = %v, want %v", c.blocks, c.block, c.layer, c.kv, err, c.want)
		}
	}
}
