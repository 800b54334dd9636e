package kvtier

import (
	"crypto/tls"
	"errors"
	"fmt"
	"math"
	"os"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/kvtier/kvtier/actors"
	"github.com/kvtier/kvtier/disk"
	"github.com/kvtier/kvtier/events"
	"github.com/kvtier/kvtier/gpu"
	"github.com/kvtier/kvtier/gpu/tier"
	"github.com/kvtier/kvtier/policy"
	"github.com/kvtier/kvtier/remote"
)

// Ingestion policies for writing GPU blocks down to pinned memory.
type Ingestion = actors.Ingestion

// The ingestion policies (Config.Ingestion, Config.DiskIngestion): see
// messages.IngestEvict, IngestAll and IngestHot.
const (
	IngestEvict = actors.IngestEvict
	IngestAll   = actors.IngestAll
	IngestHot   = actors.IngestHot
)

// RemoteConfig configures the shared tier on Redis (package remote).
type RemoteConfig struct {
	// Addrs: one address is a standalone server unless Cluster is set;
	// several are a Redis Cluster (Cluster is set for them).
	Addrs              []string
	Cluster            bool
	Username, Password string
	TLS                *tls.Config
	// Prefix starts every key (default "kvtier"); TTL bounds a block's life
	// (default 1h, else at least 1s); ChunkBytes is the size of each value
	// (default 1 MiB, at most 512 MiB, Redis's largest string).
	Prefix     string
	TTL        time.Duration
	ChunkBytes int
	// WriteQuotaBytes bounds writes in flight (default 256 MiB; at least
	// one block): over it a write is denied and counted. ReadTimeout
	// (>= 0) bounds a lookup and a read
	// without a load deadline of its own (default 1s): a slow server is a
	// miss, never a hang.
	WriteQuotaBytes int64
	ReadTimeout     time.Duration
}

// remoteMaxChunkBytes is remote.Config.ChunkBytes' bound: Redis's largest string.
const remoteMaxChunkBytes = 512 << 20

// DefaultDiskWriteQuota is Config.DiskWriteQuota's default: disk writes in
// flight. (actors.DefaultDiskWriteQuota, 64, is the disk actor's own
// default, which New never uses: it always passes this one or the field.)
const DefaultDiskWriteQuota = 256

