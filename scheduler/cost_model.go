package scheduler

import (
	"fmt"
	"time"
)

// Tier names a memory tier a prefix can be loaded from.
type Tier int

const (
	TierGPU Tier = iota + 1
	TierPinned
	TierDisk
	// TierRemote is a tier shared by several nodes over the network.
	TierRemote
)

func (t Tier) String() string {
	switch t {
	case TierGPU:
		return "gpu"
	case TierPinned:
		return "pinned"
	case TierDisk:
		return "disk"
	case TierRemote:
		return "remote"
	}
	return fmt.Sprintf("Tier(%d)", int(t))
}

// Work is one sequence's share of a step: Tokens computed this step on top of
// Context tokens already in its KV cache. A decode is Tokens == 1.
type Work struct {
	Tokens  int
	Context int
}

// CostModel turns a step's work and a transfer's size into time. Implementations
// must be deterministic and cheap: StepTime runs once per step.
type CostModel interface {
	// StepTime is how long one forward pass over the batch takes. batch is
	// read-only and only valid during the call.
	StepTime(batch []Work) time.Duration
	// TransferTime is how long moving tokens' KV from tier up to the GPU takes.
	TransferTime(from Tier, tokens int) time.Duration
}

// Analytic is a roofline-style cost model of one GPU serving one dense model:
//
//	step = StepOverhead
//	     + max(WeightRead, (all tokens) / TokensPerSecond)   // weights once, or compute-bound
//	     + AttentionNSPerPair × Σ prefill (query, key) pairs   // causal attention FLOPs
//	     + KVReadNSPerToken × Σ decode context tokens          // decode reads the KV cache
//	     + PerSeq × sequences
//
//	transfer(tier, n) = Latency[tier] + n × BytesPerToken / Bandwidth[tier]
//
// DefaultCostModel fills it in for an H100-SXM running Llama-3-8B in bf16.
type Analytic struct {
	StepOverhead       time.Duration // per step: scheduling, launch, sampling
	WeightRead         time.Duration // reading all weights once from HBM
	TokensPerSecond    float64       // dense (non-attention) throughput when compute-bound
	AttentionNSPerPair float64       // ns per causal (query, key) attention pair, all layers
	KVReadNSPerToken   float64       // ns to read one context token's KV, all layers, in decode
	PerSeq             time.Duration // per sequence in the batch
	BytesPerToken      int64         // KV bytes per token
	PinnedBandwidth    float64       // bytes/s pinned host -> GPU
	DiskBandwidth      float64       // bytes/s disk -> GPU
	PinnedLatency      time.Duration // per transfer
	DiskLatency        time.Duration // per transfer
	RemoteBandwidth    float64       // bytes/s shared remote tier -> GPU
	RemoteLatency      time.Duration // per transfer
}

