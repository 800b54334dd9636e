package group_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvtier/kvtier"
	"github.com/kvtier/kvtier/gpu"
	"github.com/kvtier/kvtier/group"
	"github.com/kvtier/kvtier/refengine"
)

// TestGroupHitFromSharedTier: a group on a node whose own tiers hold
// nothing of a prompt agrees on the hit the shared tier holds (each rank
// its own shard, under its own keys) and its logits from the loaded KV are
// bit-identical to a recompute. The group agreed its hit from Lookup,
// which left the shared tier out: it recomputed the whole prompt.
func TestGroupHitFromSharedTier(t *testing.T) {
	addr := redisAddr(t)
	prefix := fmt.Sprintf("kvtier-group-test-%d", rand.Uint64())
	node := func() *cluster { return sharedTierNode(t, prefix, []string{addr}, kvtier.IngestAll, -1) }
	prompt := randomTokens(rand.New(rand.NewPCG(7, 7)), 6*bt+1)
	far := time.Now().Add(time.Hour)

	first := node()
	s := first.serve(1, prompt, far)
	if s.valid != 0 {
		t.Fatalf("the first node started from %d valid tokens of a prompt no tier held", s.valid)
	}
	first.free(1)
	first.flush() // written through to the shared tier

	second := node()
	s = second.serve(1, prompt, far) // checks every logit against a recompute
	for r, res := range s.res {
		if res.LocalHit != 6*bt || res.AgreedHit != 6*bt || res.ValidTokens != 6*bt {
			t.Errorf("rank %d on the second node: local hit %d, agreed %d, valid %d; want %d each (the shared tier's blocks)",
				r, res.LocalHit, res.AgreedHit, res.ValidTokens, 6*bt)
		}
	}
	second.free(1)
	second.checkNoLeak()
}

// redisProxy forwards connections to a Redis server at addr. With hang it
// forwards nothing (a server that never answers); once stallGets is set, a
// connection whose next write holds a GET is held for ever (reads hang,
// lookups still answer).
type redisProxy struct {
	addr      string
	hang      bool
	stallGets atomic.Bool
}

func (p *redisProxy) start(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go p.serve(c)
		}
	}()
	return l.Addr().String()
}

func (p *redisProxy) serve(c net.Conn) {
	defer c.Close()
	if p.hang {
		_, _ = io.Copy(io.Discard, c)
		return
	}
	s, err := net.Dial("tcp", p.addr)
	if err != nil {
		return
	}
	defer s.Close()
	go func() { _, _ = io.Copy(c, s) }()
	buf := make([]byte, 64<<10)
	for {
		n, err := c.Read(buf)
		if err != nil {
			return
		}
		// go-redis writes command names in lower case.
		if p.stallGets.Load() && bytes.Contains(bytes.ToLower(buf[:n]), []byte("\r\nget\r\n")) {
			_, _ = io.Copy(io.Discard, c)
			return
		}
		if _, err := s.Write(buf[:n]); err != nil {
			return
		}
	}
}