// Config configures a Manager. New validates it and never modifies it; zero
// fields take the defaults documented on each.
type Config struct {
	// GPUBlocks is the number of GPU blocks (required, in [1, 2^31-1]; New
	// also refuses more than the machine's memory holds the metadata of).
	GPUBlocks int
	// BlockTokens is the number of tokens per block (default 16).
	BlockTokens int
	// Model sets the bytes of a block. The zero value means gpu.TinySpec, a
	// toy model of 64 bytes a token meant for tests, not any real model: a
	// server must set the served model's spec (e.g. gpu.Llama3_8B), or the
	// GPU arena and every lower tier hold blocks too small for its KV. New
	// logs a warning (Logger) when Model is zero and a pinned, disk or
	// remote tier is configured.
	Model gpu.ModelSpec
	// VocabSize, when > 0, rejects token ids outside [0, VocabSize).
	VocabSize int
	// ModelID names the served model and its revision (e.g.
	// "meta-llama/Llama-3-8B@5f0b02c"). It is part of every block's namespace
	// and of the disk tier's fingerprint: KV of another model, a fine-tune with
	// the same shape included, is never served. Set it whenever a disk
	// directory may outlive the model.
	ModelID string
	// Layout places blocks in the GPU arena (default gpu.BlockContiguous).
	// gpu.LayerSeparate gives one dense K and one dense V tensor per layer,
	// the shape FlashAttention and FlashInfer kernels take: address them
	// with Layout().LayerTensor and Arena().DevicePtr. Tier copies and disk
	// records use the block's host form under either kind, so a disk
	// directory written under one kind serves the other.
	Layout gpu.LayoutKind

	// Remote, when set, adds the shared tier on Redis below the node's own
	// tiers (it needs a pinned tier): blocks leaving host memory are also
	// written there, and a prefix no local tier holds is looked up there.
	Remote *RemoteConfig

	// PinnedBytes is the pinned host tier's capacity; 0 disables the tier.
	PinnedBytes int64
	// PinnedPolicy is the pinned tier's eviction policy. The default depends
	// on where the tier sits. When its victims are what the tier below
	// receives (DiskDir or Remote set, DiskIngestion IngestEvict), it is
	// policy.LRU: the lower tier then receives blocks in the order of their
	// last use, and its own policy makes the final choice. Otherwise the
	// pinned tier is the last to hold a block, and the default is
	// policy.Adaptive. On both shared Mooncake traces, three tiers with
	// pinned LRU and disk Adaptive beat Adaptive on both (30.42% against
	// 29.56% and 58.16% against 58.07% hit ratio, one run each, 2026-11-27;
	// see the README's demo section).
	PinnedPolicy policy.Kind
	// PinnedLock is kept for compatibility only. The pinned tier's memory
	// is the device's copy target, so it always comes from the device's
	// AllocHost (pinned.DeviceAlloc), which page-locks it whatever this
	// says: cuMemAllocHost on CUDA, mlock on the host backend, where a
	// refusal (RLIMIT_MEMLOCK) is not an error. The pinned tier's
	// TierStats.Extra["locked"] (1 or 0) says whether it is locked.
	//
	// Deprecated: PinnedLock has no effect.
	PinnedLock bool

	// DiskDir enables the disk tier in this directory (created if missing,
	// locked against a second opener); blocks written there survive restarts.
	// Which blocks are written there is DiskIngestion's choice: Close does
	// not write pinned memory's blocks down, so with the default only the
	// pinned tier's victims are on the disk when the Manager closes.
	DiskDir string
	// DiskBytes is the disk tier's capacity (required with DiskDir).
	DiskBytes int64
	// DiskPolicy is the disk tier's eviction policy (default policy.Adaptive).
	DiskPolicy policy.Kind
	// DiskIngestion says when pinned blocks go to disk (default IngestEvict:
	// the pinned tier's victims, drained ahead of need).
	DiskIngestion Ingestion
	// DiskWriteQuota bounds disk writes in flight (default
	// DefaultDiskWriteQuota, 256); a drained victim over it is dropped,
	// counted as denied.
	DiskWriteQuota int
	// DiskFS is the file system the disk tier uses (nil: the operating
	// system's); tests and fault drills pass a *disk.FaultFS.
	DiskFS disk.FS
	// DiskSync adds fdatasync to every disk write and syncs what opening
	// the disk tier changed (slot files, their directory and its parent):
	// power-loss safety (disk.Config.Sync).
	DiskSync bool

	Ingestion Ingestion // default IngestEvict
	HotHits   int       // under IngestHot (Ingestion or DiskIngestion): hits before a block is written down (default 2)
	// OffloadThreshold: above this fraction of GPU blocks holding data, free
	// cached blocks are offloaded ahead of need (default 0.85, in (0, 1]).
	OffloadThreshold float64
	// OffloadAhead is the window of blocks written down ahead of need: of the
	// OffloadAhead free cached blocks next to be evicted, those with no copy
	// below are written after each batch (default 64). Blocks further back
	// wait: until evicted they stay on the GPU, where they may be hit again,
	// and their copies would take room below.
	OffloadAhead int
	// SerialOffloads keeps one GPU -> pinned offload in flight at a time,
	// with loads' requests queued behind it, so that replays on a logical
	// clock repeat exactly (schedcache's Sync mode): the pinned tier then
	// sees every offload's commit and every load's reads in one order. It
	// costs overlap between copies, and a queued load can miss a wall-clock
	// read deadline (use ReadDeadlineBase < 0); serving leaves it off.
	SerialOffloads bool
	// WriteQuota bounds block writes in flight to the lower tier (default
	// 256). A write over it is denied and counted (TierStats.Denied), never
	// queued: an eviction, Swap or write-through of more blocks at once
	// than the quota leaves free writes the rest nowhere.
	WriteQuota int
	// MaxPendingCalls bounds the calls in flight at once across all callers
	// (default 4096): each holds one message in an actor's mailbox. A caller
	// past the bound waits for a slot under its context; when the context
	// ends first, the call has no effect and its error wraps ErrCanceled.
	// This keeps the mailboxes, and the memory they hold, bounded under any
	// flood of calls.
	MaxPendingCalls int

	// Double get: lower tiers are asked only when they hold at least
	// DoubleGetMinBlocks blocks of a prompt (default 1) and at least
	// DoubleGetMinRatio of its blocks (default 0).
	DoubleGetMinBlocks int
	DoubleGetMinRatio  float64

	// Loads from lower tiers must finish within ReadDeadlineBase +
	// tokens*ReadDeadlinePerToken (defaults 50ms and 20µs); negative disables.
	// At the deadline a late load becomes a miss and the allocation's Ready
	// completes, its ValidTokens covering what arrived; the sequence
	// recomputes the rest into the blocks it was given, or into fresh ones
	// when the copy up into them is already under way. In that last case,
	// with too few free GPU blocks to swap in, the load finishes late
	// instead, as hits (TierStats.Overdue, kvtier_tier_overdue_blocks_total;
	// a disk part behind a pinned run that fell short ends as a miss then).
	// A LoadDeadline already past at Allocate is a miss at once, and a load
	// whose sequence was freed before its deadline ends late without fresh
	// blocks. Under a deadline, the leading run of a load that pinned memory
	// holds is loaded apart from the disk or remote blocks after it: when
	// those are late, the pinned run still counts. The tiers below are asked
	// to answer ahead of the deadline by the time the copy up of their
	// blocks takes and the lag of such an answer, both measured by the GPU
	// tier (TierStats.Extra "copy_up_us_per_block", "answer_lag_us"; at
	// most half of the time left): a disk read cut there answers with the
	// leading blocks it has read, and those are copied up before the
	// deadline and count.
	//
	// The per-token default asks of the whole path (disk or remote, then
	// pinned, then GPU) at least bytes-per-token / 20µs: for Llama-3-8B in
	// fp16 (128 KiB a token) about 6.5 GB/s, what only NVMe-class storage
	// reads. On slower storage most disk loads would miss it and be
	// recomputed: raise ReadDeadlinePerToken to (bytes per token) / (read
	// bandwidth), or disable the deadline (ReadDeadlineBase < 0).
	ReadDeadlineBase     time.Duration
	ReadDeadlinePerToken time.Duration
	// Clock is the time the load deadlines above are set and judged by
	// (default time.Now): a simulator on a logical clock passes its own, and
	// the deadlines follow it. Timers still wait in wall time, for the
	// difference the clock gives; one that fires while the clock is still
	// short of the deadline waits again (at least 5 ms of wall time), so a
	// load is late only once the clock says so. The remote tier's network
	// timeouts are wall time; a read's deadline gives its network call the
	// time the deadline leaves on the clock.
	Clock Clock

	// Device is the GPU (default gpu.Default(): host memory, or CUDA under the
	// cuda build tag). A Device passed in is not closed by Close.
	Device gpu.Device
	// System, when set, hosts kvtier's actors inside the caller's actor
	// system; Close stops them, not the System (one New made is shut down).
	System *actor.ActorSystem
	// Logger receives kvtier's logs (default: none).
	Logger *zap.Logger
	// Registerer, when set, gets kvtier's Prometheus metrics (MetricNames):
	// tier occupancy and counters read from Stats at each scrape, hit tokens
	// per tier with their denominator, and per-link bytes, blocks, failures
	// and a transfer-duration histogram. Never the global registry unless
	// passed in. Close unregisters them. A Registerer that refuses them
	// (another Manager's metrics already there) fails New with
	// ErrBadConfig, before the disk tier creates any file. A scrape while
	// New runs gets no tier series.
	Registerer prometheus.Registerer
	// MetricsNamespaces is a comma-separated allowlist of tenant salts whose
	// token counts get their own namespace label; requests without a salt
	// are "default", every other salt is "other", so the series count stays
	// bounded however many tenants come by. Those two names are refused
	// here (ErrBadConfig): a tenant named so would merge with them.
	MetricsNamespaces string
	// Events, when set, publishes every change of residency on every tier
	// as vLLM's KV events (ZMQ PUB), with vLLM's replay socket and a
	// snapshot request; see EventsConfig and package events.
	Events *EventsConfig
}