// Figures behind DefaultCostModel. Sources:
//
//   - H100-SXM5 80GB: HBM3 3.35 TB/s, 989 TFLOPS dense BF16 (1,979 with
//     sparsity), PCIe Gen5 x16 at 128 GB/s both directions — NVIDIA H100 Tensor
//     Core GPU datasheet.
//   - Llama-3-8B: 8.03e9 parameters, 32 layers, hidden 4096, 32 query heads,
//     8 KV heads of 128 dims — meta-llama/Meta-Llama-3-8B config.json and model
//     card. bf16 weights: 16.06 GB. KV per token: 2 (K,V) × 32 layers × 8 heads
//     × 128 × 2 bytes = 131,072 bytes = 128 KiB.
//   - PCIe Gen5 x16: 32 GT/s × 16 lanes × 128/130 = 63 GB/s per direction raw;
//     about 50 GB/s is what pinned-memory cudaMemcpy reaches (estimate: the
//     ~80% efficiency commonly measured on Gen4 with bandwidthTest, applied to Gen5).
//   - NVMe: 7 GB/s sequential read, the rating of current PCIe Gen4 x4 data-centre
//     and client drives (e.g. Samsung 990 PRO: 7,450 MB/s); the Dynamo
//     walkthrough in ../shared/seeds uses the same 7 GB/s.
//
// Derived (estimates, not measured here):
//
//   - TokensPerSecond 30,000: 2 × 8.03e9 = 16.1 GFLOP per token; at 989 TFLOPS
//     and 50% model-FLOPs utilisation, 495e12 / 16.1e9 ≈ 30.8k tokens/s. 50% MFU
//     is typical of large-batch prefill in vLLM/SGLang; the figure is an estimate.
//   - AttentionNSPerPair 1.06: QKᵀ and AV cost 4 × 4096 FLOPs per (query, key) pair per
//     layer, × 32 layers = 524 kFLOP; at 495 TFLOPS ≈ 1.06 ns per pair.
//   - WeightRead 6 ms: 16.06 GB / 3.35 TB/s = 4.8 ms at peak; decode kernels
//     reach roughly 80% of peak bandwidth, so 6.0 ms (estimate). The weight
//     read alone would allow 167 tokens/s at batch 1; with StepOverhead and
//     PerSeq a batch-1 decode step at 1k context takes 7.07 ms, about 141
//     tokens/s (TestAnalyticDefaults), the model's single-stream rate.
//   - KVReadNSPerToken 49: 128 KiB / (3.35 TB/s × 0.8).
//   - PerSeq 20 µs and StepOverhead 1 ms: sampling, detokenisation and
//     scheduling overheads on the CPU (estimates).
//   - PinnedLatency 10 µs, DiskLatency 100 µs: a DMA launch and an NVMe read
//     round trip (estimates).
//   - RemoteBandwidth 5 GB/s, RemoteLatency 500 µs: a shared Redis tier over
//     TCP on a 50 Gb/s NIC (about 80% of line rate) with two pipelined round
//     trips (records, then chunks) of ~250 µs across a data-centre network
//     (estimates; RDMA stores such as Mooncake's do several times better).
const (
	h100HBMBandwidth    = 3.35e12 // bytes/s
	llama3_8BWeightByte = 16.06e9 // bytes in bf16
	llama3_8BKVPerToken = 131072  // bytes
	decodeBWEfficiency  = 0.8
)

// DefaultCostModel returns the Analytic model of an H100-SXM with Llama-3-8B in
// bf16; see the figures above Analytic's fields for their sources.
func DefaultCostModel() *Analytic {
	bw := float64(h100HBMBandwidth * decodeBWEfficiency)
	return &Analytic{
		StepOverhead:       time.Millisecond,
		WeightRead:         time.Duration(llama3_8BWeightByte / bw * 1e9),
		TokensPerSecond:    30000,
		AttentionNSPerPair: 1.06,
		KVReadNSPerToken:   llama3_8BKVPerToken / bw * 1e9,
		PerSeq:             20 * time.Microsecond,
		BytesPerToken:      llama3_8BKVPerToken,
		PinnedBandwidth:    50e9,
		DiskBandwidth:      7e9,
		PinnedLatency:      10 * time.Microsecond,
		DiskLatency:        100 * time.Microsecond,
		RemoteBandwidth:    5e9,
		RemoteLatency:      500 * time.Microsecond,
	}
}

// StepTime implements CostModel. An empty batch takes no time.
func (m *Analytic) StepTime(batch []Work) time.Duration {
	if len(batch) == 0 {
		return 0
	}
	var tokens, decodeCtx int64
	var pairs float64
	for _, w := range batch {
		tokens += int64(w.Tokens)
		if w.Tokens == 1 {
			decodeCtx += int64(w.Context) + 1
			continue
		}
		// query i (0-based within the chunk) sees Context+i+1 keys.
		n, c := float64(w.Tokens), float64(w.Context)
		pairs += n*c + n*(n+1)/2
	}
	ns := float64(m.StepOverhead) + float64(m.PerSeq)*float64(len(batch))
	dense := 0.0
	if m.TokensPerSecond > 0 {
		dense = float64(tokens) / m.TokensPerSecond * 1e9
	}
	ns += max(float64(m.WeightRead), dense)
	ns += pairs*m.AttentionNSPerPair + float64(decodeCtx)*m.KVReadNSPerToken
	return time.Duration(ns)
}

