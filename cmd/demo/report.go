package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/kvtier/kvtier"
	"github.com/kvtier/kvtier/gpu"
)

// link is the traffic on one link between tiers, in blocks.
type link struct {
	Name   string `json:"name"`
	Blocks uint64 `json:"blocks"`
	// Bytes is Blocks at Llama-3-8B's 128 KiB a token (the cost model's
	// model), not the bytes the demo's small blocks really moved.
	Bytes int64 `json:"bytes_llama3_8b"`
}

// links reads the per-link block counts off the Manager's counters:
// GPU -> pinned is what the GPU offloaded, pinned -> GPU what it onboarded,
// pinned -> disk what the disk wrote, and disk -> pinned what pinned memory
// loaded from disk.
func links(s kvtier.Stats, modelBlockBytes int64) []link {
	l := []link{
		{Name: "GPU -> pinned", Blocks: s.Tier(kvtier.GPU).Offloaded},
		{Name: "pinned -> GPU", Blocks: s.Tier(kvtier.GPU).Onboarded},
		{Name: "pinned -> disk", Blocks: s.Tier(kvtier.Disk).Offloaded},
		{Name: "disk -> pinned", Blocks: s.Tier(kvtier.Pinned).Onboarded},
	}
	for i := range l {
		l[i].Bytes = int64(l[i].Blocks) * modelBlockBytes
	}
	return l
}

// modelBlockBytes is a block's size at Llama-3-8B's KV layout.
func modelBlockBytes(blockTokens int) int64 { return int64(blockBytes(gpu.Llama3_8B, blockTokens)) }

// blockBytes is a block's size under spec (0 for an invalid layout, which
// New has rejected before any report is made).
func blockBytes(spec gpu.ModelSpec, blockTokens int) int {
	l, err := gpu.NewLayout(spec, blockTokens)
	if err != nil {
		return 0
	}
	return l.BlockBytes()
}

// jsonTTFT is in milliseconds; all zero when no request was served
// (requests 0: every one rejected), which the table shows as "-".
type jsonTTFT struct {
	P50, P90, P99, Max, Mean float64
}

// jsonPoint is one series interval. PromptTokens and HitTokens are those
// of the requests whose first admission resolved in it, as the table's hit
// ratio counts them (readmissions apart).
type jsonPoint struct {
	StartS       float64 `json:"start_s"`
	Arrivals     int     `json:"arrivals"`
	PromptTokens int64   `json:"prompt_tokens"`
	HitTokens    int64   `json:"hit_tokens"`
	HitRatio     float64 `json:"hit_ratio"`
	OutputTokens int64   `json:"output_tokens"`
}

// jsonTierSeconds is a modelled time per tier, in seconds.
type jsonTierSeconds struct {
	GPU    float64 `json:"gpu"`
	Pinned float64 `json:"pinned"`
	Disk   float64 `json:"disk"`
}

func (t jsonTierSeconds) total() float64 { return t.GPU + t.Pinned + t.Disk }

