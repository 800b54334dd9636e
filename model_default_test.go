package kvtier

import (
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/kvtier/kvtier/gpu"
)

// TestUnsetModelWarns: a zero Config.Model silently meant the toy
// gpu.TinySpec; with a tier below the GPU New now warns, and not otherwise.
func TestUnsetModelWarns(t *testing.T) {
	warned := func(cfg Config) bool {
		core, logs := observer.New(zapcore.WarnLevel)
		cfg.Logger = zap.New(core)
		m := newManager(t, cfg)
		_ = m.Close(t.Context())
		for _, e := range logs.All() {
			if strings.Contains(e.Message, "Config.Model is unset") {
				return true
			}
		}
		return false
	}
	if !warned(Config{GPUBlocks: 4, PinnedBytes: 1 << 20}) {
		t.Error("no warning for a zero Model with a pinned tier")
	}
	if warned(Config{GPUBlocks: 4, PinnedBytes: 1 << 20, Model: gpu.TinySpec}) {
		t.Error("warning with Model set")
	}
	if warned(Config{GPUBlocks: 4}) {
		t.Error("warning for a GPU-only Manager")
	}
}
