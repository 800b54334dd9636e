package remote

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// servers returns the configurations the tests run against: the standalone
// server in $KVTIER_REDIS and the cluster in $KVTIER_REDIS_CLUSTER, started
// by .ci/redis.sh. A test with neither skips, saying how to start them.
func servers(t *testing.T) map[string]Config {
	t.Helper()
	out := map[string]Config{}
	if a := os.Getenv("KVTIER_REDIS"); a != "" {
		out["standalone"] = Config{Addrs: []string{a}}
	}
	if a := os.Getenv("KVTIER_REDIS_CLUSTER"); a != "" {
		out["cluster"] = Config{Addrs: strings.Split(a, ","), Cluster: true}
	}
	if len(out) == 0 && os.Getenv("KVTIER_REQUIRE_REDIS") != "" {
		t.Fatal("KVTIER_REQUIRE_REDIS is set (CI) but no Redis address is: .ci/redis.sh did not run")
	}
	if len(out) == 0 {
		t.Skip(`no Redis: run eval "$(.ci/redis.sh start)" first (CI does)`)
	}
	return out
}

// privateStandalone starts a standalone server of its own, for a test that
// stalls or empties it: the shared servers serve other packages' tests
// at the same time (go test runs packages in parallel).
func privateStandalone(t *testing.T) Config {
	t.Helper()
	needServerBinaries(t)
	return Config{Addrs: []string{startServer(t)}}
}

const payload = 10 << 10 // 2.5 chunks of 4 KiB

