package remote

// Probes from review rvA: each test here fails on the code it was written
// against and names the bug in its doc comment.

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestProbeGetBadDstChangesNoState: a Get whose Dst is not PayloadBytes long
// is bad input. It must be refused (or at worst be a miss) and change no
// state; instead Get calls the intact stored block Corrupt ("record names
// another block": r.PayloadLen != len(Dst)) and deletes it from the shared
// tier, for every node.
func TestProbeGetBadDstChangesNoState(t *testing.T) {
	ctx := context.Background()
	for name, cfg := range servers(t) {
		t.Run(name, func(t *testing.T) {
			s := open(t, cfg)
			bs := blocks(7, 1, 7)
			put(t, s, bs)
			short := make([]byte, payload-1)
			out := s.Get(ctx, []GetItem{{Key: bs[0].Key, Hash: bs[0].Hash, Dst: short}})
			t.Logf("Get with a %d-byte Dst: %v", len(short), out[0])
			if n, err := s.Lookup(ctx, keys(bs)); err != nil || n != 1 {
				t.Errorf("after a Get with a bad Dst the intact block is gone from the shared tier: Lookup = %d, %v (want 1)", n, err)
			}
			if out, _ := get(t, s, bs); out[0] != Hit {
				t.Errorf("a correct Get after the bad one: %v, want hit", out[0])
			}
		})
	}
}

// TestProbeSeveralAddrsIsACluster: Config says "several [addresses] are a
// Redis Cluster", and New does make a cluster client for them
// (redis.NewUniversalClient: len(Addrs) > 1), but Put picks its write path
// from the Cluster flag alone (single := !s.cfg.Cluster). With several
// addresses and Cluster unset, chunks and commit records go in one pipeline
// that the cluster client splits by node and runs in parallel: a record is
// visible while a chunk has not landed, a reader finds the half-written
// block Corrupt and deletes it, and the writer's Put reports success for a
// block that is gone. The probe holds writes on the node of one chunk
// (CLIENT PAUSE WRITE, 1.5 s) during a Put.
func TestProbeSeveralAddrsIsACluster(t *testing.T) {
	a := os.Getenv("KVTIER_REDIS_CLUSTER")
	if a == "" {
		t.Skip("needs $KVTIER_REDIS_CLUSTER")
	}
	addrs := strings.Split(a, ",")
	for _, c := range []struct {
		name    string
		cluster bool
	}{{"several addrs, Cluster unset", false}, {"Cluster set", true}} {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			s := open(t, Config{Addrs: addrs, Cluster: c.cluster})
			raw := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
			defer raw.Close()
			// A block with a chunk on another node than its record.
			var b Block
			var chunkNode *redis.Client
			for seed := uint64(1); chunkNode == nil; seed++ {
				b = blocks(3, 1, seed)[0]
				rn, err := raw.MasterForKey(ctx, s.recordKey(b.Key))
				if err != nil {
					t.Fatal(err)
				}
				for i := range s.chunks {
					cn, err := raw.MasterForKey(ctx, s.chunkKey(b.Key, i))
					if err != nil {
						t.Fatal(err)
					}
					if cn.Options().Addr != rn.Options().Addr {
						chunkNode = cn
						break
					}
				}
			}
			if err := chunkNode.Do(ctx, "CLIENT", "PAUSE", 1500, "WRITE").Err(); err != nil {
				t.Fatal(err)
			}
			defer chunkNode.Do(ctx, "CLIENT", "UNPAUSE")
			putDone := make(chan error, 1)
			go func() {
				pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				defer cancel()
				putDone <- s.Put(pctx, []Block{b})[0]
			}()
			var seenEarly bool
			var early Outcome
			deadline := time.Now().Add(time.Second)
			for time.Now().Before(deadline) && !seenEarly {
				if n, _ := s.Lookup(ctx, []Key{b.Key}); n == 1 {
					select {
					case <-putDone:
						t.Fatal("Put returned while a chunk's node was paused")
					default:
					}
					seenEarly = true
					dst := make([]byte, payload)
					early = s.Get(ctx, []GetItem{{Key: b.Key, Hash: b.Hash, Dst: dst}})[0]
				}
				time.Sleep(20 * time.Millisecond)
			}
			err := <-putDone
			if seenEarly {
				t.Errorf("the commit record was visible before a chunk landed; a reader then got %v", early)
			}
			if err == nil {
				dst := make([]byte, payload)
				if o := s.Get(ctx, []GetItem{{Key: b.Key, Hash: b.Hash, Dst: dst}})[0]; o != Hit {
					t.Errorf("Put reported the block stored, then a Get: %v (want hit)", o)
				}
			}
		})
	}
}
