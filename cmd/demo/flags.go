package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/kvtier/kvtier"
	"github.com/kvtier/kvtier/internal/promserve"
	"github.com/kvtier/kvtier/policy"
	"github.com/kvtier/kvtier/scheduler"
	"github.com/kvtier/kvtier/trace"
)

// Default capacities, in blocks of defaultBlockTokens (512) tokens. At
// Llama-3-8B's 128 KiB a token a 512-token block is 64 MiB, so the GPU's
// 1,024 blocks are the 64 GiB an 80 GB H100 has left for KV after the
// model's 16 GB, pinned 4,096 blocks are 256 GiB of host memory and the disk
// 16,384 blocks 1 TiB of NVMe. The embedded sample references 13,712
// distinct blocks, so the GPU evicts, pinned memory keeps about a third of
// them and the disk all.
//
// These and the other defaults counted in blocks (the write quotas and
// -offload-ahead) hold the same tokens at any -block-tokens: with
// -block-tokens 16 the GPU's default is 32,768 blocks, still 524,288 tokens
// (scaleBlockDefaults). Before, a smaller block shrank every tier and quota
// with it: at 16 tokens the GPU held 16,384 tokens, and a run denied 398,136
// writes with pinned memory serving nothing.
const (
	defaultBlockTokens  = trace.BlockTokens
	defaultGPUBlocks    = 1024
	defaultPinnedBlocks = 4096
	defaultDiskBlocks   = 16384
	defaultWriteQuota   = 256
	defaultDiskQuota    = 4096
	defaultOffloadAhead = 64
)

// blockDefaults are the flags counted in blocks whose defaults, set for
// defaultBlockTokens, scaleBlockDefaults keeps in tokens.
func blockDefaults(o *options) []struct {
	name string
	v    *int
	def  int
} {
	return []struct {
		name string
		v    *int
		def  int
	}{
		{"gpu-blocks", &o.gpuBlocks, defaultGPUBlocks}, {"pinned-blocks", &o.pinnedBlocks, defaultPinnedBlocks},
		{"disk-blocks", &o.diskBlocks, defaultDiskBlocks}, {"write-quota", &o.writeQuota, defaultWriteQuota},
		{"disk-write-quota", &o.diskQuota, defaultDiskQuota}, {"offload-ahead", &o.offloadAhead, defaultOffloadAhead},
	}
}

// scaleBlockDefaults sets every flag of blockDefaults not given on the
// command line (set) to its default's tokens in blocks of o.blockTokens,
// rounded down, at least 1: the same tokens whatever the block size.
func scaleBlockDefaults(o *options, set map[string]bool) {
	if o.blockTokens <= 0 || o.blockTokens == defaultBlockTokens {
		return
	}
	for _, f := range blockDefaults(o) {
		if !set[f.name] {
			*f.v = max(1, int(int64(f.def)*defaultBlockTokens/int64(o.blockTokens)))
		}
	}
}

// inTokens is the help's note on a flag of blockDefaults.
func inTokens(def int) string {
	return fmt.Sprintf("; unless given, %s tokens' worth whatever -block-tokens (the default is for %d-token blocks)",
		commas(int64(def)*defaultBlockTokens), defaultBlockTokens)
}

// options is the parsed command line.
type options struct {
	tracePath string
	skipBad   bool
	limit     int
	timeScale float64 // 0: chosen for load (timeScaleFor)
	load      float64

	configs      []tierSet
	gpuBlocks    int
	pinnedBlocks int
	diskBlocks   int
	diskDir      string
	blockTokens  int
	// traceBlockTokens is how many tokens one hash id of the trace stands
	// for (the trace's block size, not the cache's).
	traceBlockTokens int
	// traceTimeUnit is the time one unit of the trace's timestamps stands
	// for (trace.Options.TimeUnit).
	traceTimeUnit time.Duration

	pinnedPolicy   policy.Kind
	diskPolicy     policy.Kind
	ingestion      kvtier.Ingestion
	diskIngestion  kvtier.Ingestion
	readDeadline   time.Duration
	sync           bool
	noClass        bool // -classes=false
	writeQuota     int
	offloadAhead   int
	serialOffloads bool
	hotHits        int
	diskQuota      int

	onboard        scheduler.OnboardPolicy
	onboardTimeout time.Duration
	onboardPer1K   time.Duration
	preempt        scheduler.PreemptPolicy
	maxSeqs        int
	maxBatched     int
	maxOutput      int

	nodes          int       // multi-node mode: replicas (0: off)
	routes         []routing // multi-node mode: routings to compare
	redis          []string  // multi-node mode: the shared tier's server(s)
	vocab          int
	seriesInterval time.Duration

	plotPath    string
	metricsAddr string          // -metrics-addr: serve Prometheus metrics here
	metrics     *promserve.Sink // set by run when metricsAddr is
	events      string          // -events: publish KV events on this ZMQ endpoint
	eventsReply string          // -events-replay: their replay and snapshot socket
	jsonPath    string
	progress    bool
}

