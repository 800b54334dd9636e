package remote

// Probes from review rvA: each test here fails on the code it was written
// against and names the bug in its doc comment.

import (
	"bytes"
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// privateCluster starts a 3-node cluster of its own (as the drills do) and
// returns its addresses.
func privateCluster(t *testing.T) []string {
	t.Helper()
	needServerBinaries(t)
	var addrs []string
	for range 3 {
		addrs = append(addrs, startServer(t, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "5000"))
	}
	create := exec.Command("redis-cli", append(append([]string{"--cluster", "create"}, addrs...),
		"--cluster-replicas", "0", "--cluster-yes")...)
	if out, err := create.CombinedOutput(); err != nil {
		t.Fatalf("cluster create: %v\n%s", err, out)
	}
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		ok := true
		for _, a := range addrs {
			out, _ := exec.Command("redis-cli", "-h", "127.0.0.1", "-p", strings.Split(a, ":")[1], "cluster", "info").Output()
			ok = ok && bytes.Contains(out, []byte("cluster_state:ok"))
		}
		if ok {
			return addrs
		}
		if time.Now().After(deadline) {
			t.Fatal("private cluster never became ok")
		}
	}
}

// TestProbeGetBadDstChangesNoState: a Get whose Dst is not PayloadBytes long,
// or whose Hash is not the block's (the digest in the key names the block;
// a record that verifies under it with another hash means the caller erred)
// is bad input. It must be refused (or at worst be a miss) and change no
// state; instead Get calls the intact stored block Corrupt ("record names
// another block": r.PayloadLen != len(Dst), r.Hash != it.Hash) and deletes
// it from the shared tier, for every node.
func TestProbeGetBadDstChangesNoState(t *testing.T) {
	ctx := context.Background()
	for name, cfg := range servers(t) {
		t.Run(name, func(t *testing.T) {
			s := open(t, cfg)
			for _, c := range []struct {
				what string
				item func(b Block) GetItem
			}{
				{"a Dst one byte short", func(b Block) GetItem { return GetItem{Key: b.Key, Hash: b.Hash, Dst: make([]byte, payload-1)} }},
				{"another Hash", func(b Block) GetItem { return GetItem{Key: b.Key, Hash: b.Hash + 1, Dst: make([]byte, payload)} }},
			} {
				bs := blocks(7, 1, 7)
				put(t, s, bs)
				out := s.Get(ctx, []GetItem{c.item(bs[0])})
				t.Logf("Get with %s: %v", c.what, out[0])
				if n, err := s.Lookup(ctx, keys(bs)); err != nil || n != 1 {
					t.Errorf("after a Get with %s the intact block is gone from the shared tier: Lookup = %d, %v (want 1)", c.what, n, err)
				}
				if out, _ := get(t, s, bs); out[0] != Hit {
					t.Errorf("a correct Get after the one with %s: %v, want hit", c.what, out[0])
				}
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
	addrs := privateCluster(t) // its nodes are paused: not the shared servers
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

// TestProbeTornReadDeletesAFreshBlock: a peer rewrites a block (same key:
// same prefix, model and namespace, but other bytes, as a recompute with
// another batch shape gives) while a reader reads it. On a cluster the
// reader's record and chunk GETs go to different nodes, so it can pair the
// old record with a new chunk: a Corrupt verdict, correct as a miss. But Get
// then deletes the block (record and chunks) without checking that what it
// judged is still there, so it deletes the peer's fresh, intact block: the
// writer's Put reported it stored and no reader ever finds it. The probe
// holds one chunk's node (CLIENT PAUSE ALL) so that the writer's chunk SET
// runs just before the reader's chunk GET.
func TestProbeTornReadDeletesAFreshBlock(t *testing.T) {
	addrs := privateCluster(t)
	ctx := context.Background()
	s := open(t, Config{Addrs: addrs, Cluster: true})
	raw := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	defer raw.Close()
	var a Block
	var chunkNode *redis.Client
	for seed := uint64(1); chunkNode == nil; seed++ {
		a = blocks(5, 1, seed)[0]
		rn, err := raw.MasterForKey(ctx, s.recordKey(a.Key))
		if err != nil {
			t.Fatal(err)
		}
		for i := range s.chunks {
			cn, err := raw.MasterForKey(ctx, s.chunkKey(a.Key, i))
			if err != nil {
				t.Fatal(err)
			}
			if cn.Options().Addr != rn.Options().Addr {
				chunkNode = cn
				break
			}
		}
	}
	put(t, s, []Block{a})
	b := a // the peer's recompute: same key, other bytes
	b.Payload = bytes.Clone(a.Payload)
	for i := range b.Payload {
		b.Payload[i] ^= 0x5A
	}
	if err := chunkNode.Do(ctx, "CLIENT", "PAUSE", 800, "ALL").Err(); err != nil {
		t.Fatal(err)
	}
	putDone := make(chan error, 1)
	go func() { putDone <- s.Put(ctx, []Block{b})[0] }()
	time.Sleep(200 * time.Millisecond) // the writer's chunk SET waits at the paused node first
	getDone := make(chan Outcome, 1)
	go func() {
		dst := make([]byte, payload)
		getDone <- s.Get(ctx, []GetItem{{Key: a.Key, Hash: a.Hash, Dst: dst}})[0]
	}()
	if err := <-putDone; err != nil {
		t.Fatalf("the peer's Put: %v", err)
	}
	t.Logf("the reader during the rewrite: %v", <-getDone)
	dst := make([]byte, payload)
	o := s.Get(ctx, []GetItem{{Key: b.Key, Hash: b.Hash, Dst: dst}})[0]
	if o != Hit || !bytes.Equal(dst, b.Payload) {
		t.Errorf("after the rewrite the peer's block reads %v (want hit with its bytes): the torn reader deleted it", o)
	}
}

// TestProbeFailedPutDeletesAPeersBlock: on a standalone server, a Put
// whose chunk SET fails deletes the block's key (checkPut: "deletes the
// records of blocks whose chunks did not all land") even when its own
// record SET failed too, i.e. when the record there is a peer's, intact and
// untouched by this Put. A server out of memory under noeviction refuses
// every SET (OOM) but takes DEL: a node's failed write-through then
// destroys the block another node stored. The failed Put should change
// nothing (delete only a record it wrote itself).
func TestProbeFailedPutDeletesAPeersBlock(t *testing.T) {
	needServerBinaries(t)
	addr := startServer(t, "--maxmemory-policy", "noeviction")
	ctx := context.Background()
	s := open(t, Config{Addrs: []string{addr}})
	raw := redis.NewClient(&redis.Options{Addr: addr})
	defer raw.Close()
	peer := blocks(9, 1, 9)
	put(t, s, peer) // the peer's block, stored and intact
	if err := raw.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
		t.Fatal(err)
	}
	again := peer[0] // this node's write-through of the same block
	errs := s.Put(ctx, []Block{again})
	t.Logf("the Put on a full server: %v", errs[0])
	if errs[0] == nil {
		t.Fatal("the Put succeeded on a server refusing writes: the probe did not probe")
	}
	if err := raw.ConfigSet(ctx, "maxmemory", "0").Err(); err != nil {
		t.Fatal(err)
	}
	if out, dst := get(t, s, peer); out[0] != Hit || !bytes.Equal(dst[0], peer[0].Payload) {
		t.Errorf("the peer's block after another node's failed Put: %v (want hit): the failed Put deleted it", out[0])
	}
}

// TestProbeFailedClusterRewriteCorruptsAPeersBlock: on a cluster a Put
// overwrites the chunk keys in place first and writes the commit record in a
// second round trip. When that second trip fails (here the record's node
// holds writes past the Put's deadline), the Put reports failure, yet the
// peer's record now points at this Put's chunks: the peer's intact block
// reads Corrupt and is deleted. A failed Put should change nothing (e.g.
// chunk keys named by a per-write id kept in the record, or skip blocks the
// tier already holds, as LowerWrite's doc says lower tiers do).
func TestProbeFailedClusterRewriteCorruptsAPeersBlock(t *testing.T) {
	addrs := privateCluster(t)
	ctx := context.Background()
	s := open(t, Config{Addrs: addrs, Cluster: true})
	raw := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	defer raw.Close()
	// A block none of whose chunks is on its record's node.
	var a Block
	var recNode *redis.Client
	for seed := uint64(1); recNode == nil; seed++ {
		a = blocks(11, 1, seed)[0]
		rn, err := raw.MasterForKey(ctx, s.recordKey(a.Key))
		if err != nil {
			t.Fatal(err)
		}
		apart := true
		for i := range s.chunks {
			cn, err := raw.MasterForKey(ctx, s.chunkKey(a.Key, i))
			if err != nil {
				t.Fatal(err)
			}
			apart = apart && cn.Options().Addr != rn.Options().Addr
		}
		if apart {
			recNode = rn
		}
	}
	put(t, s, []Block{a}) // the peer's block
	b := a                // this node's recompute: same key, other bytes
	b.Payload = bytes.Clone(a.Payload)
	for i := range b.Payload {
		b.Payload[i] ^= 0xA5
	}
	if err := recNode.Do(ctx, "CLIENT", "PAUSE", 1000, "WRITE").Err(); err != nil {
		t.Fatal(err)
	}
	pctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	err := s.Put(pctx, []Block{b})[0]
	cancel()
	t.Logf("the rewrite: %v", err)
	if err == nil {
		t.Fatal("the rewrite succeeded with its record's node paused past its deadline: the probe did not probe")
	}
	time.Sleep(time.Second) // the pause ends; the timed-out record SET died with its connection
	dst := make([]byte, payload)
	if o := s.Get(ctx, []GetItem{{Key: a.Key, Hash: a.Hash, Dst: dst}})[0]; o != Hit || !bytes.Equal(dst, a.Payload) {
		t.Errorf("the peer's block after a failed rewrite: %v (want hit with the peer's bytes)", o)
	}
}
