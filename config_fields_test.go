package kvtier

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/kvtier/kvtier/disk"
	"github.com/kvtier/kvtier/gpu"
	"github.com/kvtier/kvtier/pinned"
	"github.com/kvtier/kvtier/remote"
)

// TestConfigErrorNamesField: every refused value comes back from New as a
// *ConfigError naming the field the caller set, wrapping ErrBadConfig, before
// New allocates anything. Remote.TTL, Remote.ChunkBytes and a PinnedBytes or
// DiskBytes of too many slots were refused only later, by the tier's own
// constructor (the disk's not at all), with no *ConfigError; a negative Events count was named "Events" with the whole
// struct as its value; an overflowing BlockTokens was named "Model"; a
// GPUBlocks past int32 block ids or the machine's memory, or a PinnedBytes
// the device cannot back, had no *ConfigError.
func TestConfigErrorNamesField(t *testing.T) {
	dir := t.TempDir()
	rem := func(r RemoteConfig) *RemoteConfig { r.Addrs = []string{"127.0.0.1:1"}; return &r }
	cases := []struct {
		name  string
		cfg   Config
		field string
		is    error // also errors.Is, beside ErrBadConfig
	}{
		{"Remote.TTL under 1s", Config{GPUBlocks: 4, PinnedBytes: 1 << 20, Remote: rem(RemoteConfig{TTL: time.Millisecond})}, "Remote.TTL", remote.ErrBadConfig},
		{"Remote.TTL negative", Config{GPUBlocks: 4, PinnedBytes: 1 << 20, Remote: rem(RemoteConfig{TTL: -time.Hour})}, "Remote.TTL", remote.ErrBadConfig},
		{"Remote.ChunkBytes negative", Config{GPUBlocks: 4, PinnedBytes: 1 << 20, Remote: rem(RemoteConfig{ChunkBytes: -1})}, "Remote.ChunkBytes", remote.ErrBadConfig},
		{"Remote.ChunkBytes over 512 MiB", Config{GPUBlocks: 4, PinnedBytes: 1 << 20, Remote: rem(RemoteConfig{ChunkBytes: 1 << 30})}, "Remote.ChunkBytes", remote.ErrBadConfig},
		{"Events.QueueSize negative", Config{GPUBlocks: 4, Events: &EventsConfig{Endpoint: "tcp://*:0", QueueSize: -1}}, "Events.QueueSize", nil},
		{"Events.DPRank negative", Config{GPUBlocks: 4, Events: &EventsConfig{Endpoint: "tcp://*:0", DPRank: -1}}, "Events.DPRank", nil},
		{"BlockTokens overflowing a block", Config{GPUBlocks: 4, BlockTokens: math.MaxInt}, "BlockTokens", nil},
		{"GPUBlocks past int32 block ids", Config{GPUBlocks: math.MaxInt32 + 1, BlockTokens: 1}, "GPUBlocks", nil},
		{"GPUBlocks whose metadata exceeds memory", Config{GPUBlocks: math.MaxInt32, BlockTokens: 1 << 20}, "GPUBlocks", gpu.ErrOutOfMemory},
		{"PinnedBytes the device cannot back", Config{GPUBlocks: 4, BlockTokens: 1 << 14, PinnedBytes: 1 << 48}, "PinnedBytes", pinned.ErrAlloc},
		{"PinnedBytes of too many slots", Config{GPUBlocks: 4, PinnedBytes: math.MaxInt64}, "PinnedBytes", nil},
		{"DiskBytes of too many slots", Config{GPUBlocks: 4, PinnedBytes: 1 << 20, DiskDir: dir, DiskBytes: math.MaxInt64}, "DiskBytes", disk.ErrInvalidConfig},
	}
	for _, c := range cases {
		m, err := New(c.cfg)
		if m != nil {
			_ = m.Close(t.Context())
			t.Errorf("%s: New accepted it", c.name)
			continue
		}
		var ce *ConfigError
		if !errors.As(err, &ce) || ce.Field != c.field || !errors.Is(err, ErrBadConfig) {
			t.Errorf("%s: %v, want a *ConfigError for %s", c.name, err, c.field)
			continue
		}
		if c.is != nil && !errors.Is(err, c.is) {
			t.Errorf("%s: %v, want errors.Is %v", c.name, err, c.is)
		}
	}
}
