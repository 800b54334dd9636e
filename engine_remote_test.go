package kvtier_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/kvtier/kvtier"
	"github.com/kvtier/kvtier/gpu"
	"github.com/kvtier/kvtier/internal/enginetest"
	"github.com/kvtier/kvtier/refengine"
)

// TestReferenceEngineThroughRedis: node A serves prompts and writes every
// block through to a shared Redis tier; node B, a fresh Manager with empty
// local tiers, serves the same prompts from it. Then chunks are overwritten
// (SETRANGE) and deleted under their records, and at last every key of the
// run is dropped (what FLUSHALL does to it; the server is shared with other
// tests): each time a fresh node serves the prompts again. Damage lowers the
// hits, never changes a logit: every row equals a no-cache recompute, bit
// for bit.
func TestReferenceEngineThroughRedis(t *testing.T) {
	addr := standaloneRedis(t)
	ctx := engineCtx(t)
	model := engineModel(t)
	prefix := fmt.Sprintf("test-engine-%d", rand.Uint64())
	raw := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() {
		dropKeys(t, raw, prefix)
		raw.Close()
	})

	node := func() *kvtier.Manager {
		cfg := engineConfig(t, 24, 32, gpu.BlockContiguous)
		cfg.Ingestion, cfg.DiskIngestion = kvtier.IngestAll, kvtier.IngestAll
		cfg.Remote = &kvtier.RemoteConfig{Addrs: []string{addr}, Prefix: prefix}
		return mustNew(t, cfg)
	}
	serve := func(name string) (enginetest.Tally, kvtier.TierStats) {
		m := node()
		defer mustClose(t, m)
		p := enginetest.NewPrompts(11, refengine.TinyConfig.Vocab, ebt, 3)
		tally := serveChecked(t, ctx, &enginetest.Engine{M: m, Model: model}, p, 1, 12, 2, 0)
		if err := m.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		st, err := m.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %v; remote %v", name, tally, st.Tier(kvtier.Remote))
		return tally, st.Tier(kvtier.Remote)
	}

	a, _ := serve("node A")
	if a.Computed == 0 {
		t.Fatal("node A computed nothing")
	}
	b, _ := serve("node B")
	if b.Loaded == 0 {
		t.Fatalf("node B loaded nothing from the shared tier: %v", b)
	}

	// Damage: overwrite every third chunk, delete every fifth.
	chunks := scanKeys(t, raw, prefix+":*:c:*")
	if len(chunks) == 0 {
		t.Fatal("no chunk keys under the run's prefix")
	}
	for i, k := range chunks {
		switch {
		case i%3 == 0:
			if err := raw.SetRange(ctx, k, 17, "X").Err(); err != nil {
				t.Fatal(err)
			}
		case i%5 == 0:
			if err := raw.Del(ctx, k).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
	c, cst := serve("node C, damaged chunks")
	if cst.Failed+cst.Misses == 0 {
		t.Fatalf("the damaged chunks were not counted: %v", cst)
	}
	if c.Loaded >= b.Loaded {
		t.Fatalf("node C loaded %d tokens with damaged chunks, node B %d", c.Loaded, b.Loaded)
	}

	dropKeys(t, raw, prefix)
	d, _ := serve("node D, keys dropped")
	if d.Loaded != 0 {
		t.Fatalf("node D loaded %d tokens after every key was dropped", d.Loaded)
	}
}

func scanKeys(t *testing.T, c *redis.Client, match string) []string {
	t.Helper()
	var out []string
	iter := c.Scan(context.Background(), 0, match, 1000).Iterator()
	for iter.Next(context.Background()) {
		out = append(out, iter.Val())
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// dropKeys deletes every key of the run.
func dropKeys(t *testing.T, c *redis.Client, prefix string) {
	t.Helper()
	keys := scanKeys(t, c, prefix+":*")
	for i := 0; i < len(keys); i += 500 {
		if err := c.Del(context.Background(), keys[i:min(i+500, len(keys))]...).Err(); err != nil {
			t.Fatal(err)
		}
	}
}

// standaloneRedis returns the standalone Redis server of .ci/redis.sh
// (KVTIER_REDIS), or skips the test; under KVTIER_REQUIRE_REDIS (CI) its
// absence fails it.
func standaloneRedis(t *testing.T) string {
	t.Helper()
	addr := os.Getenv("KVTIER_REDIS")
	if addr == "" {
		if os.Getenv("KVTIER_REQUIRE_REDIS") != "" {
			t.Fatal("KVTIER_REQUIRE_REDIS is set (CI) but KVTIER_REDIS is not")
		}
		t.Skip(`no Redis: run eval "$(.ci/redis.sh start)" first (CI does)`)
	}
	return addr
}