type jsonConfig struct {
	Name         string `json:"name"`
	GPUBlocks    int    `json:"gpu_blocks"`
	PinnedBlocks int    `json:"pinned_blocks"`
	DiskBlocks   int    `json:"disk_blocks"`
	// Requests and PromptTokens are the served requests'; the rejected ones
	// (they can never fit in the GPU: scheduler.Result.Rejected) are in
	// RejectedRequests and RejectedPromptTokens and in no other figure.
	Requests             int   `json:"requests"`
	PromptTokens         int64 `json:"prompt_tokens"`
	RejectedRequests     int   `json:"rejected_requests"`
	RejectedPromptTokens int64 `json:"rejected_prompt_tokens"`
	// AdmittedTokens counts every admission: a preempted request is
	// admitted again with its prompt and the output so far.
	AdmittedTokens int64 `json:"admitted_tokens"`
	// GPUTokens, PinnedTokens, DiskTokens, HitRatio and PrefillSavedS count
	// what requests found at their first admission (HitRatio is over the
	// prompt tokens): a readmission after a preemption mostly finds the
	// request's own KV, which is no reuse between requests, and neither OPT
	// nor a run with no cache has it. ReadmittedTokens and
	// ReadmittedHitTokens are what readmissions presented and found.
	GPUTokens           int64   `json:"gpu_tokens"`
	PinnedTokens        int64   `json:"pinned_tokens"`
	DiskTokens          int64   `json:"disk_tokens"`
	HitRatio            float64 `json:"hit_ratio"`
	ReadmittedTokens    int64   `json:"readmitted_tokens"`
	ReadmittedHitTokens int64   `json:"readmitted_hit_tokens"`
	// OPTHitRatio is the clairvoyant reference at the configuration's total
	// capacity (every tier's blocks as one cache): hit tokens over prompt
	// tokens under Belady's MIN (cachesim.OPT), which maximises block hits,
	// over the served requests, as HitRatio.
	OPTHitRatio       float64            `json:"opt_hit_ratio"`
	PrefillTokens     int64              `json:"prefill_tokens"`
	PrefillSavedS     jsonTierSeconds    `json:"prefill_saved_s"`
	OutputTokens      int64              `json:"output_tokens"`
	TTFTMillis        jsonTTFT           `json:"ttft_ms"`
	DurationS         float64            `json:"duration_s"`
	GPUBusyS          float64            `json:"gpu_busy_s"`
	OutputTokensPerS  float64            `json:"output_tokens_per_s"`
	RequestsPerS      float64            `json:"requests_per_s"`
	Steps             int                `json:"steps"`
	Preemptions       int                `json:"preemptions"`
	SwapFallbacks     int                `json:"swap_fallbacks"`
	Requeued          int                `json:"requeued"`
	Onboarded         int                `json:"onboarded"`
	TimedOutTransfers int                `json:"timed_out_transfers"`
	ManagerTimeouts   uint64             `json:"manager_read_timeouts"`
	Denied            uint64             `json:"denied_writes"`
	Failed            uint64             `json:"failed_copies"`
	Links             []link             `json:"links"`
	Series            []jsonPoint        `json:"series"`
	Tiers             []kvtier.TierStats `json:"tiers"`
	WallS             float64            `json:"wall_s"` // replay time on this machine; not repeatable
}

