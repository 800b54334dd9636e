package enginetest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/kvtier/kvtier"
	"github.com/kvtier/kvtier/disk"
	"github.com/kvtier/kvtier/gpu"
	"github.com/kvtier/kvtier/refengine"
)

// ModelID is the model id the engine tests run under.
const ModelID = "refengine-tiny@1"

// NewModel returns refengine's tiny model, the one every engine test runs.
func NewModel() (*refengine.Model, error) { return refengine.New(refengine.TinyConfig) }

// Config returns a Manager configuration for the tiny model with gpuBlocks
// blocks of bt tokens, arena layout kind and pinnedSlots pinned slots (0:
// no pinned tier). Loads never time out (the caller sets a deadline to test
// late loads). OffloadAhead is small: the pinned tier keeps that many slots
// free ahead of need (at least), so a default of 64 would drain a small
// pinned tier to disk entirely.
func Config(bt, gpuBlocks, pinnedSlots int, kind gpu.LayoutKind) (kvtier.Config, error) {
	spec := refengine.TinyConfig.Spec()
	l, err := gpu.NewLayoutKind(spec, bt, kind)
	if err != nil {
		return kvtier.Config{}, err
	}
	page := os.Getpagesize()
	return kvtier.Config{GPUBlocks: gpuBlocks, BlockTokens: bt, Model: spec, VocabSize: refengine.TinyConfig.Vocab,
		ModelID: ModelID, Layout: kind, PinnedBytes: int64(pinnedSlots * ((l.BlockBytes() + page - 1) / page * page)),
		ReadDeadlineBase: -1, OffloadAhead: 4}, nil
}

// CheckNoLeaks checks, after a Flush barrier, that no sequence is live and
// every GPU block is free (no reference or pin leaked) with nothing in
// flight: what a test expects once every Gen finished or was preempted.
func CheckNoLeaks(ctx context.Context, m *kvtier.Manager) error {
	if err := m.Flush(ctx); err != nil {
		return fmt.Errorf("flush: %w", err)
	}
	st, err := m.Stats(ctx)
	if err != nil {
		return fmt.Errorf("stats: %w", err)
	}
	g := st.Tier(kvtier.GPU)
	var errs []error
	if n := g.Extra["sequences"]; n != 0 {
		errs = append(errs, fmt.Errorf("%v sequences live, want 0", n))
	}
	if int(g.Extra["free"]) != g.Blocks {
		errs = append(errs, fmt.Errorf("%v of %d GPU blocks free with no sequence live: references or pins leaked", g.Extra["free"], g.Blocks))
	}
	if g.InFlight != 0 || st.Tier(kvtier.Pinned).InFlight != 0 || st.Tier(kvtier.Disk).InFlight != 0 {
		errs = append(errs, fmt.Errorf("in flight after Flush: GPU %d, pinned %d, disk %d", g.InFlight, st.Tier(kvtier.Pinned).InFlight, st.Tier(kvtier.Disk).InFlight))
	}
	return errors.Join(errs...)
}

// EvictGPU pushes every cached block off the GPU: it allocates a prompt of
// blocks blocks no one shares under seq, waits for its Ready (the evicted
// blocks' offloads), and frees it uncommitted. blocks is the GPU's size,
// minus what live sequences hold.
func EvictGPU(ctx context.Context, m *kvtier.Manager, p *Prompts, seq uint64, blocks int) error {
	r, err := m.Allocate(ctx, kvtier.AllocRequest{Seq: seq, Tokens: p.Unique(blocks * m.BlockTokens())})
	if err != nil {
		return fmt.Errorf("evicting the GPU: %w", err)
	}
	select {
	case <-r.Ready.Done():
	case <-ctx.Done():
		return ctx.Err()
	}
	return m.Free(ctx, seq)
}

// CorruptDisk flips a byte in the disk records of dir (a closed Manager's
// disk directory), slot by slot in turn: the payload of one slot, the
// header of the next, the third left alone. payloadBytes is the Manager's
// block size. It returns how many slots it damaged.
func CorruptDisk(dir string, payloadBytes int) (int, error) {
	name := filepath.Join(dir, "slots-000.kv")
	f, err := os.OpenFile(name, os.O_RDWR, 0)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return 0, err
	}
	slot := disk.SlotBytes(payloadBytes)
	n := 0
	for s := int64(0); (s+1)*slot <= fi.Size(); s++ {
		var off int64
		switch s % 3 {
		case 0: // the payload, inside the block's bytes (not the padding)
			off = s*slot + disk.BlockSize + int64(payloadBytes/2) + s%int64(payloadBytes/4)
		case 1: // the header
			off = s*slot + 8 + s%64
		default:
			continue
		}
		b := make([]byte, 1)
		if _, err := f.ReadAt(b, off); err != nil {
			return n, err
		}
		b[0] ^= 0x24
		if _, err := f.WriteAt(b, off); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}
