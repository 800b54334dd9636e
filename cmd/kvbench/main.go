// Command kvbench measures kvtier against references taken on the same machine in
// the same run, and says where each target stands.
//
// # Suites
//
//   - alloc: allocate+free throughput of 32-block sequences with prefix sharing on
//     the plain block pool (single goroutine), the cost per block at pool sizes of
//     1k and 1M blocks, and the same work through the actor system (Manager API of
//     package kvtier; built with -tags kvtier_actor until that package lands).
//   - copy: device<->pinned copies of the default gpu backend against a plain
//     copy() of the same bytes, and the disk tier against plain sequential
//     pwrite/pread of the same block size in the same directory, interleaved;
//     then the reload path end to end through a Manager (Allocate until Ready
//     of a chain only pinned memory, or only the disk, holds), against those
//     H2D and disk-read rates.
//   - trace: a Mooncake-format trace (any block size, -trace-block-tokens; timestamps
//     relative or absolute, in any unit, -time-unit) replayed at several tier capacities through LRU,
//     FIFO, S3-FIFO, ARC and the default Adaptive policy, next to the
//     clairvoyant optimum (cachesim.OPT) and an unbounded cache
//     (cachesim.Infinite); per capacity the default's hit ratio, the best
//     classic's, both over OPT, and the replay time per block reference; and
//     the heap Adaptive holds per id it tracks.
//
// # Output
//
// A human table by default; with -json one JSON object (see report.go for its
// fields). Every ratio is against a reference measured in the same run; the
// targets are printed with PASS or MISS and never change a reference.
//
// # Metrics
//
// With -metrics-addr kvbench serves the Prometheus metrics of the Managers
// its suites create (alloc's actor path, replay's manager paths) at
// /metrics, each labelled config=<suite>/<path>[/pool<blocks>]; once a
// Manager closes its final values stay. After the report it keeps serving
// them until interrupted (SIGINT or SIGTERM).
//
// # Usage
//
//	go run ./cmd/kvbench                       # all suites, full mode
//	go run ./cmd/kvbench -json -quick          # seconds-long, for CI
//	go run ./cmd/kvbench -suite trace -trace /path/conversation_trace.jsonl -capacity 1024,4096
//	go run ./cmd/kvbench -suite copy -dir /mnt/nvme
//	go run ./cmd/kvbench -suite replay -metrics-addr :9400
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/kvtier/kvtier/internal/promserve"
)

func main() {
	os.Exit(exitCode(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr), os.Stderr))
}

// exitCode reports err on stderr and returns the exit status: 0 for no
// error and for -h (the usage is printed already), 2 otherwise.
func exitCode(err error, stderr io.Writer) int {
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return 0
	}
	fmt.Fprintln(stderr, "kvbench:", err)
	return 2
}

// Suite names, in the order they run.
const (
	suiteAlloc = "alloc"
	suiteCopy  = "copy"
	suiteTrace = "trace"
	// suiteReplay replays a Mooncake trace through the direct core and the
	// Manager (issue 11's speed targets).
	suiteReplay = "replay"
	// suiteRemote needs a server (-redis); "all" includes it only then.
	suiteRemote = "remote"
)

var allSuites = []string{suiteAlloc, suiteCopy, suiteTrace, suiteReplay}

