package actors

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/kvtier/kvtier/disk"
	"github.com/kvtier/kvtier/messages"
)

// chainWrite is a LowerWrite of blocks with their chains: 50 a root, 20
// its child, 30 20's child, 9 with no chain known.
func chainWrite() *messages.LowerWrite {
	m := writeMsg(50, 20, 30, 9)
	parents := map[uint64]uint64{20: 50, 30: 20}
	for i := range m.Items {
		it := &m.Items[i]
		it.Parent, it.HasParent = parents[it.Hash], parents[it.Hash] != 0
		if it.Hash == 9 {
			continue
		}
		it.TokenIDs = make([]int64, it.Tokens)
		for j := range it.TokenIDs {
			it.TokenIDs[j] = int64(it.Hash)*100 + int64(j)
		}
		it.LoRA = "adapter"
	}
	return m
}

// corruptChain flips a byte in the chain extension of hash's record (a
// header block holding hash) in the store at dir.
func corruptChain(t *testing.T, dir string, hash uint64) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*"))
	if err != nil {
		t.Fatal(err)
	}
	slot := disk.SlotBytes(testDiskPayload)
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil || filepath.Base(name) == "LOCK" {
			continue
		}
		for off := int64(0); off+disk.BlockSize <= int64(len(b)); off += slot {
			if binary.LittleEndian.Uint32(b[off:]) != 0x4b565444 || binary.LittleEndian.Uint64(b[off+24:]) != hash {
				continue
			}
			b[off+128+20] ^= 0x40 // in the LoRA name
			if err := os.WriteFile(name, b, 0o600); err != nil {
				t.Fatal(err)
			}
			return
		}
	}
	t.Fatalf("no record of %d in %s", hash, dir)
}

// TestDiskReopenAnnouncesChains: a disk actor started on a store it wrote
// before tells the index of each record with the chain it recorded, a
// parent on disk before its children; a record whose chain did not verify,
// or that has none, is announced with none (and still served).
func TestDiskReopenAnnouncesChains(t *testing.T) {
	e := newDiskEnv(t, 0)
	w := chainWrite()
	if d := request[*messages.LowerWriteDone](e, w); len(d.Written) != 4 {
		t.Fatalf("written %v", d.Written)
	}
	e.flush()
	e.nextUpdate()
	e.stop()
	corruptChain(t, e.dir, 30)

	e.start()
	defer e.stop()
	u := e.nextUpdate()
	if want := []uint64{9, 50, 20, 30}; !slices.Equal(u.Added, want) || len(u.Chains) != len(want) {
		t.Fatalf("reopened: Added %v (%d chains), want %v", u.Added, len(u.Chains), want)
	}
	byHash := map[uint64]messages.LowerWriteItem{}
	for _, it := range w.Items {
		byHash[it.Hash] = it
	}
	for i, h := range u.Added {
		c, it := u.Chains[i], byHash[h]
		if h == 9 || h == 30 {
			if c.Tokens != nil {
				t.Fatalf("block %d announced with a chain %+v", h, c)
			}
			continue
		}
		if c.Parent != it.Parent || c.HasParent != it.HasParent || c.LoRA != it.LoRA || !slices.Equal(c.Tokens, it.TokenIDs) {
			t.Fatalf("block %d: chain %+v, written %+v", h, c, it)
		}
	}
	m, done := e.read(30, 20)
	checkRead(t, m, done, true, true)
}

// TestReopenedOrder: reopened lists parents on disk before their
// children, and nil chains when no record has one.
func TestReopenedOrder(t *testing.T) {
	tok := []int64{1}
	metas := []disk.Meta{
		{Hash: 4, Parent: 3, Chain: &disk.Chain{HasParent: true, TokenIDs: tok}},
		{Hash: 3, Parent: 8, Chain: &disk.Chain{HasParent: true, TokenIDs: tok}},
		{Hash: 8, Chain: &disk.Chain{TokenIDs: tok}},
		{Hash: 1, Parent: 99, Chain: &disk.Chain{HasParent: true, TokenIDs: tok}}, // its parent is not on disk
		{Hash: 6, Parent: 1, Chain: &disk.Chain{HasParent: true}},                 // no token ids recorded
	}
	hs, cs := reopened(metas)
	if want := []uint64{1, 8, 3, 4, 6}; !slices.Equal(hs, want) {
		t.Fatalf("order %v, want %v", hs, want)
	}
	if cs[0].Parent != 99 || !cs[0].HasParent || cs[1].HasParent || cs[4].Tokens != nil {
		t.Fatalf("chains %+v", cs)
	}
	hs, cs = reopened([]disk.Meta{{Hash: 2}, {Hash: 1}})
	if !slices.Equal(hs, []uint64{1, 2}) || cs != nil {
		t.Fatalf("no chains: %v %v", hs, cs)
	}
}