type jsonReport struct {
	Trace           string       `json:"trace"`
	TraceRequests   int          `json:"trace_requests"`
	TraceSpanS      float64      `json:"trace_span_s"`      // first to last arrival of the requests served (the rejected left out, as in the offered work), at the trace's rate
	TimeScale       float64      `json:"time_scale"`        // arrivals stretched by this
	OfferedPrefillS float64      `json:"offered_prefill_s"` // compute of every served prompt with no cache
	OfferedDecodeS  float64      `json:"offered_decode_s"`
	OfferedLoad     float64      `json:"offered_load"` // (prefill + decode) / (span x scale)
	BlockTokens     int          `json:"block_tokens"`
	BlockBytes      int          `json:"block_bytes"`
	ModelBlockBytes int64        `json:"block_bytes_llama3_8b"`
	Onboard         string       `json:"onboard"`
	Preempt         string       `json:"preempt"`
	PinnedPolicy    string       `json:"pinned_policy"`
	DiskPolicy      string       `json:"disk_policy"`
	Ingestion       string       `json:"ingestion"`
	DiskIngestion   string       `json:"disk_ingestion"`
	Configs         []jsonConfig `json:"configs"`
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// ratio is n / of, 0 when of is 0.
func ratio(n, of int64) float64 {
	if of == 0 {
		return 0
	}
	return float64(n) / float64(of)
}

func newJSONReport(o options, traceName string, nreqs int, w offered, outs []outcome) jsonReport {
	mb := modelBlockBytes(o.blockTokens)
	r := jsonReport{
		Trace: traceName, TraceRequests: nreqs, TraceSpanS: w.Span.Seconds(), TimeScale: o.timeScale,
		OfferedPrefillS: w.Prefill.Seconds(), OfferedDecodeS: w.Decode.Seconds(), OfferedLoad: w.Load(o.timeScale),
		BlockTokens: o.blockTokens, BlockBytes: blockBytes(gpu.TinySpec, o.blockTokens), ModelBlockBytes: mb,
		Onboard: o.onboard.String(), Preempt: o.preempt.String(), PinnedPolicy: o.pinnedPolicy.String(), DiskPolicy: o.diskPolicy.String(),
		Ingestion: o.ingestion.String(), DiskIngestion: o.diskIngestion.String(),
	}
	for _, out := range outs {
		res, st := out.res, out.stats
		var timeouts, denied, failed uint64
		for _, ts := range st.Tiers {
			timeouts, denied, failed = timeouts+ts.Timeouts, denied+ts.Denied, failed+ts.Failed
		}
		first := res.FirstAdmissions()
		c := jsonConfig{
			Name: out.tiers.String(), GPUBlocks: out.gpu, PinnedBlocks: out.pinned, DiskBlocks: out.disk,
			Requests: res.Requests, PromptTokens: res.PromptTokens, AdmittedTokens: res.AdmittedTokens,
			RejectedRequests: res.Rejected, RejectedPromptTokens: res.RejectedPromptTokens,
			GPUTokens: first.GPU, PinnedTokens: first.Pinned, DiskTokens: first.Disk, HitRatio: ratio(first.Hits(), first.Tokens),
			ReadmittedTokens: res.Readmissions.Tokens, ReadmittedHitTokens: res.Readmissions.Hits(),
			OPTHitRatio:   out.opt.TokenHitRatio,
			PrefillTokens: res.PrefillTokens, OutputTokens: res.OutputTokens,
			PrefillSavedS: jsonTierSeconds{first.PrefillSaved.GPU.Seconds(), first.PrefillSaved.Pinned.Seconds(), first.PrefillSaved.Disk.Seconds()},
			GPUBusyS:      out.busy.Seconds(),
			TTFTMillis:    jsonTTFT{ms(res.TTFT.P50), ms(res.TTFT.P90), ms(res.TTFT.P99), ms(res.TTFT.Max), ms(res.TTFT.Mean)},
			DurationS:     res.Duration.Seconds(), OutputTokensPerS: res.OutputTokensPerS, RequestsPerS: res.RequestsPerS,
			Steps: res.Steps, Preemptions: res.Preemptions, SwapFallbacks: res.SwapFallbacks, Requeued: res.Requeued, Onboarded: res.Onboarded,
			TimedOutTransfers: res.TimedOutTransfers,
			ManagerTimeouts:   timeouts,
			Denied:            denied,
			Failed:            failed,
			Links:             links(st, mb),
			Tiers:             st.Tiers, // the tiers out configured: GPU, then pinned and disk when it has them
			WallS:             out.wall.Seconds(),
		}
		for _, p := range res.Series {
			admitted, hit := p.AdmittedTokens-p.ReadmittedTokens, p.HitTokens-p.ReadmittedHitTokens
			c.Series = append(c.Series, jsonPoint{p.Start.Seconds(), p.Arrivals, admitted, hit, ratio(hit, admitted), p.OutputTokens})
		}
		r.Configs = append(r.Configs, c)
	}
	return r
}

// rejected reports whether any configuration rejected a request.
func (r jsonReport) rejected() bool {
	for _, c := range r.Configs {
		if c.RejectedRequests > 0 {
			return true
		}
	}
	return false
}

func writeJSON(w io.Writer, r jsonReport) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// printTable writes the configurations side by side, one column each.
func printTable(w io.Writer, r jsonReport) {
	const labelW, colW = 34, 20 // labelW fits "pinned -> disk (Llama-3-8B bytes)"
	row := func(label string, cell func(c jsonConfig) string) {
		fmt.Fprintf(w, "%-*s", labelW, label)
		for _, c := range r.Configs {
			fmt.Fprintf(w, "%*s", colW, cell(c))
		}
		fmt.Fprintln(w)
	}
	share := func(n, of int64) string {
		if of == 0 {
			return commas(n)
		}
		return fmt.Sprintf("%s (%.1f%%)", commas(n), 100*float64(n)/float64(of))
	}
	row("", func(c jsonConfig) string { return c.Name })
	row("capacity (blocks) gpu/pin/disk", func(c jsonConfig) string {
		return fmt.Sprintf("%d/%d/%d", c.GPUBlocks, c.PinnedBlocks, c.DiskBlocks)
	})
	if r.rejected() {
		// Say which requests every figure below counts: the served ones.
		row("requests served", func(c jsonConfig) string { return commas(int64(c.Requests)) })
		row("rejected requests (never fit)", func(c jsonConfig) string { return commas(int64(c.RejectedRequests)) })
		row("  their prompt tokens", func(c jsonConfig) string { return commas(c.RejectedPromptTokens) })
		row("prompt tokens (served requests)", func(c jsonConfig) string { return commas(c.PromptTokens) })
	} else {
		row("requests", func(c jsonConfig) string { return commas(int64(c.Requests)) })
		row("prompt tokens", func(c jsonConfig) string { return commas(c.PromptTokens) })
	}
	row("  served from GPU", func(c jsonConfig) string { return share(c.GPUTokens, c.PromptTokens) })
	row("  served from pinned", func(c jsonConfig) string { return share(c.PinnedTokens, c.PromptTokens) })
	row("  served from disk", func(c jsonConfig) string { return share(c.DiskTokens, c.PromptTokens) })
	// A configuration that served no request (every one rejected) has no
	// hit ratio, TTFT or throughput: "-", not a 0 no request measured.
	served := func(c jsonConfig, f func() string) string {
		if c.Requests == 0 {
			return "-"
		}
		return f()
	}
	row("hit ratio", func(c jsonConfig) string {
		return served(c, func() string { return fmt.Sprintf("%.2f%%", 100*c.HitRatio) })
	})
	row("OPT at total capacity", func(c jsonConfig) string {
		return served(c, func() string { return fmt.Sprintf("%.2f%%", 100*c.OPTHitRatio) })
	})
	row("hit ratio / OPT", func(c jsonConfig) string {
		if c.OPTHitRatio == 0 {
			return "-"
		}
		return fmt.Sprintf("%.2f", c.HitRatio/c.OPTHitRatio)
	})
	row("readmitted tokens", func(c jsonConfig) string { return commas(c.ReadmittedTokens) })
	row("  found again on readmission", func(c jsonConfig) string { return share(c.ReadmittedHitTokens, c.ReadmittedTokens) })
	row("prefill tokens computed", func(c jsonConfig) string { return commas(c.PrefillTokens) })
	pct := func(v, of float64) string {
		if of <= 0 {
			return fmt.Sprintf("%.1f s", v)
		}
		return fmt.Sprintf("%.1f s (%.1f%%)", v, 100*v/of)
	}
	row("prefill compute saved", func(c jsonConfig) string { return pct(c.PrefillSavedS.total(), r.OfferedPrefillS) })
	row("  by GPU hits", func(c jsonConfig) string { return pct(c.PrefillSavedS.GPU, r.OfferedPrefillS) })
	row("  by pinned hits", func(c jsonConfig) string { return pct(c.PrefillSavedS.Pinned, r.OfferedPrefillS) })
	row("  by disk hits", func(c jsonConfig) string { return pct(c.PrefillSavedS.Disk, r.OfferedPrefillS) })
	row("GPU busy (share of run)", func(c jsonConfig) string { return pct(c.GPUBusyS, c.DurationS) })
	row("TTFT p50", func(c jsonConfig) string { return served(c, func() string { return seconds(c.TTFTMillis.P50) }) })
	row("TTFT p90", func(c jsonConfig) string { return served(c, func() string { return seconds(c.TTFTMillis.P90) }) })
	row("TTFT p99", func(c jsonConfig) string { return served(c, func() string { return seconds(c.TTFTMillis.P99) }) })
	row("throughput (output tok/s)", func(c jsonConfig) string { return served(c, func() string { return rate(c.OutputTokensPerS) }) })
	row("run length (modelled)", func(c jsonConfig) string { return fmt.Sprintf("%.1f s", c.DurationS) })
	for i := range 4 {
		name := r.Configs[0].Links[i].Name
		row(name+" (Llama-3-8B bytes)", func(c jsonConfig) string { return bytesIEC(c.Links[i].Bytes) })
	}
	row("preemptions", func(c jsonConfig) string { return commas(int64(c.Preemptions)) })
	row("denied writes", func(c jsonConfig) string { return commas(int64(c.Denied)) })
	row("timed-out loads (sched/manager)", func(c jsonConfig) string {
		return fmt.Sprintf("%d/%d", c.TimedOutTransfers, c.ManagerTimeouts)
	})
	row("replay wall time", func(c jsonConfig) string { return fmt.Sprintf("%.1f s", c.WallS) })
}

// commas formats n with thousands separators.
func commas(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	if neg {
		s = s[1:]
	}
	var b strings.Builder
	for i, ch := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(ch)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// rate formats a rate for a table cell: whole units from 10 up, two
// significant figures below, so that a slow run does not read 0.
func rate(v float64) string {
	if v >= 10 || v == 0 {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.2g", v)
}

// seconds formats milliseconds for a table cell.
func seconds(msec float64) string {
	if msec < 1000 {
		return fmt.Sprintf("%.0f ms", msec)
	}
	return fmt.Sprintf("%.2f s", msec/1000)
}

// bytesIEC formats a byte count with binary prefixes.
func bytesIEC(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	v, exp := float64(n), 0
	for v >= unit && exp < 6 {
		v /= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", v, "KMGTPE"[exp-1])
}