func open(t *testing.T, cfg Config) *Store {
	t.Helper()
	if cfg.Prefix == "" {
		cfg.Prefix = fmt.Sprintf("test-%s-%d", t.Name(), rand.Uint64())
	}
	cfg.PayloadBytes, cfg.ChunkBytes = payload, 4<<10
	if cfg.Fingerprint == 0 {
		cfg.Fingerprint = 0xF00D
	}
	s, err := Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func blocks(ns uint64, n int, seed uint64) []Block {
	r := rand.New(rand.NewPCG(seed, ns))
	out := make([]Block, n)
	for i := range out {
		out[i].Namespace = ns
		for j := range out[i].Digest {
			out[i].Digest[j] = byte(r.Uint32())
		}
		out[i].Hash, out[i].Tokens = r.Uint64(), 16
		out[i].Payload = make([]byte, payload)
		for j := range out[i].Payload {
			out[i].Payload[j] = byte(r.Uint32())
		}
	}
	return out
}

func keys(bs []Block) []Key {
	out := make([]Key, len(bs))
	for i, b := range bs {
		out[i] = b.Key
	}
	return out
}

func get(t *testing.T, s *Store, bs []Block) ([]Outcome, [][]byte) {
	t.Helper()
	items := make([]GetItem, len(bs))
	dst := make([][]byte, len(bs))
	for i, b := range bs {
		dst[i] = make([]byte, payload)
		items[i] = GetItem{Key: b.Key, Hash: b.Hash, Dst: dst[i]}
	}
	return s.Get(context.Background(), items), dst
}

func put(t *testing.T, s *Store, bs []Block) {
	t.Helper()
	for i, err := range s.Put(context.Background(), bs) {
		if err != nil {
			t.Fatalf("Put block %d: %v", i, err)
		}
	}
}

// TestRoundTrip: stored blocks are found by Lookup and read back
// byte-exact; another namespace or another block format finds nothing.
func TestRoundTrip(t *testing.T) {
	ctx := context.Background()
	for name, cfg := range servers(t) {
		t.Run(name, func(t *testing.T) {
			s := open(t, cfg)
			bs := blocks(1, 6, 1)
			put(t, s, bs[:4])
			if n, err := s.Lookup(ctx, keys(bs)); err != nil || n != 4 {
				t.Fatalf("Lookup = %d, %v; want the 4 stored", n, err)
			}
			out, dst := get(t, s, bs)
			for i := range bs {
				want := Hit
				if i >= 4 {
					want = Missing
				}
				if out[i] != want || (want == Hit && !bytes.Equal(dst[i], bs[i].Payload)) {
					t.Fatalf("block %d: %v (exact: %v), want %v", i, out[i], bytes.Equal(dst[i], bs[i].Payload), want)
				}
			}
			other := blocks(2, 1, 1) // same digest bytes? no: another namespace id and stream
			other[0].Digest = bs[0].Digest
			if out, _ := get(t, s, other); out[0] != Missing {
				t.Fatalf("another namespace with the same digest: %v", out[0])
			}
			c2 := cfg
			c2.Prefix, c2.Fingerprint = s.Config().Prefix, 0xBEEF
			s2 := open(t, c2)
			if n, _ := s2.Lookup(ctx, keys(bs)); n != 0 {
				t.Fatalf("another block format sees %d blocks", n)
			}
			if n, err := s.Delete(ctx, keys(bs)); err != nil || n != 4 {
				t.Fatalf("Delete = %d, %v", n, err)
			}
			if n, _ := s.Lookup(ctx, keys(bs)); n != 0 {
				t.Fatalf("after Delete Lookup finds %d", n)
			}
		})
	}
}

// client opens a raw client on the same servers, to damage them by hand.
func client(cfg Config) redis.UniversalClient {
	return redis.NewUniversalClient(&redis.UniversalOptions{Addrs: cfg.Addrs, IsClusterMode: cfg.Cluster})
}

// TestDamageIsAMiss: a chunk overwritten by hand (SETRANGE), a garbage
// record and a record of another block are each a Corrupt miss, a chunk
// evicted under its record a Missing one (gone, not damaged: no failed
// load), never data, and all are cleaned up: the next Lookup misses at
// once.
func TestDamageIsAMiss(t *testing.T) {
	ctx := context.Background()
	for name, cfg := range servers(t) {
		t.Run(name, func(t *testing.T) {
			s := open(t, cfg)
			raw := client(cfg)
			defer raw.Close()
			bs := blocks(7, 4, 3)
			put(t, s, bs)
			must := func(err error) {
				if err != nil {
					t.Fatal(err)
				}
			}
			must(raw.SetRange(ctx, s.chunkKey(bs[0].Key, 1), 100, "x").Err())
			must(raw.Del(ctx, s.chunkKey(bs[1].Key, 2)).Err())
			must(raw.Set(ctx, s.recordKey(bs[2].Key), "garbage", 0).Err())
			rec, err := raw.Get(ctx, s.recordKey(bs[0].Key)).Bytes()
			must(err)
			must(raw.Set(ctx, s.recordKey(bs[3].Key), rec, 0).Err()) // block 0's record under block 3's key
			out, dst := get(t, s, bs)
			for i := range bs {
				want := Corrupt
				if i == 1 {
					want = Missing // its chunk evicted
				}
				if out[i] != want {
					t.Fatalf("damaged block %d: %v, want %v", i, out[i], want)
				}
				if bytes.Equal(dst[i], bs[i].Payload) && i == 3 {
					t.Fatal("block 0's bytes served for block 3")
				}
			}
			if n, _ := s.Lookup(ctx, keys(bs)); n != 0 {
				t.Fatalf("damaged blocks were not cleaned up: Lookup finds %d", n)
			}
		})
	}
}

// TestFlushAllIsAMiss: a server emptied under the tier gives misses.
func TestFlushAllIsAMiss(t *testing.T) {
	cfg := privateStandalone(t) // a FLUSHALL of the shared server emptied it under other packages' tests
	s := open(t, cfg)
	bs := blocks(9, 3, 4)
	put(t, s, bs)
	raw := client(cfg)
	defer raw.Close()
	if err := raw.FlushAll(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	if out, _ := get(t, s, bs); out[0] != Missing || out[1] != Missing || out[2] != Missing {
		t.Fatalf("after FLUSHALL: %v", out)
	}
}

// TestStallIsBoundedByContext: a server that stalls (CLIENT PAUSE: it
// answers no client for a second) turns a read into Failed within the
// caller's deadline, never a hang, and the Store works again once the
// server answers. The stall is in place when CLIENT PAUSE returns; a DEBUG
// SLEEP sent from a goroutine 100 ms ahead of the read, as before, could
// reach the server after the read on a loaded machine, which then served
// the read.
func TestStallIsBoundedByContext(t *testing.T) {
	cfg := privateStandalone(t) // a stall of the shared server timed out other packages' reads
	s := open(t, cfg)
	bs := blocks(11, 2, 5)
	put(t, s, bs)
	raw := client(cfg)
	defer raw.Close()
	if err := raw.Do(context.Background(), "CLIENT", "PAUSE", 1000).Err(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	items := []GetItem{{Key: bs[0].Key, Hash: bs[0].Hash, Dst: make([]byte, payload)}}
	if out := s.Get(ctx, items); out[0] != Failed {
		t.Fatalf("a read from a stalled server: %v, want failed", out[0])
	}
	if d := time.Since(start); d > 900*time.Millisecond {
		t.Fatalf("the read took %v past its 200ms deadline: it waited for the stall", d)
	}
	if err := raw.Ping(context.Background()).Err(); err != nil { // answered once the pause ends
		t.Fatal(err)
	}
	if out, dst := get(t, s, bs); out[0] != Hit || !bytes.Equal(dst[0], bs[0].Payload) {
		t.Fatalf("after the stall: %v", out[0])
	}
}

func TestConfigErrors(t *testing.T) {
	for _, c := range []Config{
		{PayloadBytes: 1},
		{Addrs: []string{"x:1"}},
		{Addrs: []string{"x:1"}, PayloadBytes: 1, TTL: time.Millisecond},
		{Addrs: []string{"x:1"}, PayloadBytes: 1, ChunkBytes: -1},
	} {
		if _, err := Open(context.Background(), c); !errors.Is(err, ErrBadConfig) {
			t.Errorf("%+v: %v, want ErrBadConfig", c, err)
		}
	}
	if _, err := Open(context.Background(), Config{Addrs: []string{"127.0.0.1:1"}, PayloadBytes: 1, DialTimeout: 100 * time.Millisecond}); !errors.Is(err, ErrUnavailable) {
		t.Errorf("no server: %v, want ErrUnavailable", err)
	}
}

func TestRecordRoundTripAndDamage(t *testing.T) {
	r := record{Fingerprint: 1, Namespace: 2, Hash: 3, Tokens: 16, ChunkBytes: 4, PayloadLen: 10, Sums: []uint64{7, 8, 9}}
	r.Digest[0] = 0xAA
	b := r.encode()
	got, err := decodeRecord(b)
	if err != nil || got.Digest != r.Digest || got.PayloadLen != 10 || len(got.Sums) != 3 || got.Sums[2] != 9 {
		t.Fatalf("%+v %v", got, err)
	}
	for i := range b {
		d := bytes.Clone(b)
		d[i] ^= 1
		if _, err := decodeRecord(d); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("a flipped bit at byte %d was accepted", i)
		}
	}
	if _, err := decodeRecord(b[:len(b)-1]); !errors.Is(err, ErrCorrupt) {
		t.Fatal("a short record was accepted")
	}
}

// handshake says whether cmd belongs to a new connection's setup (HELLO,
// CLIENT SETINFO), which the client sends on its own.
func handshake(cmd redis.Cmder) bool { n := cmd.Name(); return n == "hello" || n == "client" }

// roundTrips counts pipelines and single commands sent, handshakes aside.
type roundTrips struct{ n int }

func (r *roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }
func (r *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !handshake(cmd) {
			r.n++
		}
		return next(ctx, cmd)
	}
}
func (r *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) > 0 && !handshake(cmds[0]) {
			r.n++
		}
		return next(ctx, cmds)
	}
}

