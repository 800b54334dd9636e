package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/kvtier/kvtier"
	"github.com/kvtier/kvtier/cachesim"
	"github.com/kvtier/kvtier/disk"
	"github.com/kvtier/kvtier/gpu"
	"github.com/kvtier/kvtier/pinned"
	"github.com/kvtier/kvtier/schedcache"
	"github.com/kvtier/kvtier/scheduler"
	"github.com/kvtier/kvtier/trace"
)

// outcome is one configuration's replay.
type outcome struct {
	tiers  tierSet
	gpu    int // capacities in blocks (0: tier absent)
	pinned int
	disk   int
	res    scheduler.Result
	stats  kvtier.Stats
	ttfts  []time.Duration // per finished request, in trace order
	busy   time.Duration   // modelled time the GPU spent in steps
	wall   time.Duration
	// rejected are the requests the scheduler rejected (they can never fit
	// in the GPU cache), by trace index in the order rejected.
	rejected []int
	// opt is the clairvoyant reference: Belady's MIN over the same requests
	// (those served: not the rejected ones) with every tier's blocks as one
	// cache (optBound).
	opt cachesim.Result
}

// optBound replays reqs against OPT with the blocks of every tier of out as
// one cache. The ids are taken by prefix (cachesim.PrefixIDs), as the
// Manager's chained block hashes tell blocks apart: on a trace whose ids are
// not chained, an id met after another prefix is another block, which OPT
// over the raw ids would count as a hit no cache can have (and there OPT over
// raw ids is no bound). On a chained trace, the Mooncake ones, that changes
// nothing. OPT runs on the cache's own blocks (cachesim.PrefixBlocks over
// the trace cut into units of the two block sizes' greatest common divisor):
// a prefix shared up to the middle of a block is no hit for the Manager
// (-block-tokens a multiple of -trace-block-tokens), and a cache of blocks
// smaller than the trace's ids can keep part of an id and hit it (the
// other way round; OPT over the ids, with the capacity floored to whole ids,
// fell below what such a cache can get). A prompt's partly filled last block
// is no hit either: the Manager caches full blocks only.
//
// The requests out rejected are left out: the hit ratio is over the served
// requests, and OPT over the same ones.
func optBound(o options, out outcome, reqs []trace.Request) cachesim.Result {
	reqs = withoutIndices(reqs, out.rejected)
	blocks := out.gpu + out.pinned + out.disk
	unit := gcd(o.blockTokens, o.traceBlockTokens)
	units := splitIDs(cachesim.PrefixIDs(reqs), o.traceBlockTokens, unit)
	cache := cachesim.PrefixBlocks(units, o.blockTokens/unit)
	for i, r := range reqs {
		// A partly filled last block is never cached: give it an id of
		// its own (PrefixIDs' are >= 0), so that OPT never counts it a hit.
		tokens := min(r.InputLength, len(r.HashIDs)*o.traceBlockTokens)
		if ids := cache[i].HashIDs; tokens%o.blockTokens != 0 && len(ids) > 0 {
			ids[len(ids)-1] = -int64(i) - 1
		}
	}
	return cachesim.OPT(cache, blocks, cachesim.Options{BlockTokens: o.blockTokens})
}

// withoutIndices returns reqs less the requests at the indices drop (reqs
// itself when drop is empty).
func withoutIndices(reqs []trace.Request, drop []int) []trace.Request {
	if len(drop) == 0 {
		return reqs
	}
	gone := make(map[int]bool, len(drop))
	for _, i := range drop {
		gone[i] = true
	}
	out := make([]trace.Request, 0, len(reqs)-len(gone))
	for i, r := range reqs {
		if !gone[i] {
			out = append(out, r)
		}
	}
	return out
}

// servable splits reqs into those a run under cfg serves and the number it
// rejects on arrival (scheduler.Config.Rejects): requests that need more
// tokens than the GPU holds.
func servable(reqs []trace.Request, cfg scheduler.Config) ([]trace.Request, int) {
	var drop []int
	for i, r := range reqs {
		if cfg.Rejects(r) {
			drop = append(drop, i)
		}
	}
	return withoutIndices(reqs, drop), len(drop)
}

func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// splitIDs cuts every id of reqs, which stand for idTokens tokens each, into
// ids of unit tokens (idTokens a multiple of unit), as many as the prompt's
// tokens under it fill: id i's k-th part is i*(idTokens/unit)+k, so ids must
// be small enough for that (PrefixIDs' are). A request's ids stay chained.
// unit == idTokens returns reqs.
func splitIDs(reqs []trace.Request, idTokens, unit int) []trace.Request {
	k := idTokens / unit
	if k <= 1 {
		return reqs
	}
	out := make([]trace.Request, len(reqs))
	for i, r := range reqs {
		out[i] = r
		tokens := min(r.InputLength, len(r.HashIDs)*idTokens)
		ids := make([]int64, 0, (tokens+unit-1)/unit)
		for j, id := range r.HashIDs {
			left := tokens - j*idTokens
			for part := range min(k, (left+unit-1)/unit) {
				ids = append(ids, id*int64(k)+int64(part))
			}
		}
		out[i].HashIDs = ids
	}
	return out
}