// TestGroupSharedTierFailsOnOneRank: the shared tier holds every rank's
// shard of a prompt, but one rank's way to it fails. When its lookup hangs
// (past ReadTimeout: that rank's hit is 0), the group agrees on 0 and
// recomputes; when its lookup answers and then its reads hang (past the
// group's Deadline), the ranks that loaded give their blocks back and the
// group agrees on what that rank held valid. No rank waits for ever, every
// rank starts from the same prefix, and the logits are bit-identical to a
// recompute (serve checks them).
func TestGroupSharedTierFailsOnOneRank(t *testing.T) {
	addr := redisAddr(t)
	prompt := randomTokens(rand.New(rand.NewPCG(7, 8)), 6*bt+1)
	for _, hang := range []string{"lookup", "reads"} {
		t.Run("hang="+hang, func(t *testing.T) {
			prefix := fmt.Sprintf("kvtier-group-test-%d", rand.Uint64())
			all := []string{addr, addr, addr, addr}
			first := sharedTierNode(t, prefix, all, kvtier.IngestAll, -1)
			first.serve(1, prompt, time.Now().Add(time.Hour))
			first.free(1)
			first.flush() // written through to the shared tier

			p := &redisProxy{addr: addr, hang: hang == "lookup"}
			ways := append([]string(nil), all...)
			ways[3] = p.start(t)
			quick := -1 // its reads hang, not its lookups: Deadline bounds them
			if hang == "lookup" {
				quick = 3
			}
			second := sharedTierNode(t, prefix, ways, kvtier.IngestEvict, quick) // nothing written down: no write to wait on
			deadline := time.Now().Add(time.Hour)
			if hang == "reads" {
				p.stallGets.Store(true)
				deadline = time.Now().Add(500 * time.Millisecond)
			}
			s := second.serve(1, prompt, deadline)
			for r, res := range s.res {
				wantLocal, wantAgreed := 6*bt, 6*bt
				if hang == "lookup" {
					wantAgreed = 0
					if r == 3 {
						wantLocal = 0
					}
				}
				if res.LocalHit != wantLocal || res.AgreedHit != wantAgreed || res.ValidTokens != 0 {
					t.Errorf("rank %d: local hit %d, agreed %d, valid %d; want %d, %d, 0", r, res.LocalHit, res.AgreedHit, res.ValidTokens, wantLocal, wantAgreed)
				}
				// A rank that loaded more than the group holds gives it back
				// (its blocks are cached, shared: the engine must not
				// recompute into them).
				if res.Reallocated != (res.LocalValid > res.ValidTokens) {
					t.Errorf("rank %d: held %d valid of the group's %d, reallocated %v", r, res.LocalValid, res.ValidTokens, res.Reallocated)
				}
			}
			second.free(1)
			second.checkNoLeak()
		})
	}
}

// redisAddr returns the standalone Redis server of .ci/redis.sh, or skips
// (fails under CI's KVTIER_REQUIRE_REDIS).
func redisAddr(t *testing.T) string {
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

// sharedTierNode is a group whose ranks write every block leaving pinned
// memory through to the shared tier under prefix, rank r reaching it at
// addrs[r] (at addrs[0] when only one is given); rank quick's lookups give
// up after 300 ms, the others' after 10 s (however loaded the machine,
// they answer). Closed when the test ends.
func sharedTierNode(t *testing.T, prefix string, addrs []string, ingest kvtier.Ingestion, quick int) *cluster {
	t.Helper()
	model, err := refengine.New(tpModel)
	if err != nil {
		t.Fatal(err)
	}
	layout, err := gpu.NewLayout(shardSpec(), bt)
	if err != nil {
		t.Fatal(err)
	}
	slot := int64((layout.BlockBytes() + 4095) / 4096 * 4096)
	c := &cluster{t: t, model: model}
	for r := range nRanks {
		addr := addrs[0]
		if len(addrs) > 1 {
			addr = addrs[r]
		}
		base := kvtier.Config{GPUBlocks: 18, BlockTokens: bt, Model: shardSpec(), VocabSize: tpModel.Vocab, ModelID: "tp-tiny@1",
			Ingestion: ingest, DiskIngestion: kvtier.IngestAll, PinnedBytes: 32 * slot, ReadDeadlineBase: -1,
			Remote: &kvtier.RemoteConfig{Addrs: []string{addr}, Prefix: prefix, ReadTimeout: 10 * time.Second}}
		if r == quick {
			base.Remote.ReadTimeout = 300 * time.Millisecond
		}
		cfg, err := group.RankConfig(base, r, nRanks)
		if err != nil {
			t.Fatal(err)
		}
		m, err := kvtier.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = m.Close(context.Background()) })
		c.cfgs, c.ms = append(c.cfgs, cfg), append(c.ms, m)
	}
	c.regroup()
	t.Cleanup(c.local.Close)
	return c
}
