package group

import (
	"fmt"

	"go.uber.org/zap"

	"github.com/kvtier/kvtier"
)

// Config configures one rank's side of a group.
type Config struct {
	// Rank is this rank's index in [0, Size).
	Rank, Size int
	// Manager is this rank's Manager, holding this rank's shard of the KV
	// (built from RankConfig). The Rank never closes it.
	Manager *kvtier.Manager
	// Collective reduces across the group's ranks.
	Collective Collective
	// Logger receives the group's logs (default: none).
	Logger *zap.Logger
}

// RankConfig returns a copy of cfg for rank of a group of size ranks: the
// rank and the group size are folded into ModelID, hence into every
// block's namespace, every digest (the shared remote tier's keys) and the
// disk tier's fingerprint. Each rank stores its own shard under its own
// keys: ranks never read each other's slices, and a group of another size
// (another split of the heads) never reads this one's. cfg is not modified.
func RankConfig(cfg kvtier.Config, rank, size int) (kvtier.Config, error) {
	if size < 1 {
		return cfg, &ConfigError{"Size", size, "must be >= 1"}
	}
	if rank < 0 || rank >= size {
		return cfg, &ConfigError{"Rank", rank, fmt.Sprintf("must be in [0, %d)", size)}
	}
	cfg.ModelID = fmt.Sprintf("%s|tp=%d/%d", cfg.ModelID, rank, size)
	return cfg, nil
}

func (c Config) validate() error {
	switch {
	case c.Size < 1:
		return &ConfigError{"Size", c.Size, "must be >= 1"}
	case c.Rank < 0 || c.Rank >= c.Size:
		return &ConfigError{"Rank", c.Rank, fmt.Sprintf("must be in [0, %d)", c.Size)}
	case c.Manager == nil:
		return &ConfigError{"Manager", nil, "required"}
	case c.Collective == nil:
		return &ConfigError{"Collective", nil, "required"}
	}
	return nil
}
