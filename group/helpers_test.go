package group_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"math"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvtier/kvtier"
	"github.com/kvtier/kvtier/gpu"
	"github.com/kvtier/kvtier/group"
	"github.com/kvtier/kvtier/refengine"
)

// tpModel has 4 KV heads, one per rank of a group of 4.
var tpModel = refengine.Config{Vocab: 128, DModel: 32, Layers: 2, Heads: 4, KVHeads: 4, MLPHidden: 64, Seed: 3}

const (
	nRanks = 4
	bt     = 4 // tokens per block
)

// shardSpec is one rank's KV shape: its KVHeads/N heads.
func shardSpec() gpu.ModelSpec {
	s := tpModel.Spec()
	s.KVHeads /= nRanks
	return s
}

// faultyDevice is a host device whose host-to-device copies (loads) can
// be made to fail or to wait on a gate.
type faultyDevice struct {
	gpu.Device
	fail atomic.Bool
	gate atomic.Pointer[chan struct{}]
}

func newFaultyDevice(t *testing.T) *faultyDevice {
	t.Helper()
	f := &faultyDevice{}
	dev, err := gpu.NewHost(gpu.HostConfig{Fault: func(dir gpu.Direction, _ []gpu.CopyOp) error {
		if dir != gpu.H2D {
			return nil
		}
		if g := f.gate.Load(); g != nil {
			<-*g
		}
		if f.fail.Load() {
			return errors.New("injected load failure")
		}
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	f.Device = dev
	return f
}

// shardedKV is the tensor-parallel engine's KV: head h of every (layer,
// position) lives on rank h/(KVHeads/N), in that rank's arena, in the
// block its table names.
type shardedKV struct {
	ms     []*kvtier.Manager
	tables [][]kvtier.BlockID
	buf    []byte
}

func (s *shardedKV) rankRange(r, n int) (int, int) {
	per := n / len(s.ms)
	return r * per, (r + 1) * per
}

func (s *shardedKV) io(layer, pos int, k, v []float32, write bool) error {
	for r, m := range s.ms {
		l := m.Layout()
		lo, hi := s.rankRange(r, len(k))
		for _, x := range []struct {
			kv gpu.KV
			f  []float32
		}{{gpu.Key, k[lo:hi]}, {gpu.Value, v[lo:hi]}} {
			region, _ := l.Region(layer, x.kv)
			blk, off := int(s.tables[r][pos/l.BlockTokens()]), region+(pos%l.BlockTokens())*len(x.f)*4
			s.buf = s.buf[:0]
			if write {
				for _, f := range x.f {
					s.buf = binary.LittleEndian.AppendUint32(s.buf, math.Float32bits(f))
				}
				if err := m.Arena().WriteBlock(blk, off, s.buf); err != nil {
					return err
				}
				continue
			}
			s.buf = append(s.buf, make([]byte, 4*len(x.f))...)
			if err := m.Arena().ReadBlock(blk, off, s.buf); err != nil {
				return err
			}
			for i := range x.f {
				x.f[i] = math.Float32frombits(binary.LittleEndian.Uint32(s.buf[4*i:]))
			}
		}
	}
	return nil
}

func (s *shardedKV) ReadKV(layer, pos int, k, v []float32) error {
	return s.io(layer, pos, k, v, false)
}
func (s *shardedKV) WriteKV(layer, pos int, k, v []float32) error {
	return s.io(layer, pos, k, v, true)
}

// cluster is N ranks in one process: a Manager per rank and a group over a
// Local collective.
type cluster struct {
	t     *testing.T
	cfgs  []kvtier.Config
	ms    []*kvtier.Manager
	devs  []*faultyDevice
	local *group.Local
	ranks []*group.Rank
	model *refengine.Model
	// What each rank's agreements should have cost, from the results.
	hitCost, loadCost [nRanks]uint64
}

func (c *cluster) regroup() {
	c.t.Helper()
	if c.local != nil {
		c.local.Close()
	}
	var err error
	if c.local, err = group.NewLocal(len(c.ms)); err != nil {
		c.t.Fatal(err)
	}
	c.ranks = make([]*group.Rank, len(c.ms))
	c.hitCost, c.loadCost = [nRanks]uint64{}, [nRanks]uint64{}
	for r, m := range c.ms {
		if c.ranks[r], err = group.NewRank(group.Config{Rank: r, Size: len(c.ms), Manager: m, Collective: c.local.Rank(r)}); err != nil {
			c.t.Fatal(err)
		}
	}
}

// each runs f on every rank at once, one goroutine per rank, and returns
// each rank's error.
func (c *cluster) each(f func(r int) error) []error {
	errs := make([]error, len(c.ms))
	var wg sync.WaitGroup
	for r := range c.ms {
		wg.Go(func() { errs[r] = f(r) })
	}
	wg.Wait()
	return errs
}

func (c *cluster) must(errs []error) {
	c.t.Helper()
	if err := errors.Join(errs...); err != nil {
		c.t.Fatal(err)
	}
}

// served is what one group request went through.
type served struct {
	res   []group.AllocResult
	kv    *shardedKV
	valid int
}

// serve allocates prompt on every rank with one deadline, computes the
// tokens past the agreed prefix with the sharded store, checks every logit
// against a full recompute, bit for bit, and group-commits. The sequence
// stays allocated; the caller frees it.
func (c *cluster) serve(seq uint64, prompt []int64, deadline time.Time) served {
	c.t.Helper()
	// A bound that turns a hang (a rank waiting for a peer forever) into a
	// failure; never reached when the protocol works.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s := served{res: make([]group.AllocResult, len(c.ms))}
	c.must(c.each(func(r int) (err error) {
		s.res[r], err = c.ranks[r].Allocate(ctx, group.AllocRequest{AllocRequest: kvtier.AllocRequest{Seq: seq, Tokens: prompt}, Deadline: deadline})
		return err
	}))
	s.valid = s.res[0].ValidTokens
	s.kv = &shardedKV{ms: c.ms, tables: make([][]kvtier.BlockID, len(c.ms))}
	for r, res := range s.res {
		if res.ValidTokens != s.valid {
			c.t.Fatalf("rank %d starts from %d valid tokens, rank 0 from %d", r, res.ValidTokens, s.valid)
		}
		s.kv.tables[r] = res.Blocks
		c.hitCost[r] += uint64(res.LocalHit - res.AgreedHit)
		c.loadCost[r] += uint64(res.LocalValid - res.ValidTokens)
	}
	logits, err := c.model.Forward(s.kv, prompt[s.valid:], s.valid)
	if err != nil {
		c.t.Fatal(err)
	}
	want, err := c.model.Reference(prompt)
	if err != nil {
		c.t.Fatal(err)
	}
	for i, l := range logits {
		pos := s.valid + i
		for j := range l {
			if math.Float32bits(l[j]) != math.Float32bits(want[pos][j]) {
				c.t.Fatalf("seq %d position %d logit %d: %v from the group's cache, %v recomputed (valid prefix %d)", seq, pos, j, l[j], want[pos][j], s.valid)
			}
		}
	}
	committed := make([]int, len(c.ms))
	c.must(c.each(func(r int) (err error) {
		committed[r], err = c.ranks[r].Commit(ctx, seq, len(prompt))
		return err
	}))
	for r, n := range committed {
		if n != len(prompt) {
			c.t.Fatalf("rank %d: the group committed %d tokens of %d", r, n, len(prompt))
		}
	}
	return s
}

func (c *cluster) free(seq uint64) {
	c.t.Helper()
	c.must(c.each(func(r int) error { return c.ms[r].Free(context.Background(), seq) }))
}

func (c *cluster) flush() {
	c.t.Helper()
	c.must(c.each(func(r int) error { return c.ms[r].Flush(context.Background()) }))
}

// checkNoLeak asserts every GPU block of every rank is free, no sequence
// is left and nothing is in flight.
func (c *cluster) checkNoLeak() {
	c.t.Helper()
	c.flush()
	for r, m := range c.ms {
		st, err := m.Stats(context.Background())
		if err != nil {
			c.t.Fatal(err)
		}
		g := st.Tier(kvtier.GPU)
		if int(g.Extra["free"]) != g.Blocks || g.Extra["sequences"] != 0 || g.InFlight != 0 {
			c.t.Fatalf("rank %d leaks blocks: free %v of %d, sequences %v, in flight %d", r, g.Extra["free"], g.Blocks, g.Extra["sequences"], g.InFlight)
		}
	}
}

// corruptBlock flips a byte of the disk record holding payload under dir.
func corruptBlock(t *testing.T, dir string, payload []byte) {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(dir, "slots-*.kv"))
	if err != nil || len(names) == 0 {
		t.Fatalf("no slot files under %s: %v", dir, err)
	}
	for _, name := range names {
		data, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		i := bytes.Index(data, payload)
		if i < 0 {
			continue
		}
		data[i+len(payload)/2] ^= 0x40
		if err := os.WriteFile(name, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Fatalf("the block's payload is in no slot file under %s", dir)
}
