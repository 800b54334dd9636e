package gpu

import (
	"errors"
	"slices"
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