// tierSet is one configuration of the side-by-side run: which tiers it has.
type tierSet int

const (
	gpuOnly tierSet = iota + 1
	withPinned
	withDisk
)

func (t tierSet) String() string {
	switch t {
	case gpuOnly:
		return "gpu"
	case withPinned:
		return "gpu+pinned"
	case withDisk:
		return "gpu+pinned+disk"
	}
	return fmt.Sprintf("tierSet(%d)", int(t))
}

func parseTierSets(s string) ([]tierSet, error) {
	var out []tierSet
	seen := map[tierSet]bool{}
	for _, f := range strings.Split(s, ",") {
		var t tierSet
		switch strings.ToLower(strings.TrimSpace(f)) {
		case "gpu":
			t = gpuOnly
		case "pinned", "gpu+pinned":
			t = withPinned
		case "disk", "gpu+pinned+disk":
			t = withDisk
		default:
			return nil, fmt.Errorf("%q is not gpu, pinned or disk", f)
		}
		if seen[t] {
			return nil, fmt.Errorf("%q named twice", f)
		}
		seen[t] = true
		out = append(out, t)
	}
	return out, nil
}

func parseIngestion(s string) (kvtier.Ingestion, error) {
	switch strings.ToLower(s) {
	case "evict":
		return kvtier.IngestEvict, nil
	case "all":
		return kvtier.IngestAll, nil
	case "hot":
		return kvtier.IngestHot, nil
	}
	return 0, fmt.Errorf("%q is not evict, all or hot", s)
}

func parseOnboard(s string) (scheduler.OnboardPolicy, error) {
	switch strings.ToLower(s) {
	case "wait":
		return scheduler.Wait, nil
	case "timeout":
		return scheduler.Timeout, nil
	case "best-effort", "besteffort":
		return scheduler.BestEffort, nil
	}
	return 0, fmt.Errorf("%q is not wait, timeout or best-effort", s)
}

func parsePreempt(s string) (scheduler.PreemptPolicy, error) {
	switch strings.ToLower(s) {
	case "recompute":
		return scheduler.Recompute, nil
	case "swap":
		return scheduler.Swap, nil
	}
	return 0, fmt.Errorf("%q is not recompute or swap", s)
}