// options is the parsed command line. It is read-only once parsed.
type options struct {
	json       bool
	quick      bool
	suites     map[string]bool
	tracePath  string // "" means the embedded sample
	capacities []int  // trace suite tier capacities, in blocks
	// traceBlockTokens is how many tokens one hash id of the -trace file
	// stands for: the trace's block size (the demo's -trace-block-tokens),
	// not a cache's (the demo's -block-tokens).
	traceBlockTokens int
	timeUnit         time.Duration // the time one timestamp unit of the -trace file stands for
	skipBad          bool          // -skip-bad-lines: skip the -trace file's malformed lines
	dir              string        // parent of the disk suite's temp dir; "" means os.TempDir
	redis            []string
	cluster          bool
	metricsAddr      string // -metrics-addr: serve the Managers' Prometheus metrics here
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	fs := flag.NewFlagSet("kvbench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	var suites, caps string
	fs.BoolVar(&o.json, "json", false, "print one JSON object instead of the human table")
	fs.BoolVar(&o.quick, "quick", false, "seconds-long variant (fewer repetitions, smaller sizes) for CI")
	fs.StringVar(&suites, "suite", "all", "comma-separated suites to run: alloc, copy, trace, replay, remote (needs -redis), or all")
	fs.StringVar(&o.tracePath, "trace", "", "Mooncake-format JSONL trace for the trace and replay suites (default: the embedded sample)")
	fs.StringVar(&caps, "capacity", "256,1024,4096,16384,65536", "comma-separated tier capacities in blocks for the trace suite: by default every 4x from 256 to 64k")
	fs.IntVar(&o.traceBlockTokens, "trace-block-tokens", 512, "with -trace: tokens one of the file's hash ids stands for (Mooncake: 512), as the demo's -trace-block-tokens; tells which last blocks are partial")
	// -block-tokens was this flag's name; the demo's -block-tokens is the
	// cache's block size, so the old name said two things.
	var oldBlockTokens int
	fs.IntVar(&oldBlockTokens, "block-tokens", 512, "deprecated: the old name of -trace-block-tokens, which it sets (the demo's -block-tokens is the cache's block size, not the trace's)")
	fs.BoolVar(&o.skipBad, "skip-bad-lines", false, "with -trace: skip the file's malformed lines (the result's trace name says how many and why the first was) instead of stopping at the first")
	fs.DurationVar(&o.timeUnit, "time-unit", time.Millisecond, "the time one unit of the -trace file's timestamps stands for (Mooncake: 1ms; float seconds: 1s; nanoseconds: 1ns)")
	var redisAddrs string
	fs.StringVar(&redisAddrs, "redis", "", "Redis address(es), comma-separated, for the remote suite (several: a cluster)")
	fs.BoolVar(&o.cluster, "redis-cluster", false, "the -redis address is a cluster node")
	fs.StringVar(&o.dir, "dir", "", "directory on the file system the disk benchmark uses (a temp dir is made inside; default: $TMPDIR)")
	fs.StringVar(&o.metricsAddr, "metrics-addr", "", `serve the Prometheus metrics of the suites' Managers on this address (e.g. ":9400") at /metrics while kvbench runs, then keep serving their final values until interrupted`)
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if redisAddrs != "" {
		o.redis = strings.Split(redisAddrs, ",")
		o.cluster = o.cluster || len(o.redis) > 1
	}
	o.suites = make(map[string]bool)
	for _, s := range strings.Split(suites, ",") {
		s = strings.TrimSpace(strings.ToLower(s))
		switch s {
		case "all":
			for _, a := range allSuites {
				o.suites[a] = true
			}
			if o.redis != nil {
				o.suites[suiteRemote] = true
			}
		case suiteAlloc, suiteCopy, suiteTrace, suiteReplay, suiteRemote:
			o.suites[s] = true
		default:
			return o, fmt.Errorf("-suite: unknown suite %q (want alloc, copy, trace, replay, remote or all)", s)
		}
	}
	for _, f := range strings.Split(caps, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			return o, fmt.Errorf("-capacity: %q is not a positive block count", f)
		}
		o.capacities = append(o.capacities, n)
	}
	given := make(map[string]bool)
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	if given["block-tokens"] {
		if given["trace-block-tokens"] && oldBlockTokens != o.traceBlockTokens {
			return o, fmt.Errorf("-block-tokens %d and -trace-block-tokens %d: the first is the deprecated name of the second: give one", oldBlockTokens, o.traceBlockTokens)
		}
		fmt.Fprintln(stderr, "kvbench: -block-tokens is deprecated: it is the trace's tokens per hash id, now -trace-block-tokens")
		o.traceBlockTokens = oldBlockTokens
	}
	if o.traceBlockTokens <= 0 {
		return o, fmt.Errorf("%s: %d must be > 0", traceBlockFlag(given), o.traceBlockTokens)
	}
	if o.timeUnit <= 0 {
		return o, fmt.Errorf("-time-unit: %v must be > 0", o.timeUnit)
	}
	if len(o.capacities) == 0 {
		return o, errors.New("-capacity: no capacities")
	}
	if o.suites[suiteRemote] && o.redis == nil {
		return o, errors.New("-suite remote needs -redis ADDR")
	}
	if err := checkUnused(fs, o); err != nil {
		return o, err
	}
	return o, nil
}

// traceFile is the -trace file and how the flags say to read it.
func (o options) traceFile() traceFile {
	return traceFile{path: o.tracePath, blockTokens: o.traceBlockTokens, timeUnit: o.timeUnit, skipBad: o.skipBad}
}

// traceBlockFlag is the name the trace's block size was given under: the
// deprecated -block-tokens or -trace-block-tokens.
func traceBlockFlag(given map[string]bool) string {
	if given["block-tokens"] && !given["trace-block-tokens"] {
		return "-block-tokens"
	}
	return "-trace-block-tokens"
}

