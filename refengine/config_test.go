package refengine

import (
	"errors"
	"testing"

	"github.com/kvtier/kvtier/gpu"
)

func TestConfigPresetsAreValid(t *testing.T) {
	for _, cfg := range []Config{TinyConfig, SmallConfig} {
		if err := cfg.Validate(); err != nil {
			t.Errorf("%+v: %v", cfg, err)
		}
	}
}

func TestConfigValidateNamesEveryBadField(t *testing.T) {
	tests := []struct {
		name   string
		cfg    Config
		fields []string
	}{
		{"zero", Config{}, []string{"Vocab", "DModel", "Layers", "Heads", "KVHeads", "MLPHidden"}},
		{"negative", Config{Vocab: -1, DModel: 8, Layers: 1, Heads: 1, KVHeads: 1, MLPHidden: -3}, []string{"Vocab", "MLPHidden"}},
		{"heads do not divide d", Config{Vocab: 8, DModel: 10, Layers: 1, Heads: 4, KVHeads: 4, MLPHidden: 8}, []string{"DModel"}},
		{"odd head dim", Config{Vocab: 8, DModel: 12, Layers: 1, Heads: 4, KVHeads: 4, MLPHidden: 8}, []string{"DModel"}},
		{"kv heads do not divide heads", Config{Vocab: 8, DModel: 16, Layers: 1, Heads: 4, KVHeads: 3, MLPHidden: 8}, []string{"KVHeads"}},
		{"more kv heads than heads", Config{Vocab: 8, DModel: 16, Layers: 1, Heads: 2, KVHeads: 4, MLPHidden: 8}, []string{"KVHeads"}},
		{"too large", Config{Vocab: 1 << 20, DModel: 1 << 12, Layers: 1, Heads: 1, KVHeads: 1, MLPHidden: 8}, []string{"DModel"}},
		{"overflow", Config{Vocab: 1 << 62, DModel: 1 << 10, Layers: 1, Heads: 1, KVHeads: 1, MLPHidden: 8}, []string{"DModel"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := tt.cfg
			err := tt.cfg.Validate()
			if !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("Validate = %v, want ErrInvalidConfig", err)
			}
			var got []string
			for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
				var ce *ConfigError
				if !errors.As(e, &ce) {
					t.Fatalf("joined error %v is not a *ConfigError", e)
				}
				got = append(got, ce.Field)
			}
			if len(got) != len(tt.fields) {
				t.Fatalf("bad fields %v, want %v", got, tt.fields)
			}
			for i := range got {
				if got[i] != tt.fields[i] {
					t.Fatalf("bad fields %v, want %v", got, tt.fields)
				}
			}
			if tt.cfg != before {
				t.Fatalf("Validate modified the config")
			}
			if m, err := New(tt.cfg); m != nil || !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("New = %v, %v; want nil, ErrInvalidConfig", m, err)
			}
		})
	}
}

func TestSpecMatchesKVShape(t *testing.T) {
	m := mustModel(t, TinyConfig)
	want := gpu.ModelSpec{Layers: 2, KVHeads: 2, HeadDim: 8, DType: gpu.F32}
	if got := m.Spec(); got != want {
		t.Fatalf("Spec = %+v, want %+v", got, want)
	}
	if m.KVDim() != 16 || TinyConfig.KVDim() != 16 {
		t.Fatalf("KVDim = %d, want 16", m.KVDim())
	}
	layout, err := gpu.NewLayout(m.Spec(), 4)
	if err != nil {
		t.Fatalf("NewLayout(Spec()): %v", err)
	}
	// 2 (K and V) x 2 layers x 16 floats x 4 bytes.
	if layout.BytesPerToken() != 256 {
		t.Fatalf("BytesPerToken = %d, want 256", layout.BytesPerToken())
	}
	if m.Config() != TinyConfig {
		t.Fatalf("Config() = %+v, want %+v", m.Config(), TinyConfig)
	}
}

func TestWeightsArePureFunctionOfConfig(t *testing.T) {
	tokens := []int64{5, 17, 3, 99, 0, 127}
	a := mustRef(t, mustModel(t, TinyConfig), tokens)
	b := mustRef(t, mustModel(t, TinyConfig), tokens)
	requireSameBits(t, "same config", a, b, 0)

	other := TinyConfig
	other.Seed++
	c := mustRef(t, mustModel(t, other), tokens)
	if rowSameBits(a[len(a)-1], c[len(c)-1]) {
		t.Fatalf("seeds %d and %d gave identical logits", TinyConfig.Seed, other.Seed)
	}
}