// parseFlags parses args; usage and errors go to stderr.
func parseFlags(args []string, stderr io.Writer) (options, error) {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	var configs, pinPol, diskPol, ingest, diskIngest, onboard, preempt string
	fs.StringVar(&o.tracePath, "trace", "", "Mooncake-format JSONL trace, e.g. ../shared/traces/conversation_trace.jsonl (default: the embedded 600-request sample)")
	fs.BoolVar(&o.skipBad, "skip-bad-lines", false, "skip malformed trace lines instead of stopping at the first")
	fs.IntVar(&o.limit, "limit", 0, "replay only the first N requests of the file (0: all); of a trace not sorted by time, the first N lines, not the N earliest")
	fs.Float64Var(&o.timeScale, "time-scale", 0, "multiply arrival times: 1 is the trace's own rate, 2 half of it (0: the scale that makes the trace a GPU load of -load)")
	fs.Float64Var(&o.load, "load", defaultLoad, "with -time-scale 0: the share of the modelled GPU's time the trace's prefill and decode compute fills at the chosen arrival rate, with no cache")

	fs.StringVar(&configs, "configs", "gpu,pinned,disk", "configurations to run side by side: gpu (GPU only), pinned (GPU + pinned), disk (GPU + pinned + disk)")
	fs.IntVar(&o.gpuBlocks, "gpu-blocks", defaultGPUBlocks, "GPU capacity in blocks"+inTokens(defaultGPUBlocks))
	fs.IntVar(&o.pinnedBlocks, "pinned-blocks", defaultPinnedBlocks, "pinned host memory capacity in blocks"+inTokens(defaultPinnedBlocks))
	fs.IntVar(&o.diskBlocks, "disk-blocks", defaultDiskBlocks, "disk capacity in blocks"+inTokens(defaultDiskBlocks))
	fs.StringVar(&o.diskDir, "disk-dir", "", "put the disk tier's files in a fresh subdirectory of this existing directory, removed at exit (default: the system temporary directory)")
	fs.IntVar(&o.blockTokens, "block-tokens", defaultBlockTokens, "tokens per block of the cache (the trace's own is -trace-block-tokens); capacities and quotas not given keep their default tokens")
	fs.IntVar(&o.traceBlockTokens, "trace-block-tokens", trace.BlockTokens, "with -trace: tokens one of the file's hash ids stands for (Mooncake's traces: 512)")
	fs.DurationVar(&o.traceTimeUnit, "time-unit", time.Millisecond, "with -trace: the time one unit of the file's timestamps stands for (Mooncake's: 1ms; float seconds: 1s; nanoseconds: 1ns)")

	fs.StringVar(&pinPol, "pinned-policy", "lru", "pinned tier eviction policy: lru, fifo, s3fifo, arc, adaptive (the library defaults a pinned tier over a disk to lru and a last pinned tier to adaptive; the demo keeps lru in every column: on its sample the five come within 0.3 points of one another, and adaptive's figure varies from run to run)")
	fs.StringVar(&diskPol, "disk-policy", "adaptive", "disk tier eviction policy: lru, fifo, s3fifo, arc, adaptive (the library's default for the last tier)")
	fs.StringVar(&ingest, "ingestion", "evict", "when GPU blocks are written to pinned memory: evict (before reuse), all (as soon as complete), hot (after -hot-hits)")
	fs.StringVar(&diskIngest, "disk-ingestion", "evict", "when pinned blocks are written to disk: evict, all, hot")
	fs.DurationVar(&o.readDeadline, "read-deadline", 0, "the Manager's wall-clock deadline for a load from pinned memory or disk (0: none, for repeatable runs)")
	fs.IntVar(&o.hotHits, "hot-hits", 2, "-ingestion hot and -disk-ingestion hot: hits before a block is written down")
	fs.IntVar(&o.writeQuota, "write-quota", defaultWriteQuota, "GPU -> pinned writes (blocks) in flight before more are denied"+inTokens(defaultWriteQuota))
	fs.BoolVar(&o.serialOffloads, "serial-offloads", false, "one GPU -> pinned offload in flight at a time (kvtier.Config.SerialOffloads): with -sync, runs whose pinned tier is ARC repeat exactly on full traces too")
	fs.IntVar(&o.offloadAhead, "offload-ahead", defaultOffloadAhead, "free GPU blocks, next to be evicted, written to pinned memory ahead of need (kvtier.Config.OffloadAhead)"+inTokens(defaultOffloadAhead))
	fs.IntVar(&o.diskQuota, "disk-write-quota", defaultDiskQuota, fmt.Sprintf("pinned -> disk writes (blocks) in flight before more are denied (the Manager's default, kvtier.Config.DiskWriteQuota, is %d; a quota the demo never reaches keeps runs repeatable)", kvtier.DefaultDiskWriteQuota)+inTokens(defaultDiskQuota))
	fs.BoolVar(&o.sync, "sync", true, "finish the Manager's copies (loads and writes) before each scheduler call returns, so that runs repeat: exactly on the embedded sample with the default policies and block size, within a few tenths of a point on full traces, with a pinned adaptive tier (the sample's GPU + pinned: 9.11-9.41%) and with small blocks and a disk (-block-tokens 16: 17.05-17.15%), where copies inside one call still race (package schedcache, Determinism)")

	classes := fs.Bool("classes", true, "give the tiers each finished request's class, its output length bucketed by powers of two (kvtier.CommitItem.Class), which the adaptive policies learn from (schedcache.Options.NoClass when false); it reaches the blocks written down after the request finishes, so it does nothing under -ingestion all")

	fs.StringVar(&onboard, "onboard", "wait", "what a sequence does while its prefix loads: wait, timeout, best-effort")
	fs.DurationVar(&o.onboardTimeout, "onboard-timeout", scheduler.DefaultOnboardTimeout, "-onboard timeout: base allowance (logical time)")
	fs.DurationVar(&o.onboardPer1K, "onboard-timeout-per-1k", scheduler.DefaultOnboardTimeoutPer1K, "-onboard timeout: allowance per 1,000 loading tokens")
	fs.StringVar(&preempt, "preempt", "recompute", "preemption: recompute, or swap (full blocks to pinned memory; recompute where there is no pinned tier)")
	fs.IntVar(&o.maxSeqs, "max-seqs", scheduler.DefaultMaxNumSeqs, "max sequences admitted at once")
	fs.IntVar(&o.maxBatched, "max-batched-tokens", scheduler.DefaultMaxNumBatchedTokens, "max tokens computed in one step (longer prompts are prefilled in chunks)")
	fs.IntVar(&o.maxOutput, "max-output", 0, "cap each request's output tokens (0: the trace's output_length)")
	fs.IntVar(&o.vocab, "vocab", scheduler.DefaultVocab, "vocabulary size for the synthetic token ids (at least 2)")
	fs.DurationVar(&o.seriesInterval, "series-interval", scheduler.DefaultSeriesInterval, "width of one point of the hit-ratio-over-time series (on the run's clock)")

	var routes, redisAddrs string
	fs.IntVar(&o.nodes, "nodes", 0, "multi-node mode: serve the trace with this many replicas (GPU + pinned each) instead of comparing tiers (no -configs, -disk-*, -json, -plot, -progress or -series-interval)")
	fs.StringVar(&routes, "route", "round-robin,prefix-affinity", "multi-node mode: routings to compare: round-robin, prefix-affinity")
	fs.StringVar(&redisAddrs, "redis", "", "multi-node mode: Redis address(es), comma-separated (several: a cluster), for a remote tier the replicas share, written through: a block goes to it as soon as it lands in a replica's pinned memory")
	fs.StringVar(&o.plotPath, "plot", "kvtier-demo.png", `write the TTFT CDF and hit ratio over time to this file (.png or .svg; "" to skip)`)
	fs.StringVar(&o.jsonPath, "json", "", `write the numbers as JSON to this file ("-": stdout, and the table goes to stderr)`)
	fs.BoolVar(&o.progress, "progress", false, "show a progress bar on stderr even when stderr is not a terminal")
	fs.StringVar(&o.metricsAddr, "metrics-addr", "", `serve kvtier's Prometheus metrics on this address (e.g. ":9400") at /metrics while the demo runs, then keep serving each configuration's final values until interrupted`)
	fs.StringVar(&o.events, "events", "", `publish vLLM-format KV events on this ZMQ endpoint (e.g. "tcp://*:5557") while each configuration runs; a KV-aware router subscribes there (multi-node mode: replica i on port+i, or an ipc:// path with _dp<i>)`)
	fs.StringVar(&o.eventsReply, "events-replay", "", `with -events: answer replay and snapshot requests on this endpoint (e.g. "tcp://*:5558"; multi-node mode: port+i)`)
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	o.noClass = !*classes

	var errs []error
	bad := func(flag string, err error) { errs = append(errs, fmt.Errorf("-%s: %w", flag, err)) }
	set := map[string]bool{} // the flags given on the command line
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	scaleBlockDefaults(&o, set)
	if o.nodes > 0 {
		// The multi-node mode prints its own table and nothing else: a flag
		// it does not read is an error, not silently dropped. An empty value
		// (-plot "", -progress=false) asks for nothing and is fine.
		for _, name := range fleetIgnored {
			if v := fs.Lookup(name).Value.String(); set[name] && v != "" && v != "false" {
				bad(name, fmt.Errorf("not used in the multi-node mode (-nodes %d): drop one of them", o.nodes))
			}
		}
	}
	var err error
	if o.routes, err = parseRoutes(routes); err != nil {
		bad("route", err)
	}
	if redisAddrs != "" {
		o.redis = strings.Split(redisAddrs, ",")
	}
	if o.nodes < 0 || o.nodes > 64 {
		bad("nodes", fmt.Errorf("%d must be in [0, 64]", o.nodes))
	}
	if len(o.redis) > 0 && o.nodes == 0 {
		bad("redis", errors.New("the shared tier is for the multi-node mode: add -nodes N"))
	}
	if set["trace-block-tokens"] && o.tracePath == "" {
		bad("trace-block-tokens", errors.New("gives the -trace file's block size; the embedded sample has its own: add -trace FILE"))
	}
	if set["time-unit"] && o.tracePath == "" {
		bad("time-unit", errors.New("gives the -trace file's timestamp unit; the embedded sample has its own: add -trace FILE"))
	}
	if o.traceTimeUnit <= 0 {
		bad("time-unit", fmt.Errorf("%v must be > 0", o.traceTimeUnit))
	}
	if set["route"] && o.nodes == 0 {
		bad("route", errors.New("routing is for the multi-node mode: add -nodes N"))
	}
	if o.nodes > 0 && o.pinnedBlocks <= 0 {
		bad("pinned-blocks", fmt.Errorf("%d must be > 0 in the multi-node mode", o.pinnedBlocks))
	}
	if o.configs, err = parseTierSets(configs); err != nil {
		bad("configs", err)
	}
	if o.pinnedPolicy, err = policy.ParseKind(pinPol); err != nil {
		bad("pinned-policy", err)
	}
	if o.diskPolicy, err = policy.ParseKind(diskPol); err != nil {
		bad("disk-policy", err)
	}
	if o.ingestion, err = parseIngestion(ingest); err != nil {
		bad("ingestion", err)
	}
	if o.diskIngestion, err = parseIngestion(diskIngest); err != nil {
		bad("disk-ingestion", err)
	}
	if o.onboard, err = parseOnboard(onboard); err != nil {
		bad("onboard", err)
	}
	if o.preempt, err = parsePreempt(preempt); err != nil {
		bad("preempt", err)
	}
	for _, f := range []struct {
		name string
		v    int
	}{
		{"gpu-blocks", o.gpuBlocks}, {"block-tokens", o.blockTokens}, {"trace-block-tokens", o.traceBlockTokens},
		{"max-seqs", o.maxSeqs}, {"max-batched-tokens", o.maxBatched},
		{"write-quota", o.writeQuota}, {"disk-write-quota", o.diskQuota}, {"hot-hits", o.hotHits},
		{"offload-ahead", o.offloadAhead},
	} {
		if f.v <= 0 {
			bad(f.name, fmt.Errorf("%d must be > 0", f.v))
		}
	}
	for _, t := range o.configs {
		if t >= withPinned && o.pinnedBlocks <= 0 {
			bad("pinned-blocks", fmt.Errorf("%d must be > 0 for the %s configuration", o.pinnedBlocks, t))
		}
		if t == withDisk && o.diskBlocks <= 0 {
			bad("disk-blocks", fmt.Errorf("%d must be > 0 for the %s configuration", o.diskBlocks, t))
		}
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"limit", o.limit}, {"max-output", o.maxOutput}} {
		if f.v < 0 {
			bad(f.name, fmt.Errorf("%d must be >= 0", f.v))
		}
	}
	if !(o.timeScale >= 0) || o.timeScale > 1e6 {
		bad("time-scale", fmt.Errorf("%v must be in [0, 1e6]", o.timeScale))
	}
	if !(o.load > 0) || o.load > 10 {
		bad("load", fmt.Errorf("%v must be in (0, 10]", o.load))
	}
	for _, f := range []struct {
		name string
		v    time.Duration
	}{{"read-deadline", o.readDeadline}, {"onboard-timeout", o.onboardTimeout}, {"onboard-timeout-per-1k", o.onboardPer1K}} {
		if f.v < 0 {
			bad(f.name, fmt.Errorf("%v must be >= 0", f.v))
		}
	}
	if o.seriesInterval <= 0 {
		bad("series-interval", fmt.Errorf("%v must be > 0", o.seriesInterval))
	}
	if o.vocab < 2 {
		// With one token id every token is 0: all prompts share one prefix
		// and the hit ratio counts hits no real trace has.
		bad("vocab", fmt.Errorf("%d must be >= 2", o.vocab))
	}
	if o.eventsReply != "" && o.events == "" {
		bad("events-replay", errors.New("answers replays of the -events publisher: add -events ENDPOINT"))
	}
	if o.plotPath != "" {
		if _, err := plotFormat(o.plotPath); err != nil {
			bad("plot", err)
		} else if err := outputDir(o.plotPath); err != nil {
			bad("plot", err)
		}
	}
	if o.jsonPath != "" && o.jsonPath != "-" {
		if err := outputDir(o.jsonPath); err != nil {
			bad("json", err)
		}
	}
	if o.diskDir != "" {
		if fi, err := os.Stat(o.diskDir); err != nil {
			bad("disk-dir", fmt.Errorf("must be an existing directory: %w", err))
		} else if !fi.IsDir() {
			bad("disk-dir", fmt.Errorf("%s is not a directory", o.diskDir))
		}
	}
	return o, errors.Join(errs...)
}

// fleetIgnored are the flags the multi-node mode (-nodes) does not read.
// Every -disk-* flag is here: a replica has no disk tier, and with -redis
// its shared tier, the one below pinned memory, is always written through
// (kvtier.IngestAll: a block reaches the other replicas as soon as it lands
// in this one's pinned memory), so -disk-ingestion has nothing to set.
var fleetIgnored = []string{"configs", "json", "plot", "progress", "series-interval",
	"disk-blocks", "disk-dir", "disk-policy", "disk-ingestion", "disk-write-quota"}

// outputDir checks, before the run, that the directory an output file goes
// to exists: the file is written only after every configuration has run.
func outputDir(path string) error {
	dir := filepath.Dir(path)
	if fi, err := os.Stat(dir); err != nil {
		return fmt.Errorf("%s: the directory must exist: %w", path, err)
	} else if !fi.IsDir() {
		return fmt.Errorf("%s: %s is not a directory", path, dir)
	}
	return nil
}