// EventsConfig configures the KV-event publisher (package events).
type EventsConfig struct {
	// Endpoint is the PUB socket, e.g. "tcp://*:5557". As in vLLM, it binds
	// when it holds "*" or "::" (a wildcard host, "*" or "[::]", and as
	// vLLM's test is on the text, an IPv6 address written with "::", such
	// as "tcp://[::1]:5557") or is ipc://, and otherwise connects to a
	// subscriber that binds ("tcp://router:5557", "tcp://0.0.0.0:5557").
	// A bound port 0 ("tcp://*:0", "tcp://[::1]:0") picks a free one:
	// Manager.EventEndpoints says which; a connecting endpoint with port 0
	// ("tcp://127.0.0.1:0") is refused (events.ErrBadEndpoint), as nothing
	// listens there. New refuses an endpoint it cannot use, this one or
	// ReplayEndpoint, with a *ConfigError naming the field.
	Endpoint string
	// ReplayEndpoint, when set, is the ROUTER socket for replay (vLLM's
	// protocol) and snapshot requests.
	ReplayEndpoint string
	// Topic is each message's first frame (llm-d's indexer reads
	// "kv@<pod>@<model>").
	Topic string
	// Format is "map" (vLLM >= 0.24's events, the default) or "array"
	// (older vLLM's positional events).
	Format string
	// BufferSteps is how many batches replay keeps (default 10000);
	// QueueSize how many wait for a slow socket before one is dropped
	// (default 100000).
	BufferSteps, QueueSize int
	// SubscriberQueue is how many batches wait for one subscriber before
	// one is dropped for it alone (default 10000;
	// events.ServerConfig.SubscriberQueue): what a subscriber that reads
	// slowly, or not at all, can hold in memory, counted in
	// EventStats.SubscriberDrops when it overflows.
	SubscriberQueue int
	// Linger bounds how long Close waits for each subscriber to take the
	// batches queued for it (default 1 s; events.ServerConfig.Linger): a
	// subscriber that reads slowly, or not at all, delays Close by up to
	// this (or until Close's ctx ends, if sooner), and loses what it has
	// not taken by then.
	Linger time.Duration
	// DPRank is the batches' data-parallel rank.
	DPRank int
}