// checkUnused refuses a flag given on the command line that nothing of this
// run would read, rather than ignoring it in silence.
func checkUnused(fs *flag.FlagSet, o options) error {
	given := make(map[string]bool)
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	switch {
	case given["redis-cluster"] && o.redis == nil:
		return errors.New("-redis-cluster needs -redis ADDR: it says what kind of server that address is")
	case (given["trace-block-tokens"] || given["block-tokens"]) && o.tracePath == "":
		return fmt.Errorf("%s needs -trace FILE: it gives that file's block size, and the embedded sample has its own", traceBlockFlag(given))
	case given["skip-bad-lines"] && o.tracePath == "":
		return errors.New("-skip-bad-lines needs -trace FILE: the embedded sample has no malformed line")
	case given["time-unit"] && o.tracePath == "":
		return errors.New("-time-unit needs -trace FILE: it gives that file's timestamp unit, and the embedded sample has its own")
	case given["trace"] && !o.suites[suiteTrace] && !o.suites[suiteReplay]:
		return errors.New("-trace is read only by the trace and replay suites, and -suite selects neither")
	case given["capacity"] && !o.suites[suiteTrace]:
		return errors.New("-capacity is read only by the trace suite, and -suite does not select it")
	case given["dir"] && !o.suites[suiteCopy]:
		return errors.New("-dir is read only by the copy suite (its disk benchmark), and -suite does not select it")
	case given["redis"] && !o.suites[suiteRemote]:
		return errors.New("-redis is read only by the remote suite, and -suite selects neither it nor all")
	}
	return nil
}

// run parses args, runs the selected suites and writes the report to out;
// flag errors and the metrics server's address go to stderr. With
// -metrics-addr it then serves the final metrics until ctx ends or the
// process is interrupted.
func run(ctx context.Context, args []string, out, stderr io.Writer) (err error) {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	var mx metricsSink
	if o.metricsAddr != "" {
		if mx.s, err = promserve.Start(o.metricsAddr); err != nil {
			return err
		}
		fmt.Fprintf(stderr, "metrics: http://%s/metrics\n", mx.s.Addr)
		if !o.suites[suiteAlloc] && !o.suites[suiteReplay] {
			fmt.Fprintln(stderr, "metrics: only the alloc and replay suites create Managers; nothing else has metrics")
		}
		defer func() {
			if err != nil {
				_ = mx.s.Close()
				return
			}
			// Only now does an interrupt stop serving: before, it ends
			// kvbench as it always did.
			hold, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
			defer stop()
			err = mx.s.Hold(hold, stderr)
		}()
	}
	rep, err := runSuites(o, mx)
	if err != nil {
		return err
	}
	if o.json {
		return writeJSON(out, rep)
	}
	return writeHuman(out, rep)
}

// runSuites runs the suites o selects, in a fixed order, and fills a report;
// the Managers they create register their metrics on mx.
func runSuites(o options, mx metricsSink) (*Report, error) {
	rep := &Report{Machine: machineInfo(), Mode: "full"}
	if o.quick {
		rep.Mode = "quick"
	}
	for _, s := range allSuites {
		if o.suites[s] {
			rep.Suites = append(rep.Suites, s)
		}
	}
	if o.suites[suiteAlloc] {
		a, err := runAlloc(o.quick, mx)
		if err != nil {
			return nil, fmt.Errorf("alloc suite: %w", err)
		}
		rep.Alloc = a
	}
	if o.suites[suiteCopy] {
		c, err := runCopy(o.quick, o.dir)
		if err != nil {
			return nil, fmt.Errorf("copy suite: %w", err)
		}
		rep.Copy = c
	}
	if o.suites[suiteTrace] {
		t, err := runTrace(o.traceFile(), o.capacities)
		if err != nil {
			return nil, fmt.Errorf("trace suite: %w", err)
		}
		rep.Trace = t
	}
	if o.suites[suiteReplay] {
		r, err := runReplay(o.traceFile(), o.quick, mx)
		if err != nil {
			return nil, fmt.Errorf("replay suite: %w", err)
		}
		rep.Replay = r
	}
	if o.suites[suiteRemote] {
		rep.Suites = append(rep.Suites, suiteRemote)
		r, err := runRemote(o.quick, o.redis, o.cluster)
		if err != nil {
			return nil, fmt.Errorf("remote suite: %w", err)
		}
		rep.Remote = r
	}
	rep.Targets = targets(rep)
	return rep, nil
}