// TestRoundTripsPerCall: a prefix lookup of a long chain is one round trip,
// a batch read one, a batch write two (which of its blocks are stored
// already, then the chunks and records of the others), and a write of
// blocks all stored one; however many blocks.
func TestRoundTripsPerCall(t *testing.T) {
	cfg, ok := servers(t)["standalone"]
	if !ok {
		t.Skip("needs the standalone server ($KVTIER_REDIS)")
	}
	ctx := context.Background()
	s := open(t, cfg)
	rt := &roundTrips{}
	s.c.AddHook(rt) // the test's only access to the client
	bs := blocks(21, 32, 9)
	if err := s.Ping(ctx); err != nil { // connects first: the handshake is not counted
		t.Fatal(err)
	}
	rt.n = 0
	put(t, s, bs)
	if rt.n != 2 {
		t.Fatalf("a write of 32 blocks took %d round trips, want 2", rt.n)
	}
	rt.n = 0
	put(t, s, bs)
	if rt.n != 1 {
		t.Fatalf("a write of 32 stored blocks took %d round trips, want 1", rt.n)
	}
	rt.n = 0
	if n, err := s.Lookup(ctx, keys(bs)); err != nil || n != 32 {
		t.Fatal(n, err)
	}
	if rt.n != 1 {
		t.Fatalf("a lookup of 32 blocks took %d round trips, want 1", rt.n)
	}
	rt.n = 0
	if out, _ := get(t, s, bs); out[31] != Hit {
		t.Fatal(out[31])
	}
	if rt.n != 1 {
		t.Fatalf("a read of 32 blocks took %d round trips, want 1", rt.n)
	}
}