// managerConfig returns the Manager configuration for one tier set. Blocks
// carry the real bytes of gpu.TinySpec (64 B a token, the Manager's default):
// the copies between tiers are real, at a size a laptop holds.
func managerConfig(o options, t tierSet, diskDir string) (kvtier.Config, error) {
	layout, err := gpu.NewLayout(gpu.TinySpec, o.blockTokens)
	if err != nil {
		return kvtier.Config{}, err
	}
	c := kvtier.Config{
		GPUBlocks: o.gpuBlocks, BlockTokens: o.blockTokens, Model: gpu.TinySpec, VocabSize: o.vocab,
		Ingestion: o.ingestion, HotHits: o.hotHits, WriteQuota: o.writeQuota, OffloadAhead: o.offloadAhead, ReadDeadlineBase: -1,
		SerialOffloads: o.serialOffloads,
	}
	if o.readDeadline > 0 {
		c.ReadDeadlineBase, c.ReadDeadlinePerToken = o.readDeadline, 0
	}
	if t >= withPinned {
		// Pinned slots are page aligned: a block smaller than a page (the
		// demo's 1 KiB at -block-tokens 16) takes a whole one, and
		// pinnedBlocks x BlockBytes held a quarter of the blocks asked for.
		c.PinnedBytes = int64(o.pinnedBlocks) * pinned.SlotStride(layout.BlockBytes())
		c.PinnedPolicy = o.pinnedPolicy
	}
	if t == withDisk {
		c.DiskDir = diskDir
		c.DiskBytes = int64(o.diskBlocks) * disk.SlotBytes(layout.BlockBytes())
		c.DiskPolicy = o.diskPolicy
		c.DiskIngestion = o.diskIngestion
		c.DiskWriteQuota = o.diskQuota
	}
	return c, nil
}

// schedulerConfig returns the scheduler configuration shared by every tier set.
// Its cost model is the default H100 / Llama-3-8B one: transfer times are for
// Llama-3-8B's 128 KiB a token, whatever the Manager's blocks really hold. A
// sequence can hold at most the GPU's blocks: a request that needs more is
// rejected on arrival (MaxSeqTokens), as vLLM rejects one past its
// max_model_len, and the others are served.
func schedulerConfig(o options, onProgress func(scheduler.Progress)) scheduler.Config {
	return scheduler.Config{
		MaxSeqTokens: o.gpuBlocks * o.blockTokens,
		MaxNumSeqs:   o.maxSeqs, MaxNumBatchedTokens: o.maxBatched, MaxOutputTokens: o.maxOutput,
		Preempt: o.preempt, Onboard: o.onboard,
		OnboardTimeout: o.onboardTimeout, OnboardTimeoutPer1K: o.onboardPer1K,
		TimeScale: o.timeScale, Vocab: o.vocab, SeriesInterval: o.seriesInterval,
		TraceBlockTokens: o.traceBlockTokens, Progress: onProgress,
	}
}

// replay runs reqs through a fresh Manager with the tiers of t. A disk tier
// lives in a fresh subdirectory of diskRoot.
func replay(ctx context.Context, o options, t tierSet, reqs []trace.Request, diskRoot string, onProgress func(scheduler.Progress)) (out outcome, err error) {
	out = outcome{tiers: t, gpu: o.gpuBlocks}
	if t >= withPinned {
		out.pinned = o.pinnedBlocks
	}
	dir := ""
	if t == withDisk {
		out.disk = o.diskBlocks
		if dir, err = os.MkdirTemp(diskRoot, "kvtier-demo-disk-"); err != nil {
			return out, err
		}
		defer func() {
			if rmErr := os.RemoveAll(dir); err == nil && rmErr != nil {
				err = rmErr
			}
		}()
	}
	mc, err := managerConfig(o, t, dir)
	if err != nil {
		return out, err
	}
	if o.metrics != nil {
		mc.Registerer = o.metrics.Registerer(t.String())
	}
	mc.Events = eventsConfig(o, 0)
	m, err := kvtier.New(mc)
	if err != nil {
		return out, err
	}
	defer func() {
		if cerr := m.Close(ctx); err == nil && cerr != nil {
			err = fmt.Errorf("closing the %s manager: %w", t, cerr)
		}
	}()
	tr := newTTFTTracker(reqs, o.timeScale)
	cache := &recordingCache{Cache: schedcache.New(m, schedcache.Options{Sync: o.sync, NoClass: o.noClass}), tr: tr}
	start := time.Now()
	s, err := scheduler.New(cache, reqs, schedulerConfig(o, onProgress))
	if err != nil {
		return out, err
	}
	for !s.Done() {
		rep, err := s.Step(ctx)
		if err != nil {
			return out, fmt.Errorf("%s: step at %v: %w", t, s.Now(), err)
		}
		tr.step(rep)
		for _, id := range rep.Rejected {
			out.rejected = append(out.rejected, int(id)-1)
		}
		if !rep.Idle {
			out.busy += rep.End - rep.Start
		}
	}
	if err := cache.Flush(ctx); err != nil {
		return out, err
	}
	out.wall = time.Since(start)
	out.res = s.Result()
	out.ttfts = tr.values()
	if out.stats, err = m.Stats(ctx); err == nil && o.metrics != nil {
		err = o.metrics.Freeze() // the final values outlive the Manager
	}
	return out, err
}
