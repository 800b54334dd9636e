package remote

// Tests from the review of the remote tier of 2026-11-27: each failed on
// the code before its fix and names the bug in its doc comment.

import (
	"bytes"
	"context"
	"errors"
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

// TestGetBadItemChangesNoState: a Get whose Dst is not PayloadBytes long,
// or whose Hash is not the block's (the digest in the key names the block;
// a record that verifies under it with another hash means the caller erred)
// is bad input: Failed (a short Dst) or Missing (another hash), and
// nothing changes. Get used to call the intact stored block Corrupt
// ("record names another block": r.PayloadLen != len(Dst), r.Hash !=
// it.Hash) and delete it from the shared tier, for every node.
func TestGetBadItemChangesNoState(t *testing.T) {
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

// TestSeveralAddrsIsACluster: Config says "several [addresses] are a
// Redis Cluster", and New does make a cluster client for them
// (redis.NewUniversalClient: len(Addrs) > 1), but Put picks its write path
// from the Cluster flag alone (single := !s.cfg.Cluster). With several
// addresses and Cluster unset, chunks and commit records go in one pipeline
// that the cluster client splits by node and runs in parallel: a record is
// visible while a chunk has not landed, a reader finds the half-written
// block Corrupt and deletes it, and the writer's Put reports success for a
// block that is gone. The probe holds writes on the node of one chunk
// (CLIENT PAUSE WRITE, 1.5 s) during a Put.
func TestSeveralAddrsIsACluster(t *testing.T) {
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

// TestPutKeepsAStoredBlock: a Put of a block whose commit record is there
// (a peer stored it; here with other bytes, as a recompute with another
// batch shape gives) leaves it as it is and reports it stored. It used to
// rewrite the chunks in place under the live record (review of
// 2026-11-27): a reader in between paired the old record with a new chunk,
// judged the block Corrupt and deleted the peer's fresh block, and a
// rewrite that failed half-way left the record over chunks that were not
// its own.
func TestPutKeepsAStoredBlock(t *testing.T) {
	ctx := context.Background()
	for name, cfg := range servers(t) {
		t.Run(name, func(t *testing.T) {
			s := open(t, cfg)
			a := blocks(5, 1, 5)[0]
			put(t, s, []Block{a})
			b := a // the peer's recompute: same key, other bytes
			b.Payload = bytes.Clone(a.Payload)
			for i := range b.Payload {
				b.Payload[i] ^= 0x5A
			}
			if err := s.Put(ctx, []Block{b})[0]; err != nil {
				t.Fatalf("Put of a stored block: %v", err)
			}
			if out, dst := get(t, s, []Block{a}); out[0] != Hit || !bytes.Equal(dst[0], a.Payload) {
				t.Errorf("after the second Put the block reads %v (want hit with the first writer's bytes)", out[0])
			}
		})
	}
}

// TestDeleteIfUnchanged: the verdict of a reader (or a failed Put's clean
// up) deletes a commit record only if it is still the one judged: a record
// rewritten meanwhile stays.
func TestDeleteIfUnchanged(t *testing.T) {
	ctx := context.Background()
	for name, cfg := range servers(t) {
		t.Run(name, func(t *testing.T) {
			s := open(t, cfg)
			bs := blocks(3, 1, 13)
			put(t, s, bs)
			rec, err := s.c.Get(ctx, s.recordKey(bs[0].Key)).Bytes()
			if err != nil {
				t.Fatal(err)
			}
			s.deleteIfUnchanged(ctx, []judged{{bs[0].Key, append(bytes.Clone(rec), 0)}})
			if n, err := s.Lookup(ctx, keys(bs)); err != nil || n != 1 {
				t.Fatalf("after a delete judged on other bytes: Lookup = %d, %v; want the record kept", n, err)
			}
			s.deleteIfUnchanged(ctx, []judged{{bs[0].Key, rec}})
			if n, err := s.Lookup(ctx, keys(bs)); err != nil || n != 0 {
				t.Fatalf("after a delete judged on its bytes: Lookup = %d, %v; want it gone", n, err)
			}
		})
	}
}

// TestFailedPutDeletesNoPeersBlock: on a standalone server out of memory
// under noeviction (every SET refused with OOM, DEL taken), a Put of a
// block a peer stored reports it stored and leaves it; a Put of a new block
// fails and deletes nothing. (A failed Put used to delete the block's
// record even where its own SET had failed, i.e. a peer's intact block:
// review of 2026-11-27.)
func TestFailedPutDeletesNoPeersBlock(t *testing.T) {
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
	if err := s.Put(ctx, []Block{peer[0]})[0]; err != nil {
		t.Errorf("this node's write-through of the stored block on a full server: %v, want stored (skipped)", err)
	}
	if err := s.Put(ctx, blocks(9, 1, 10))[0]; err == nil {
		t.Fatal("a new block's Put succeeded on a server refusing writes")
	}
	if err := raw.ConfigSet(ctx, "maxmemory", "0").Err(); err != nil {
		t.Fatal(err)
	}
	if out, dst := get(t, s, peer); out[0] != Hit || !bytes.Equal(dst[0], peer[0].Payload) {
		t.Errorf("the peer's block after another node's failed Put: %v (want hit)", out[0])
	}
}

// TestClusterRewriteLeavesAPeersBlock: on a cluster a Put writes the chunk
// keys first and the commit record in a second round trip. A Put of a block
// a peer stored, while the record's node holds writes past the Put's
// deadline, leaves the peer's block readable. (It used to overwrite the
// chunks in place and fail on the record: the peer's record pointed at
// this Put's chunks, its block read Corrupt and was deleted — review of
// 2026-11-27. Now the stored block is not written again.)
func TestClusterRewriteLeavesAPeersBlock(t *testing.T) {
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
	time.Sleep(time.Second) // the pause ends; the timed-out record SET died with its connection
	dst := make([]byte, payload)
	if o := s.Get(ctx, []GetItem{{Key: a.Key, Hash: a.Hash, Dst: dst}})[0]; o != Hit || !bytes.Equal(dst, a.Payload) {
		t.Errorf("the peer's block after a failed rewrite: %v (want hit with the peer's bytes)", o)
	}
}

// TestZeroDigestRefused: a block with a zero digest is not stored (every
// such block of a namespace would share one key, told apart by its 64-bit
// hash alone) and not looked for; a payload of the wrong size neither.
func TestZeroDigestRefused(t *testing.T) {
	ctx := context.Background()
	for name, cfg := range servers(t) {
		t.Run(name, func(t *testing.T) {
			s := open(t, cfg)
			b := blocks(17, 2, 17)
			b[0].Digest = [32]byte{}
			b[1].Payload = b[1].Payload[:payload-1]
			for i, err := range s.Put(ctx, b) {
				if !errors.Is(err, ErrBadBlock) {
					t.Errorf("Put of block %d: %v, want ErrBadBlock", i, err)
				}
			}
			if o := s.Get(ctx, []GetItem{{Key: b[0].Key, Hash: b[0].Hash, Dst: make([]byte, payload)}})[0]; o != Failed {
				t.Errorf("Get with a zero digest: %v, want failed", o)
			}
		})
	}
}

// TestPutRewritesABlockMissingAChunk: a Put of a block whose record is there
// but one of whose chunks Redis evicted writes it again (the record alone is
// a miss for every reader), where a whole stored block is left as it is.
func TestPutRewritesABlockMissingAChunk(t *testing.T) {
	ctx := context.Background()
	for name, cfg := range servers(t) {
		t.Run(name, func(t *testing.T) {
			s := open(t, cfg)
			bs := blocks(19, 1, 19)
			put(t, s, bs)
			if err := s.c.Del(ctx, s.chunkKey(bs[0].Key, s.chunks-1)).Err(); err != nil {
				t.Fatal(err)
			}
			if err := s.Put(ctx, bs)[0]; err != nil {
				t.Fatalf("Put of the block missing a chunk: %v", err)
			}
			if out, dst := get(t, s, bs); out[0] != Hit || !bytes.Equal(dst[0], bs[0].Payload) {
				t.Fatalf("the block after the second Put: %v, want hit", out[0])
			}
		})
	}
}