// Two nodes of one model that lay blocks out differently (here the chunk
// size) share a server: each reads the other's blocks as missing, and
// neither deletes the other's intact blocks as corrupt.
func TestOtherLayoutNeverMeets(t *testing.T) {
	ctx := context.Background()
	for name, cfg := range servers(t) {
		t.Run(name, func(t *testing.T) {
			a := open(t, cfg) // 4 KiB chunks: 3 per block
			cb := cfg
			cb.Prefix, cb.Fingerprint, cb.PayloadBytes, cb.ChunkBytes = a.Config().Prefix, a.Config().Fingerprint, payload, 2<<10
			b, err := Open(ctx, cb)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			bs := blocks(21, 1, 21)
			put(t, a, bs)
			if out, _ := get(t, b, bs); out[0] != Missing {
				t.Fatalf("a node with 2 KiB chunks reads a 4 KiB-chunk block: %v, want missing", out[0])
			}
			if out, dst := get(t, a, bs); out[0] != Hit || !bytes.Equal(dst[0], bs[0].Payload) {
				t.Fatalf("the writer's own block after the other node read it: %v, want a hit", out[0])
			}
		})
	}
}

// A value of another type under a block's key (a hash, a list: nothing a
// Store writes) is damage: a corrupt miss, cleaned up so lookups stop
// finding the block, not a server failure that Lookup keeps advertising.
func TestWrongTypeValueIsCorrupt(t *testing.T) {
	ctx := context.Background()
	for name, cfg := range servers(t) {
		t.Run(name, func(t *testing.T) {
			s := open(t, cfg)
			raw := client(cfg)
			defer raw.Close()
			for _, where := range []string{"chunk", "record"} {
				bs := blocks(23, 1, uint64(len(where)))
				put(t, s, bs)
				k := s.chunkKey(bs[0].Key, 1)
				if where == "record" {
					k = s.recordKey(bs[0].Key)
				}
				if err := raw.Del(ctx, k).Err(); err != nil {
					t.Fatal(err)
				}
				if err := raw.HSet(ctx, k, "f", "v").Err(); err != nil {
					t.Fatal(err)
				}
				if out, _ := get(t, s, bs); out[0] != Corrupt {
					t.Fatalf("%s key holding a hash: %v, want corrupt", where, out[0])
				}
				if n, err := s.Lookup(ctx, keys(bs)); err != nil || n != 0 {
					t.Fatalf("%s key holding a hash: Lookup finds %d (%v) after the read, want the block deleted", where, n, err)
				}
			}
		})
	}
}