// TransferTime implements CostModel. TierGPU and zero tokens take no time; a
// tier with no bandwidth set transfers instantly after its latency.
func (m *Analytic) TransferTime(from Tier, tokens int) time.Duration {
	if tokens <= 0 {
		return 0
	}
	var bw float64
	var lat time.Duration
	switch from {
	case TierPinned:
		bw, lat = m.PinnedBandwidth, m.PinnedLatency
	case TierDisk:
		bw, lat = m.DiskBandwidth, m.DiskLatency
	case TierRemote:
		bw, lat = m.RemoteBandwidth, m.RemoteLatency
	default:
		return 0
	}
	if bw <= 0 {
		return lat
	}
	return lat + time.Duration(float64(tokens)*float64(m.BytesPerToken)/bw*1e9)
}

// WorkCoster is implemented by cost models that can price work apart from the
// step it shares: the marginal compute a batch spends on it, without the
// per-step costs (overhead, reading the weights) its steps would pay anyway.
// The scheduler uses it for Result.PrefillSaved; a CostModel without it
// leaves that zero.
type WorkCoster interface {
	// PrefillCompute is the compute of prefilling tokens prompt tokens that
	// follow context tokens already in the KV cache, however they are chunked.
	PrefillCompute(tokens, context int) time.Duration
	// DecodeCompute is the compute of decoding tokens tokens one step at a
	// time, the first with context tokens before it.
	DecodeCompute(tokens, context int) time.Duration
}

var _ WorkCoster = (*Analytic)(nil)

// PrefillCompute implements WorkCoster: the dense (non-attention) time of
// the tokens at TokensPerSecond plus their causal attention pairs (query i,
// 0-based, sees context+i+1 keys; the sum does not depend on chunking).
func (m *Analytic) PrefillCompute(tokens, context int) time.Duration {
	if tokens <= 0 {
		return 0
	}
	n, c := float64(tokens), float64(max(context, 0))
	ns := (n*c + n*(n+1)/2) * m.AttentionNSPerPair
	if m.TokensPerSecond > 0 {
		ns += n / m.TokensPerSecond * 1e9
	}
	return time.Duration(ns)
}

// DecodeCompute implements WorkCoster: per token, its dense time, the
// per-sequence cost of its step and reading its context's KV (context+k+1
// tokens for the k-th, as StepTime counts a decode).
func (m *Analytic) DecodeCompute(tokens, context int) time.Duration {
	if tokens <= 0 {
		return 0
	}
	n, c := float64(tokens), float64(max(context, 0))
	ns := n*float64(m.PerSeq) + (n*c+n*(n+1)/2)*m.KVReadNSPerToken
	if m.TokensPerSecond > 0 {
		ns += n / m.TokensPerSecond * 1e9
	}
	return time.Duration(ns)
}

// TierTimes is a time per tier.
type TierTimes struct {
	GPU, Pinned, Disk, Remote time.Duration
}

// Total is the sum over the tiers.
func (t TierTimes) Total() time.Duration { return t.GPU + t.Pinned + t.Disk + t.Remote }

// Plus is t + o, tier by tier.
func (t TierTimes) Plus(o TierTimes) TierTimes {
	return TierTimes{GPU: t.GPU + o.GPU, Pinned: t.Pinned + o.Pinned, Disk: t.Disk + o.Disk, Remote: t.Remote + o.Remote}
}

// Minus is t - o, tier by tier.
func (t TierTimes) Minus(o TierTimes) TierTimes {
	return TierTimes{GPU: t.GPU - o.GPU, Pinned: t.Pinned - o.Pinned, Disk: t.Disk - o.Disk, Remote: t.Remote - o.Remote}
}

// prefillSaved is the prefill compute a resolved prefix avoided, by the tier
// that served each part: its first gpu tokens, the next pinned, the next
// disk, the next remote. Zero when cost does not implement WorkCoster.
func prefillSaved(cost CostModel, gpu, pinned, disk, remote int) TierTimes {
	wc, ok := cost.(WorkCoster)
	if !ok {
		return TierTimes{}
	}
	return TierTimes{
		GPU:    wc.PrefillCompute(gpu, 0),
		Pinned: wc.PrefillCompute(pinned, gpu),
		Disk:   wc.PrefillCompute(disk, gpu+pinned),
		Remote: wc.PrefillCompute(remote, gpu+pinned+disk),
	}
}