// ErrBadConfig is wrapped by every validation error of New, each a
// *ConfigError naming the field (errors.As).
var ErrBadConfig = errors.New("kvtier: bad config")

// ConfigError names the invalid field. New returns every invalid field's
// error joined (errors.Join); errors.As finds the first.
type ConfigError struct {
	Field  string // the field's path from Config, e.g. "Remote.TTL"
	Value  any    // the value refused
	Reason string // what the field must be
	// Err is the error of the package that refused Value (events.ErrBadConfig
	// for an unknown Events.Format), or nil.
	Err error
}

func (e *ConfigError) Error() string {
	return fmt.Sprintf("kvtier: config %s = %v: %s", e.Field, e.Value, e.Reason)
}

// Unwrap makes errors.Is(err, ErrBadConfig) hold, and errors.Is or As for
// e.Err.
func (e *ConfigError) Unwrap() []error {
	if e.Err == nil {
		return []error{ErrBadConfig}
	}
	return []error{ErrBadConfig, e.Err}
}

// withDefaults returns a copy of c with defaults filled in and the errors of every
// invalid field.
func (c Config) withDefaults() (Config, error) {
	var errs []error
	bad := func(field string, v any, reason string) {
		errs = append(errs, &ConfigError{Field: field, Value: v, Reason: reason})
	}
	// count fills a zero count with def and rejects a negative one.
	count := func(field string, v *int, def int, reason string) {
		if *v == 0 {
			*v = def
		} else if *v < 0 {
			bad(field, *v, reason)
		}
	}
	evictionPolicy := func(field string, k *policy.Kind) {
		if *k == 0 {
			*k = policy.Adaptive
		} else if !k.Valid() {
			bad(field, *k, "unknown policy")
		}
	}
	ingestion := func(field string, i *Ingestion) {
		switch *i {
		case 0:
			*i = IngestEvict
		case IngestEvict, IngestAll, IngestHot:
		default:
			bad(field, *i, "unknown ingestion policy")
		}
	}
	if c.GPUBlocks <= 0 {
		bad("GPUBlocks", c.GPUBlocks, "must be >= 1")
	} else if c.GPUBlocks > math.MaxInt32 { // blockpool.New's bound: block ids are int32
		bad("GPUBlocks", c.GPUBlocks, fmt.Sprintf("must be <= %d", math.MaxInt32))
	}
	count("BlockTokens", &c.BlockTokens, 16, "must be >= 1")
	if c.Model == (gpu.ModelSpec{}) {
		c.Model = gpu.TinySpec
	}
	if err := c.Model.Validate(); err != nil {
		bad("Model", c.Model, err.Error())
	}
	if c.Layout == 0 {
		c.Layout = gpu.BlockContiguous
	} else if !c.Layout.Valid() {
		bad("Layout", c.Layout, "unknown layout kind")
	}
	if c.VocabSize < 0 {
		bad("VocabSize", c.VocabSize, "must be >= 0")
	}
	if c.PinnedBytes < 0 {
		bad("PinnedBytes", c.PinnedBytes, "must be >= 0")
	}
	ingestion("Ingestion", &c.Ingestion)
	// Every disk field is checked, whether or not DiskDir enables the tier.
	evictionPolicy("DiskPolicy", &c.DiskPolicy)
	ingestion("DiskIngestion", &c.DiskIngestion)
	if c.PinnedPolicy == 0 && (c.DiskDir != "" || c.Remote != nil) && c.DiskIngestion == IngestEvict {
		c.PinnedPolicy = policy.LRU // it drains to the tier below: see the field's doc
	}
	evictionPolicy("PinnedPolicy", &c.PinnedPolicy)
	count("DiskWriteQuota", &c.DiskWriteQuota, DefaultDiskWriteQuota, "must be >= 1")
	if e := c.Events; e != nil {
		if e.Endpoint == "" {
			bad("Events.Endpoint", e.Endpoint, "needs a ZMQ endpoint such as tcp://*:5557")
		}
		if _, err := events.ParseFormat(e.Format); err != nil {
			errs = append(errs, &ConfigError{Field: "Events.Format", Value: e.Format, Reason: "must be map or array", Err: err})
		}
		for _, f := range [...]struct {
			name string
			v    int
		}{{"Events.BufferSteps", e.BufferSteps}, {"Events.QueueSize", e.QueueSize}, {"Events.SubscriberQueue", e.SubscriberQueue}, {"Events.DPRank", e.DPRank}} {
			if f.v < 0 {
				bad(f.name, f.v, "must be >= 0")
			}
		}
		if e.Linger < 0 {
			bad("Events.Linger", e.Linger, "must be >= 0 (0: the default, 1s)")
		}
	}
	if c.Remote != nil && c.PinnedBytes == 0 {
		bad("Remote", c.Remote.Addrs, "the remote tier needs a pinned tier above it (PinnedBytes > 0)")
	}
	if r := c.Remote; r != nil {
		if len(r.Addrs) == 0 {
			bad("Remote", r.Addrs, "needs at least one server address")
		}
		if r.WriteQuotaBytes < 0 {
			bad("Remote.WriteQuotaBytes", r.WriteQuotaBytes, "must be >= 0 (0: 256 MiB)")
		}
		if r.ReadTimeout < 0 {
			bad("Remote.ReadTimeout", r.ReadTimeout, "must be >= 0 (0: 1s)")
		}
		// remote.New's own bounds, checked here so that a bad value is a
		// *ConfigError before New allocates anything.
		if r.TTL != 0 && r.TTL < time.Second {
			errs = append(errs, &ConfigError{Field: "Remote.TTL", Value: r.TTL, Reason: "must be >= 1s (0: 1h)", Err: remote.ErrBadConfig})
		}
		if r.ChunkBytes < 0 || r.ChunkBytes > remoteMaxChunkBytes {
			errs = append(errs, &ConfigError{Field: "Remote.ChunkBytes", Value: r.ChunkBytes, Reason: "must be in [1, 512 MiB] (0: 1 MiB)", Err: remote.ErrBadConfig})
		}
	}
	if c.DiskDir != "" {
		if c.PinnedBytes == 0 {
			bad("DiskDir", c.DiskDir, "the disk tier needs a pinned tier above it (PinnedBytes > 0)")
		}
		if c.DiskBytes <= 0 {
			bad("DiskBytes", c.DiskBytes, "must be > 0 with DiskDir")
		}
	} else if c.DiskBytes != 0 {
		bad("DiskBytes", c.DiskBytes, "set without DiskDir")
	}
	count("HotHits", &c.HotHits, 2, "must be >= 1")
	if c.OffloadThreshold == 0 {
		c.OffloadThreshold = 0.85
	} else if !(c.OffloadThreshold > 0 && c.OffloadThreshold <= 1) { // NaN too
		bad("OffloadThreshold", c.OffloadThreshold, "must be in (0, 1]")
	}
	count("OffloadAhead", &c.OffloadAhead, 64, "must be >= 1 (0: the default, 64)")
	count("WriteQuota", &c.WriteQuota, 256, "must be >= 1")
	count("MaxPendingCalls", &c.MaxPendingCalls, 4096, "must be >= 1")
	for _, ns := range metricsNamespaces(c.MetricsNamespaces) {
		if ns == tier.DefaultNamespace || ns == tier.OtherNamespace {
			bad("MetricsNamespaces", ns, "a built-in label value: requests without a salt are \"default\", unlisted salts \"other\"")
		}
	}
	count("DoubleGetMinBlocks", &c.DoubleGetMinBlocks, 1, "must be >= 1")
	if !(c.DoubleGetMinRatio >= 0 && c.DoubleGetMinRatio <= 1) { // NaN too
		bad("DoubleGetMinRatio", c.DoubleGetMinRatio, "must be in [0, 1]")
	}
	if c.ReadDeadlineBase == 0 {
		c.ReadDeadlineBase = 50 * time.Millisecond
	}
	if c.ReadDeadlinePerToken == 0 {
		c.ReadDeadlinePerToken = 20 * time.Microsecond
	}
	if c.ReadDeadlineBase < 0 || c.ReadDeadlinePerToken < 0 {
		c.ReadDeadlineBase, c.ReadDeadlinePerToken = 0, 0
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	if len(errs) == 0 {
		errs = c.checkGeometry()
	}
	return c, errors.Join(errs...)
}

// checkGeometry checks the sizes the tiers derive from the block layout: the GPU
// arena fits in memory addresses, and each lower tier holds at least one block.
func (c Config) checkGeometry() []error {
	l, err := gpu.NewLayoutKind(c.Model, c.BlockTokens, c.Layout)
	if err != nil {
		// Model and Layout were checked alone: a block too large for an int
		// is BlockTokens' fault as much as the model's.
		return []error{&ConfigError{Field: "BlockTokens", Value: c.BlockTokens, Reason: fmt.Sprintf("blocks of %d tokens of model %v: %v", c.BlockTokens, c.Model, err), Err: err}}
	}
	bb := int64(l.BlockBytes())
	var errs []error
	if bb > math.MaxInt/int64(c.GPUBlocks) {
		errs = append(errs, &ConfigError{Field: "GPUBlocks", Value: c.GPUBlocks, Reason: fmt.Sprintf("%d blocks of %d bytes overflow the address space", c.GPUBlocks, bb)})
	}
	page := int64(os.Getpagesize())
	if stride := (bb + page - 1) / page * page; c.PinnedBytes > 0 && c.PinnedBytes/stride < 1 {
		errs = append(errs, &ConfigError{Field: "PinnedBytes", Value: c.PinnedBytes, Reason: fmt.Sprintf("less than one %d-byte pinned slot", stride)})
	} else if c.PinnedBytes/stride > math.MaxInt32 { // pinned.New's bound
		errs = append(errs, &ConfigError{Field: "PinnedBytes", Value: c.PinnedBytes, Reason: fmt.Sprintf("more than %d pinned slots of %d bytes", math.MaxInt32, stride)})
	}
	if slot := disk.SlotBytes(int(bb)); c.DiskDir != "" && (slot <= 0 || c.DiskBytes/slot < 1) {
		errs = append(errs, &ConfigError{Field: "DiskBytes", Value: c.DiskBytes, Reason: fmt.Sprintf("less than one %d-byte disk slot", slot)})
	} else if c.DiskDir != "" && c.DiskBytes/slot > disk.MaxSlots {
		errs = append(errs, &ConfigError{Field: "DiskBytes", Value: c.DiskBytes, Reason: fmt.Sprintf("more than %d disk slots of %d bytes", disk.MaxSlots, slot), Err: disk.ErrInvalidConfig})
	}
	if r := c.Remote; r != nil && r.WriteQuotaBytes > 0 && r.WriteQuotaBytes < bb {
		errs = append(errs, &ConfigError{Field: "Remote.WriteQuotaBytes", Value: r.WriteQuotaBytes, Reason: fmt.Sprintf("less than one %d-byte block: every write would be denied", bb)})
	}
	return errs
}

// Clock tells the time (Config.Clock).
type Clock interface {
	Now() time.Time
}

// clockFunc returns c.Now, or nil (the wall clock) for no Clock.
func clockFunc(c Clock) func() time.Time {
	if c == nil {
		return nil
	}
	return c.Now
}
