package kvtier

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/cespare/xxhash/v2"
	"go.uber.org/zap"

	"github.com/kvtier/kvtier/actors"
	"github.com/kvtier/kvtier/blockpool"
	"github.com/kvtier/kvtier/disk"
	"github.com/kvtier/kvtier/events"
	"github.com/kvtier/kvtier/gpu"
	"github.com/kvtier/kvtier/messages"
	"github.com/kvtier/kvtier/pinned"
	"github.com/kvtier/kvtier/prefixhash"
	"github.com/kvtier/kvtier/remote"
)

// Request and result types, shared with the actors. They are aliases: their
// fields are documented in package messages (go doc
// github.com/kvtier/kvtier/messages AllocRequest), and in BlockID's case in
// package blockpool.
type (
	AllocRequest   = messages.AllocRequest
	AllocResult    = messages.AllocResult
	AppendItem     = messages.AppendItem
	CommitItem     = messages.CommitItem
	OnboardOutcome = messages.OnboardOutcome
	TierStats      = messages.TierStats
	Tier           = messages.Tier       // a tier, or a set of them: GPU, Pinned, Disk, Remote
	TierTokens     = messages.TierTokens // tokens per tier, indexed by Tier.Index
	BlockID        = blockpool.BlockID
)

// The tiers, top first; results count tokens in a TierTokens of NumTiers
// entries, indexed by Tier.Index.
const (
	GPU      = messages.GPU
	Pinned   = messages.Pinned
	Disk     = messages.Disk
	Remote   = messages.Remote
	NumTiers = messages.NumTiers
)

var (
	// ErrClosed is returned by every call after Close, and wrapped by every
	// tier's answer to work still in flight or waiting when Close stopped it
	// (a flush, an allocation waiting for the index, a disk write): one error
	// for a stopped Manager, whichever tier answers.
	ErrClosed = messages.ErrStopped
	// ErrStopped is ErrClosed, under the name the tiers use.
	ErrStopped = ErrClosed
	// ErrTooLong rejects a prompt longer than its MaxSeqLen without Truncate.
	ErrTooLong = actors.ErrTooLong
	// ErrNoSpace (errors.Is) reports too few free GPU blocks; see *blockpool.NoSpaceError.
	ErrNoSpace = blockpool.ErrNoSpace
	// ErrNoLowerTier rejects Swap on a Manager with no pinned tier.
	ErrNoLowerTier = errors.New("kvtier: no tier below the GPU")
	// ErrCanceled says a call's context ended before the call took effect:
	// nothing changed. It wraps the context's error. A call whose context
	// ends after the actor took it is applied in full and answered normally.
	ErrCanceled = messages.ErrCanceled
	// ErrNotDurable says Delete dropped blocks from every tier in memory but
	// could not scrub a disk record (after a crash it may come back), could
	// not reach a stopped tier (ErrTierDown): the disk's records, or the
	// remote tier's copies, which other nodes may still serve; or the remote
	// tier's delete failed (remote.ErrUnavailable, a timeout).
	ErrNotDurable = errors.New("kvtier: delete not durable on the disk or shared tier")
	// ErrFailed says the GPU actor failed (it panicked, a defect): its tier
	// stopped, every call still waiting on it and every later call fails
	// with ErrFailed instead of waiting for an answer that cannot come, and
	// the Manager must be closed. What it served before is unaffected, and
	// what lower tiers stored stays valid, but Close then flushes nothing:
	// writes still queued below the GPU may be lost.
	ErrFailed = messages.ErrFailed
	// ErrNilContext rejects a call made with a nil context.
	ErrNilContext = errors.New("kvtier: nil context")
	// ErrNotReady rejects a Commit for a sequence whose Ready has not
	// completed (its blocks may still be loading).
	ErrNotReady = actors.ErrNotReady
	// ErrBadCommit rejects a Commit of more tokens than the sequence holds,
	// or of a negative count other than AllTokens.
	ErrBadCommit = blockpool.ErrBadCommit
	// ErrUnknownSequence rejects a call naming a sequence the Manager does
	// not hold (never allocated, or already freed): Commit, Append, Free.
	ErrUnknownSequence = blockpool.ErrUnknownSequence
	// ErrSequenceExists rejects an Allocate of a sequence id still held
	// (not yet freed).
	ErrSequenceExists = blockpool.ErrSequenceExists
	// ErrEmptySequence rejects an Allocate with no tokens.
	ErrEmptySequence = blockpool.ErrEmptySequence
	// ErrTokenOutOfRange rejects a token id outside [0, Config.VocabSize)
	// where VocabSize is set: in an allocation or append, and in a query
	// (Exists, Lookup, Delete, Prefetch), which then changes nothing.
	ErrTokenOutOfRange = blockpool.ErrTokenOutOfRange
	// ErrBadArgument rejects a malformed argument, e.g. a batch naming one
	// sequence twice or a negative lookahead.
	ErrBadArgument = blockpool.ErrBadArgument
	// ErrTierDown says a call needed the actor of a tier below the GPU (or
	// of the index or the event publisher) that stopped for good: it kept
	// failing, and protoactor stopped it. The tiers above answered what
	// waited on it and serve without it; the Manager goes on. Calls that
	// only read (Lookup, Stats, Flush) skip such a tier; Delete returns
	// ErrNotDurable wrapping it when the disk or remote tier is down, as
	// their copies could not be removed; EventsSeq returns it when an actor
	// on the events' way (pinned, index, publisher) is down.
	ErrTierDown = errors.New("kvtier: a tier's actor stopped after repeated failures")
)

// AllTokens as a Commit count commits every token the sequence holds.
const AllTokens = blockpool.AllTokens

// Manager is kvtier's embeddable KV-cache manager. See the package doc.
type Manager struct {
	cfg      Config
	system   *actor.ActorSystem
	ownSys   bool
	device   gpu.Device
	ownDev   bool
	arena    gpu.Arena
	pinned   *pinned.Pool
	store    *disk.Store // handed to the disk actor, which closes it
	diskRep  disk.OpenReport
	gpuPID   *actor.PID
	pinPID   *actor.PID
	idxPID   *actor.PID
	diskPID  *actor.PID
	remPID   *actor.PID     // the shared remote tier's actor, when configured
	tiers    []tierActor    // the configured tiers, top first, with their actors
	lowPID   *actor.PID     // fans the pinned tier's writes and reads out to disk and remote
	remote   *remote.Store  // for Delete and Lookup, called on the caller's goroutine (it is stateless)
	evPID    *actor.PID     // the KV-event publisher, with Config.Events
	evServer *events.Server // its sockets
	disps    []*actors.Dedicated
	layout   gpu.Layout
	layoutFP string // the layout part of every namespace
	done     chan struct{}
	stopped  chan struct{} // closed once Close has stopped every actor
	failed   chan struct{} // closed once the GPU actor failed (ErrFailed)
	failOnce sync.Once
	metrics  *metricsSet   // nil without Config.Registerer
	baseNS   string        // the namespace key with no salt and no LoRA
	closeMu  chan struct{} // one Close at a time
	calls    chan struct{} // a slot per call in flight (Config.MaxPendingCalls)
	// down holds, by actor id, a channel closed once that actor (any but
	// the GPU's) stopped: the watcher actor closes it on Terminated. The
	// map is written before the watcher starts and only read afterwards.
	down    map[string]chan struct{}
	watcher *actor.PID
}

// tierActor is a configured tier and the actor that owns it.
type tierActor struct {
	tier Tier
	pid  *actor.PID
}

// New validates cfg, allocates the tiers and starts the actors.
func New(cfg Config) (*Manager, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	layout, err := gpu.NewLayoutKind(c.Model, c.BlockTokens, c.Layout)
	if err != nil {
		return nil, &ConfigError{Field: "Model", Value: c.Model, Reason: err.Error()}
	}
	if cfg.Model == (gpu.ModelSpec{}) && (c.PinnedBytes > 0 || c.DiskDir != "" || c.Remote != nil) {
		c.Logger.Warn("kvtier: Config.Model is unset: blocks are sized for the toy gpu.TinySpec (64 bytes a token), not the served model; set Model (e.g. gpu.Llama3_8B) so the pinned, disk and remote tiers hold real KV",
			zap.Int("block_bytes", layout.BlockBytes()))
	}
	// Digests only for tiers below the GPU: every lower tier hangs under the
	// pinned one.
	pcfg := blockpool.Config{NumBlocks: c.GPUBlocks, BlockSize: c.BlockTokens, VocabSize: c.VocabSize, Digests: c.PinnedBytes > 0, Journal: c.Events != nil}
	// The pool's slices are made with make, whose failure kills the process:
	// refuse sizes no machine of this memory backs, with an error.
	if mem, ok := gpu.SystemMemory(); ok && uint64(blockpool.MetadataBytes(pcfg)) > mem {
		return nil, &ConfigError{Field: "GPUBlocks", Value: c.GPUBlocks, Err: gpu.ErrOutOfMemory,
			Reason: fmt.Sprintf("the block pool's metadata for %d blocks of %d tokens needs %d bytes, the machine has %d (RAM + swap)",
				c.GPUBlocks, c.BlockTokens, blockpool.MetadataBytes(pcfg), mem)}
	}
	m := &Manager{cfg: c, layout: layout, done: make(chan struct{}), stopped: make(chan struct{}), failed: make(chan struct{}), closeMu: make(chan struct{}, 1), calls: make(chan struct{}, c.MaxPendingCalls),
		layoutFP: fmt.Sprintf("%016x", fingerprint(c, layout))}
	m.baseNS = prefixhash.Namespace{Model: c.ModelID, Layout: m.layoutFP}.Key()
	if m.device = c.Device; m.device == nil {
		if m.device, err = gpu.Default(); err != nil {
			return nil, fmt.Errorf("kvtier: opening the device: %w", err)
		}
		m.ownDev = true
	}
	fail := func(err error) (*Manager, error) {
		if m.evPID != nil { // before its sockets close
			_ = m.system.Root.StopFuture(m.evPID).Wait()
		}
		if m.metrics != nil {
			m.metrics.unregister()
		}
		m.release(context.Background())
		return nil, err
	}
	if m.arena, err = m.device.NewKVArena(layout, c.GPUBlocks); err != nil {
		return fail(fmt.Errorf("kvtier: GPU arena of %d x %d bytes: %w", c.GPUBlocks, layout.BlockBytes(), err))
	}
	// After the arena, which is larger and fails with an error when it
	// cannot be had.
	pool, err := blockpool.New(pcfg)
	if err != nil { // checked by withDefaults: not expected
		return fail(&ConfigError{Field: "GPUBlocks", Value: c.GPUBlocks, Reason: err.Error(), Err: err})
	}
	stream, err := m.device.NewStream(m.arena)
	if err != nil {
		return fail(fmt.Errorf("kvtier: GPU stream: %w", err))
	}
	if c.PinnedBytes > 0 {
		m.pinned, err = pinned.New(pinned.Config{CapacityBytes: c.PinnedBytes, SlotBytes: layout.BlockBytes(), Policy: c.PinnedPolicy, Lock: c.PinnedLock,
			Alloc: pinned.DeviceAlloc(m.device)}) // copy targets must be the device's host memory (cuMemAllocHost on CUDA)
		if err != nil { // a valid size the device cannot back (pinned.ErrAlloc)
			return fail(&ConfigError{Field: "PinnedBytes", Value: c.PinnedBytes, Reason: err.Error(), Err: err})
		}
	}
	if m.system = c.System; m.system == nil {
		quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
		// Dead letters (calls racing Close reach stopped actors) start a
		// throttle goroutine that lives one interval: short, so that none
		// outlives Close by more than a moment (goleak checks after Close).
		m.system = actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return quiet }),
			actor.WithDeadLetterThrottleInterval(10*time.Millisecond))
		m.ownSys = true
	}
	root := m.system.Root
	var observe messages.LinkObserver
	if c.Registerer != nil {
		// Registered before the disk tier opens, so that a Registerer that
		// refuses them fails New before any slot file exists. Scrapes
		// before New returns see no tier series (metricsSet.m is unset).
		x := newMetrics(c.Registerer, layout.BlockBytes())
		if err := x.register(); err != nil {
			return fail(err)
		}
		m.metrics, observe = x, x.observe
	}
	gcfg := actors.GPUConfig{
		Pool: pool, Arena: m.arena, Stream: stream,
		Ingestion: c.Ingestion, HotHits: c.HotHits,
		OffloadThreshold: c.OffloadThreshold, OffloadAhead: c.OffloadAhead, SerialOffloads: c.SerialOffloads,
		DoubleGetMinBlocks: c.DoubleGetMinBlocks, DoubleGetMinRatio: c.DoubleGetMinRatio,
		ReadBase: c.ReadDeadlineBase, ReadPerToken: c.ReadDeadlinePerToken,
		Log: c.Logger.Named("gpu"), Clock: clockFunc(c.Clock),
		Observe: observe, Namespaces: metricsNamespaces(c.MetricsNamespaces),
	}
	gcfg.OnFailure = func() { m.failOnce.Do(func() { close(m.failed) }) }
	if e := c.Events; e != nil {
		format, _ := events.ParseFormat(e.Format) // checked by withDefaults
		// Each run numbers its batches from the wall clock in nanoseconds,
		// above every earlier run's: a subscriber of the previous run sees
		// the restart as a gap and resynchronises from a snapshot.
		pub := events.NewPublisher(events.Config{Format: format, BlockSize: c.BlockTokens, DPRank: e.DPRank, BufferSteps: e.BufferSteps,
			FirstSeq: uint64(time.Now().UnixNano())})
		src := actors.NewEventsSource(m.system)
		if m.evServer, err = events.Listen(events.ServerConfig{Endpoint: e.Endpoint, ReplayEndpoint: e.ReplayEndpoint, Topic: e.Topic, QueueSize: e.QueueSize, SubscriberQueue: e.SubscriberQueue, Linger: e.Linger}, src); err != nil {
			if ee, ok := errors.AsType[*events.EndpointError](err); ok {
				field := "Events.Endpoint"
				if ee.Socket == "ROUTER" {
					field = "Events.ReplayEndpoint"
				}
				return fail(&ConfigError{Field: field, Value: ee.Endpoint, Reason: ee.Err.Error(), Err: err})
			}
			return fail(&ConfigError{Field: "Events", Value: e.Endpoint, Reason: err.Error(), Err: err})
		}
		m.evPID = root.Spawn(m.props(actors.NewEventsActor(actors.EventsConfig{Publisher: pub, Server: m.evServer, Log: c.Logger.Named("events")})))
		src.Bind(m.evPID)
		gcfg.Events = m.evPID
	}
	if c.Remote != nil {
		r := c.Remote
		m.remote, err = remote.New(remote.Config{Addrs: r.Addrs, Cluster: r.Cluster, Username: r.Username, Password: r.Password, TLS: r.TLS,
			Prefix: r.Prefix, TTL: r.TTL, ChunkBytes: r.ChunkBytes, PayloadBytes: layout.BlockBytes(), Fingerprint: fingerprint(c, layout), Log: c.Logger.Named("remote")})
		if err != nil { // checked by withDefaults: not expected
			return fail(&ConfigError{Field: "Remote", Value: r.Addrs, Reason: err.Error(), Err: err})
		}
		if perr := m.remote.Ping(context.Background()); perr != nil { // not fatal: misses until it answers
			c.Logger.Warn("kvtier remote tier: server not answering yet", zap.Error(perr))
		}
		m.remPID = root.Spawn(m.props(actors.NewRemoteActor(actors.RemoteConfig{Store: m.remote,
			WriteQuotaBytes: r.WriteQuotaBytes, ReadTimeout: r.ReadTimeout, Log: c.Logger.Named("remote"), Observe: observe, Events: m.evPID,
			Clock: clockFunc(c.Clock)})))
	}
	// The disk tier last of the parts that can fail: a failed Open removes
	// the slot files it created, but a later failure would leave them.
	if c.DiskDir != "" {
		m.store, m.diskRep, err = disk.Open(disk.Config{Dir: c.DiskDir, CapacityBytes: c.DiskBytes, PayloadBytes: layout.BlockBytes(),
			Fingerprint: fingerprint(c, layout), Policy: c.DiskPolicy, Sync: c.DiskSync, FS: c.DiskFS, Logger: c.Logger.Named("disk")})
		if err != nil {
			return fail(fmt.Errorf("kvtier: disk tier: %w", err))
		}
		c.Logger.Info("kvtier disk tier opened", zap.String("dir", c.DiskDir), zap.Int("records", m.diskRep.Records),
			zap.Int("dropped", m.diskRep.DroppedTotal()), zap.Duration("reopen", m.diskRep.Duration), zap.Stringer("io", m.store.Mode()))
	}
	var diskMisses bool
	if m.pinned != nil {
		order := []Tier{Pinned}
		if m.store != nil {
			order = append(order, Disk)
		}
		prod, err := actors.NewIndexActor(actors.IndexConfig{Log: c.Logger.Named("index"), Tiers: order, Remote: m.remPID, Events: m.evPID})
		if err != nil { // cannot happen: the list is built here
			panic(err.Error())
		}
		m.idxPID = root.Spawn(m.props(prod))
		pcfg := actors.PinnedConfig{
			Pool: m.pinned, Index: m.idxPID, WriteQuota: c.WriteQuota, Log: c.Logger.Named("pinned"), Clock: clockFunc(c.Clock),
			DiskIngestion: c.DiskIngestion, HotHits: c.HotHits, FreeTarget: freeTarget(c.OffloadAhead, m.pinned.NumSlots()),
		}
		if m.store != nil {
			prod, err := actors.NewDiskActor(actors.DiskConfig{Store: m.store, Index: m.idxPID, WriteQuota: c.DiskWriteQuota, Log: c.Logger.Named("disk"), Clock: clockFunc(c.Clock), Observe: observe})
			if err != nil { // cannot happen: every field is set and checked above
				panic("kvtier: disk actor config: " + err.Error())
			}
			diskMisses = m.store.ObservesMisses()
			m.diskPID = root.Spawn(m.props(prod))
			m.store = nil // the actor owns it now
			pcfg.Disk = m.diskPID
		}
		switch {
		case m.diskPID != nil && m.remPID != nil:
			// The fan-out restarts however often it fails, never stopping
			// for good: its books outlive a restart, and the slots it
			// lent the disk and remote actors come back only through it
			// (were it gone, the pinned tier could not tell when their
			// I/O on those slots ended).
			lp := m.props(actors.NewLowerActor(m.diskPID, m.remPID, m.idxPID, c.Logger.Named("lower")))
			m.lowPID = root.Spawn(lp.Configure(actor.WithGuardian(actor.NewRestartingStrategy())))
			pcfg.Disk, pcfg.LowerTiers = m.lowPID, Disk|Remote
		case m.remPID != nil:
			pcfg.Disk, pcfg.LowerTiers = m.remPID, Remote
		case m.diskPID != nil:
			pcfg.LowerTiers = Disk
		}
		m.pinPID = root.Spawn(m.props(actors.NewPinnedActor(pcfg)))
		gcfg.Pinned, gcfg.Index = m.pinPID, m.idxPID
		gcfg.ReportDemand = diskMisses
	}
	// The GPU actor runs on its senders' goroutines (see "Dispatch" in the
	// actors package doc): a call costs no goroutine hand-off, and the
	// caller's freshly hashed tokens stay in its core's cache. Measured with
	// `go run ./cmd/kvbench -suite replay -trace ../shared/traces/conversation_trace.jsonl`:
	// the Manager's cost per block over the direct core went from 1.93x to
	// 1.26x at 1,024 blocks on 2 cores (1.27x with one core either way).
	m.gpuPID = root.Spawn(actor.PropsFromProducer(actors.NewGPUActor(gcfg), actor.WithDispatcher(actor.NewSynchronizedDispatcher(300))))
	for _, ta := range [...]tierActor{{GPU, m.gpuPID}, {Pinned, m.pinPID}, {Disk, m.diskPID}, {Remote, m.remPID}} {
		if ta.pid != nil {
			m.tiers = append(m.tiers, ta)
		}
	}
	m.watchActors()
	if m.idxPID != nil {
		w := &actors.IndexWatch{GPU: m.gpuPID, Pinned: m.pinPID}
		if diskMisses {
			w.MissDisk = m.diskPID
		}
		root.Send(m.idxPID, w)
	}
	if m.diskPID != nil && m.diskRep.Records > 0 {
		if err := m.awaitReopened(); err != nil {
			_ = m.Close(context.Background())
			return nil, err
		}
	}
	if m.metrics != nil {
		m.metrics.m.Store(m)
	}
	c.Logger.Info("kvtier manager started", zap.Int("gpu_blocks", c.GPUBlocks), zap.Int("block_bytes", layout.BlockBytes()),
		zap.Int64("pinned_bytes", c.PinnedBytes), zap.Stringer("ingestion", c.Ingestion), zap.String("device", m.device.Name()))
	return m, nil
}

// awaitReopened returns once the prefix index knows the blocks the disk
// reopened, so that the first allocation after a restart finds them. The
// disk actor announces them to the index when it starts; a stats request
// to the disk, then one to the index, is the barrier: the disk answers
// after its start, and the index takes the announcement, sent before that
// answer, before a request sent after it. It gives up after
// reopenWaitLimit: both actors answer at once unless one has stopped.
func (m *Manager) awaitReopened() error {
	ctx, cancel := context.WithTimeout(context.Background(), reopenWaitLimit)
	defer cancel()
	for _, pid := range []*actor.PID{m.diskPID, m.idxPID} {
		req := &messages.StatsRequest{Reply: make(chan TierStats, 1)}
		if _, err := ask(ctx, m, pid, nil, req, req.Reply); err != nil {
			return fmt.Errorf("kvtier: waiting for the disk's records to reach the index: %w", err)
		}
	}
	return nil
}

// reopenWaitLimit bounds New's wait for the index to take the disk's
// reopened records.
const reopenWaitLimit = time.Minute

// props gives each actor a dedicated goroutine (see actors.Dedicated).
// watchActors starts the actor that watches every actor but the GPU's and
// closes m.down's channel of one that stopped, so that calls waiting on it
// return ErrTierDown instead of waiting for ever. Close stops it first: the
// others' orderly stops are not failures.
func (m *Manager) watchActors() {
	m.down = map[string]chan struct{}{}
	var pids []*actor.PID
	for _, pid := range []*actor.PID{m.pinPID, m.lowPID, m.diskPID, m.idxPID, m.remPID, m.evPID} {
		if pid != nil {
			pids = append(pids, pid)
			m.down[pid.Id] = make(chan struct{})
		}
	}
	if len(pids) == 0 {
		return
	}
	down, log := m.down, m.cfg.Logger
	m.watcher = m.system.Root.Spawn(actor.PropsFromFunc(func(ctx actor.Context) {
		switch msg := ctx.Message().(type) {
		case *actor.Started:
			for _, pid := range pids {
				ctx.Watch(pid)
			}
		case *actor.Stopping:
			for _, pid := range pids {
				ctx.Unwatch(pid)
			}
		case *actor.Terminated:
			if ch, ok := down[msg.Who.Id]; ok {
				select {
				case <-ch:
				default:
					log.Error("kvtier: an actor stopped after repeated failures; its tier is out of service", zap.String("actor", msg.Who.Id))
					close(ch)
				}
			}
		}
	}))
}

// downOf returns the channel closed once pid's actor stopped for good (nil,
// never ready, for the GPU actor's).
func (m *Manager) downOf(pid *actor.PID) chan struct{} {
	if pid == nil {
		return nil
	}
	return m.down[pid.Id]
}

// anyDown returns a channel closed once any of the three actors (nil: none)
// stopped for good, and the func that ends its goroutine (call it when done
// waiting).
func (m *Manager) anyDown(a, b, c *actor.PID) (<-chan struct{}, func()) {
	da, db, dc := m.downOf(a), m.downOf(b), m.downOf(c)
	if da == nil && db == nil && dc == nil {
		return nil, func() {}
	}
	out, stop := make(chan struct{}), make(chan struct{})
	go func() {
		select { // a nil channel is never ready
		case <-da:
		case <-db:
		case <-dc:
		case <-stop:
			return
		}
		close(out)
	}()
	return out, func() { close(stop) }
}

// tierDownErr is the error of a call whose actor, pid, stopped for good.
func tierDownErr(pid *actor.PID) error { return fmt.Errorf("%w (actor %s)", ErrTierDown, pid.Id) }

func (m *Manager) props(p actor.Producer) *actor.Props {
	d := actors.NewDedicated()
	m.disps = append(m.disps, d)
	return actor.PropsFromProducer(p, actor.WithDispatcher(d))
}

// Layout returns the KV layout of one block.
func (m *Manager) Layout() gpu.Layout { return m.layout }

// Arena returns the GPU arena holding the blocks, for the caller's kernels (and
// tests) to read and write block contents.
func (m *Manager) Arena() gpu.Arena { return m.arena }

// BlockTokens returns the tokens per block.
func (m *Manager) BlockTokens() int { return m.cfg.BlockTokens }

// Device returns the device the arena and its streams live on:
// Config.Device, or the one New opened when it was nil (closed by Close).
// An engine makes its commit fences for it (gpu.NewSignalFence(m.Device()),
// or on CUDA gpu.NewCUDAFence(m.Device(), ev)): the device's streams wait
// only on fences made for it, and CommitBatch refuses others with
// gpu.ErrBadFence.
func (m *Manager) Device() gpu.Device { return m.device }

// ask sends msg to pid and waits for a reply on reply, the context or Close.
// call, when not nil, is the request's cancellation handle: if the context
// ends first and the actor has not taken the request, it is withdrawn and the
// error wraps ErrCanceled (nothing changed); if the actor took it, ask waits
// for the reply, so an applied request is never reported as failed (the
// parts of it parked for blocks are withdrawn: answered with ErrCanceled,
// nothing of them changed). A request
// with a handle is read by the actor only until ask returns (withdrawn,
// answered, or its actor stopped), so it may carry the caller's slices.
func ask[T any](ctx context.Context, m *Manager, pid *actor.PID, call *messages.Call, msg any, reply chan T) (T, error) {
	return askDown(ctx, m, pid, m.downOf(pid), call, msg, reply)
}

// callable is what every call checks before it sends anything: a nil
// context, a closed Manager, a failed one, an ended context (for a
// state-changing call, wrapped in ErrCanceled). A call that answers without
// an actor (Swap and Prefetch without a pinned tier, EventsSeq without
// Config.Events) checks it too, so that it answers as every other call
// does.
func (m *Manager) callable(ctx context.Context, changing bool) error {
	if err := m.open(ctx); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return cancelErr(err, changing)
	}
	return nil
}

// open is callable less the context's end: a nil context, a closed
// Manager, a failed one.
func (m *Manager) open(ctx context.Context) error {
	if ctx == nil {
		return ErrNilContext
	}
	select {
	case <-m.done:
		return ErrClosed
	default:
	}
	select { // after done: a closed Manager says so, failed or not
	case <-m.failed:
		return ErrFailed
	default:
	}
	return nil
}

// askDown is ask, giving up with ErrTierDown once down is closed: pid's
// actor, or one that msg must pass through, stopped for good.
func askDown[T any](ctx context.Context, m *Manager, pid *actor.PID, down <-chan struct{}, call *messages.Call, msg any, reply chan T) (T, error) {
	var zero T
	if err := m.callable(ctx, call != nil); err != nil {
		return zero, err
	}
	select { // back-pressure: a slot per call in flight
	case m.calls <- struct{}{}:
	case <-ctx.Done():
		return zero, cancelErr(ctx.Err(), call != nil)
	case <-m.done:
		return zero, ErrClosed
	}
	defer func() { <-m.calls }()
	select {
	case <-down:
		return zero, tierDownErr(pid)
	default:
	}
	m.system.Root.Send(pid, msg)
	select {
	case r := <-reply:
		return r, nil
	case <-down: // its reply, if it sent one before stopping, is taken first
		select {
		case r := <-reply:
			return r, nil
		default:
			return zero, tierDownErr(pid)
		}
	case <-ctx.Done():
		if call == nil || call.Cancel() {
			return zero, cancelErr(ctx.Err(), call != nil)
		}
		// Taken: what of it waits parked for blocks is answered with
		// ErrCanceled (nothing of it changed), the rest as applied.
		call.Withdraw()
		m.system.Root.Send(pid, &messages.Withdraw{})
	case <-m.done:
		if call == nil || call.Cancel() {
			return zero, ErrClosed
		}
	case <-m.failed:
		if call == nil || call.Cancel() {
			return zero, ErrFailed
		}
	}
	select { // the actor took the request: its answer comes, or it stops or fails
	case r := <-reply:
		return r, nil
	case <-down:
		select {
		case r := <-reply:
			return r, nil
		default:
			return zero, tierDownErr(pid)
		}
	case <-m.stopped:
		return zero, ErrClosed
	case <-m.failed:
		return zero, ErrFailed
	}
}

// cancelErr wraps a context's error; for a state-changing call it also says
// that nothing took effect.
func cancelErr(err error, changing bool) error {
	if changing {
		return fmt.Errorf("%w: %w", ErrCanceled, err)
	}
	return err
}

// namespace is the key of a request's namespace: tenant salt, the Manager's
// model, the request's LoRA adapter and the KV layout.
func (m *Manager) namespace(salt, lora string) string {
	if salt == "" && lora == "" {
		return m.baseNS // the common case, computed once
	}
	return prefixhash.Namespace{Salt: salt, Model: m.cfg.ModelID, LoRA: lora, Layout: m.layoutFP}.Key()
}

// keysFor hashes each request's prompt (as the actor will truncate it) on the
// caller's goroutine, so the GPU actor never hashes a big prompt.
func (m *Manager) keysFor(reqs []AllocRequest) []*blockpool.Keys {
	keys := make([]*blockpool.Keys, len(reqs))
	for i, r := range reqs {
		t := r.Tokens
		if r.MaxSeqLen < 0 {
			continue // refused by the actor
		}
		if r.MaxSeqLen > 0 && len(t) > r.MaxSeqLen {
			if !r.Truncate {
				continue // refused by the actor
			}
			t = t[:r.MaxSeqLen]
		}
		keys[i] = blockpool.ComputeKeys(m.namespace(r.Salt, r.LoRA), t, m.cfg.BlockTokens, m.cfg.PinnedBytes > 0)
	}
	return keys
}

// AllocateBatch allocates several sequences in one message (one scheduler step).
// Per-request failures are in each result's Err; the error is for the call.
// A batch names each sequence once: a later request for a sequence an
// earlier one names fails with an error wrapping blockpool.ErrBadArgument
// (requests do not all run in order: those that wait for the index finish
// after the others).
func (m *Manager) AllocateBatch(ctx context.Context, reqs []AllocRequest) ([]AllocResult, error) {
	return m.allocateBatch(ctx, reqs, false)
}

// AllocateInOrder allocates several sequences in one message, first come,
// first served, as a scheduler admits a queue: in order, and once a request
// finds too few free GPU blocks (ErrNoSpace, a request larger than the
// whole GPU included), the ones after it are not tried: they hold no blocks
// and started no loads, so nothing need be freed and no load runs for
// nothing (with AllocateBatch, a later, smaller request can get blocks that
// a first-come-first-served scheduler then frees again). Those checked
// before any allocation keep their own errors (a repeated sequence,
// ErrTooLong, missing keys); every other one fails with ErrNoSpace, even
// one the pool would have refused for its arguments (ErrSequenceExists,
// ErrEmptySequence, ErrTokenOutOfRange): it was not tried. Those errors do
// not stop the ones after them. If the caller gives up (or the Manager
// closes) while a request waits for blocks, that request and the ones after
// it fail with ErrCanceled (ErrClosed); the ones before it stand. Every
// request waits for the batch's one lookup below, full GPU hits included,
// which AllocateBatch allocates at once. Otherwise as AllocateBatch.
func (m *Manager) AllocateInOrder(ctx context.Context, reqs []AllocRequest) ([]AllocResult, error) {
	return m.allocateBatch(ctx, reqs, true)
}

func (m *Manager) allocateBatch(ctx context.Context, reqs []AllocRequest, inOrder bool) ([]AllocResult, error) {
	owned := ownRequests(reqs)
	msg := &messages.AllocateBatch{Reqs: owned, Keys: m.keysFor(owned), InOrder: inOrder, Reply: make(chan *messages.AllocateBatchResult, 1)}
	r, err := ask(ctx, m, m.gpuPID, &msg.Call, msg, msg.Reply)
	if err != nil {
		return nil, err
	}
	for i := range r.Results {
		withCtxErr(ctx, &r.Results[i].Err)
	}
	return r.Results, r.Err
}

// withCtxErr makes the error of a part withdrawn when ctx ended (an
// ErrCanceled from the actor) wrap the context's error too, as a call
// canceled before the actor took it does.
func withCtxErr(ctx context.Context, err *error) {
	if *err != nil && errors.Is(*err, ErrCanceled) && ctx.Err() != nil && !errors.Is(*err, ctx.Err()) {
		*err = fmt.Errorf("%w: %w", *err, ctx.Err())
	}
}

// ownRequests copies requests for a message. Their token slices are shared,
// not copied: the actor reads them only while the call is in flight (see ask),
// which is the caller's side of the bargain (see "Ownership" in the package
// doc). A 512-token block's copy cost as much as the rest of its allocation.
func ownRequests(reqs []AllocRequest) []AllocRequest {
	return append([]AllocRequest(nil), reqs...)
}

func ownItems(items []AppendItem) []AppendItem {
	return append([]AppendItem(nil), items...)
}

// StepRequest is one scheduler step: Commit says what the last forward pass
// computed, Free ends sequences (finished, aborted or preempted for
// recompute), Append adds the tokens the step decoded, Allocate admits new
// sequences. The actor applies them in that order.
type StepRequest struct {
	Commit   []CommitItem
	Free     []uint64
	Append   []AppendItem
	Allocate []AllocRequest
	// AllocateInOrder allocates first come, first served, as
	// AllocateInOrder does; otherwise as AllocateBatch.
	AllocateInOrder bool
}

// StepResult answers Step: one error (or nil) per commit, freed sequence and
// append, the blocks each append took, and one result per allocation, in
// order.
type StepResult struct {
	CommitErrs []error
	FreeErrs   []error
	Appends    []AppendResult
	Allocs     []AllocResult
}

// Step is one scheduler step in one message. It is the cheapest way to drive
// the Manager from a scheduler. Its parts follow the rules of CommitBatch
// (fences checked), AppendBatch and AllocateBatch (each names a sequence
// once).
func (m *Manager) Step(ctx context.Context, req StepRequest) (StepResult, error) {
	allocs := ownRequests(req.Allocate)
	c := m.checkCommits(req.Commit) // as CommitBatch: a fence the device refuses commits nothing
	msg := &messages.StepBatch{Commit: c.send, Free: append([]uint64(nil), req.Free...),
		Append: ownItems(req.Append), Allocate: allocs, Keys: m.keysFor(allocs), AllocateInOrder: req.AllocateInOrder,
		Reply: make(chan *messages.StepResult, 1)}
	r, err := ask(ctx, m, m.gpuPID, &msg.Call, msg, msg.Reply)
	if err != nil {
		return StepResult{}, err
	}
	for i := range r.Append.Errs {
		withCtxErr(ctx, &r.Append.Errs[i])
	}
	for i := range r.Allocate.Results {
		withCtxErr(ctx, &r.Allocate.Results[i].Err)
	}
	return StepResult{CommitErrs: c.merge(r.Commit.Errs), FreeErrs: r.Free.Errs, Appends: appendResults(r.Append), Allocs: r.Allocate.Results}, nil
}

// Allocate allocates one sequence: its block table, leading hits shared,
// loads from lower tiers started (see the package doc). It fails, holding
// nothing and with a nil Ready, with ErrSequenceExists, ErrEmptySequence,
// ErrTokenOutOfRange, ErrTooLong, ErrBadArgument (a negative Lookahead or
// MaxSeqLen) or ErrNoSpace (a *blockpool.NoSpaceError: more blocks than the
// GPU has free once the offloads ahead of need it waits for are out, or
// than it has at all); and as every call with ErrCanceled, ErrClosed or
// ErrFailed. The sequence is held until Free, FreeBatch or Swap.
func (m *Manager) Allocate(ctx context.Context, req AllocRequest) (AllocResult, error) {
	res, err := m.AllocateBatch(ctx, []AllocRequest{req})
	if err != nil {
		return AllocResult{}, err
	}
	return res[0], res[0].Err
}

// Commit says that the first tokens tokens of sequence seq hold computed KV
// (vLLM's cache_blocks(num_computed_tokens)). Only committed blocks are ever
// hits for other sequences, written to lower tiers or swapped out. Call it
// once the KV is written (after the forward pass), or once the pass is
// enqueued, with CommitBatch naming its fence (see the package doc). It fails
// with ErrNotReady while the sequence's loads from lower tiers are in flight
// (a finishing load publishes its blocks), ErrBadCommit past the sequence's
// tokens or for a negative count other than AllTokens. A Ready that waits only for the evicted contents of reused blocks
// to be copied out does not refuse commits: as with loads, the engine must
// not write into its blocks before Ready completes, and no commit check can
// see a write.
func (m *Manager) Commit(ctx context.Context, seq uint64, tokens int) error {
	errs, err := m.CommitBatch(ctx, []CommitItem{{Seq: seq, Tokens: tokens}})
	if err != nil {
		return err
	}
	return errs[0]
}

// CommitBatch commits several sequences in one message. An item's After
// fence orders every copy of its blocks to a lower tier after the engine's
// compute: the copy stream waits for it. An item whose fence the device's
// streams cannot wait on (gpu.CheckFence: on CUDA, a fence that is neither
// a *gpu.CUDAFence nor a *gpu.SignalFence of the Manager's device) fails
// with gpu.ErrBadFence and commits nothing; the other items go ahead.
// The fence also makes loads into the sequence's blocks wait for that
// compute once the sequence is freed (the blocks it wrote and read). A
// refused item (ErrBadFence, ErrBadCommit) records no fence: an engine that
// frees the sequence while its pass still runs must wait for the pass first,
// or commit 0 tokens naming a fence the device accepts.
func (m *Manager) CommitBatch(ctx context.Context, items []CommitItem) ([]error, error) {
	c := m.checkCommits(items)
	msg := &messages.CommitBatch{Items: c.send, Reply: make(chan *messages.CommitBatchResult, 1)}
	r, err := ask(ctx, m, m.gpuPID, &msg.Call, msg, msg.Reply)
	if err != nil {
		return nil, err
	}
	return c.merge(r.Errs), r.Err
}

// checkedCommits are a batch's commits split by gpu.CheckFence: those to
// send, in order, and an error for each refused one.
type checkedCommits struct {
	send    []CommitItem
	refused []error // per item of the batch; nil when none is refused
}

// checkCommits refuses the items whose fence the device's streams cannot
// wait on (CommitBatch and Step alike), copying what it sends.
func (m *Manager) checkCommits(items []CommitItem) checkedCommits {
	var c checkedCommits
	for i, it := range items {
		if err := gpu.CheckFence(m.device, it.After); err != nil {
			if c.refused == nil {
				c.refused = make([]error, len(items))
			}
			c.refused[i] = fmt.Errorf("kvtier: commit of sequence %d: %w", it.Seq, err)
			continue
		}
		c.send = append(c.send, it)
	}
	return c
}

// merge places the actor's answers to the items sent, in order, among the
// refusals.
func (c checkedCommits) merge(errs []error) []error {
	if c.refused == nil {
		return errs // every item went: the actor's answer is in item order
	}
	j := 0
	for i, e := range c.refused {
		if e == nil && j < len(errs) {
			c.refused[i] = errs[j]
			j++
		}
	}
	return c.refused
}

// AppendResult answers one AppendItem: the blocks it took, which are the
// sequence's block table's new tail (none when the tokens fit in blocks it
// held), or its error.
type AppendResult struct {
	Blocks []BlockID
	Err    error
}

func appendResults(r *messages.AppendBatchResult) []AppendResult {
	out := make([]AppendResult, len(r.Errs))
	for i := range out {
		out[i] = AppendResult{Blocks: r.Blocks[i], Err: r.Errs[i]}
	}
	return out
}

// AppendBatch adds decoded tokens to several sequences in one message. A
// batch names each sequence once: a later item for a sequence an earlier
// one names fails with an error wrapping blockpool.ErrBadArgument and
// changes nothing (an item short of blocks waits while later ones go
// ahead, so two appends to one sequence could apply out of order).
func (m *Manager) AppendBatch(ctx context.Context, items []AppendItem) ([]AppendResult, error) {
	msg := &messages.AppendBatch{Items: ownItems(items), Reply: make(chan *messages.AppendBatchResult, 1)}
	r, err := ask(ctx, m, m.gpuPID, &msg.Call, msg, msg.Reply)
	if err != nil {
		return nil, err
	}
	for i := range r.Errs {
		withCtxErr(ctx, &r.Errs[i])
	}
	return appendResults(r), r.Err
}

// Append adds decoded tokens to one sequence and returns the blocks it took:
// the new tail of its block table, nil when the tokens fit in blocks it held.
// It appends all the tokens or none: it fails, changing nothing, with
// ErrUnknownSequence, ErrTokenOutOfRange or ErrNoSpace (too few free GPU
// blocks: it waits only for blocks an offload ahead of need is copying out,
// never for a Free). AppendBatch takes a Lookahead too.
func (m *Manager) Append(ctx context.Context, seq uint64, tokens []int64) ([]BlockID, error) {
	res, err := m.AppendBatch(ctx, []AppendItem{{Seq: seq, Tokens: tokens}})
	if err != nil {
		return nil, err
	}
	return res[0].Blocks, res[0].Err
}

// FreeBatch frees several sequences. Their committed blocks stay cached;
// blocks never committed are discarded. A sequence may be freed while work
// the engine enqueued still writes or reads its blocks (preempted or
// aborted with its forward pass in flight) only once that work was
// committed naming its fence (CommitBatch): a load into a freed block
// waits for the fence of the last commit that covered the block's tokens
// and for that of the last commit of each sequence freed while holding it
// (whose pass may still attend to it), and for nothing else. To free a
// sequence whose work in flight commits nothing (an abort), first commit
// the tokens already committed (0 will do) naming that work's fence: the
// commit changes nothing else, and loads into the blocks wait for it.
func (m *Manager) FreeBatch(ctx context.Context, seqs []uint64) ([]error, error) {
	msg := &messages.FreeBatch{Seqs: append([]uint64(nil), seqs...), Reply: make(chan *messages.FreeBatchResult, 1)}
	r, err := ask(ctx, m, m.gpuPID, &msg.Call, msg, msg.Reply)
	if err != nil {
		return nil, err
	}
	return r.Errs, r.Err
}

// Swap preempts sequences by swapping: their committed blocks that have no
// copy below the GPU yet are written down to pinned memory, and the sequences
// are freed. A later allocation of the same tokens finds the blocks on the GPU
// while they stay cached there, and in pinned memory after; uncommitted blocks
// (a prefill cut short) and the partial last block are recomputed. The
// write-downs are a cache's, not vLLM's swap space: as every write to a
// lower tier, one over Config.WriteQuota, or one pinned memory has no slot
// for, is denied and counted (TierStats.Denied), and its block stays on the
// GPU only, to be recomputed once evicted; the errors Swap returns say
// nothing of them. It returns ErrNoLowerTier, changing nothing, without a
// pinned tier.
func (m *Manager) Swap(ctx context.Context, seqs []uint64) ([]error, error) {
	if m.pinPID == nil {
		if err := m.callable(ctx, true /* changing */); err != nil {
			return nil, err
		}
		return nil, ErrNoLowerTier
	}
	msg := &messages.FreeBatch{Seqs: append([]uint64(nil), seqs...), Swap: true, Reply: make(chan *messages.FreeBatchResult, 1)}
	r, err := ask(ctx, m, m.gpuPID, &msg.Call, msg, msg.Reply)
	if err != nil {
		return nil, err
	}
	return r.Errs, r.Err
}

// Free frees one sequence (see FreeBatch): ErrUnknownSequence if it is not
// held.
func (m *Manager) Free(ctx context.Context, seq uint64) error {
	errs, err := m.FreeBatch(ctx, []uint64{seq})
	if err != nil {
		return err
	}
	return errs[0]
}

// Presence says how many leading tokens of a chain each tier holds, each
// tier's run counted from the chain's start. The remote tier is not asked
// (it answers no queries): its count is 0.
type Presence struct {
	Tokens TierTokens
}

// chainKeys hashes, in the namespace of salt and lora, a chain named by a
// query (Exists, Lookup, Delete, Prefetch), refusing tokens outside [0,
// Config.VocabSize) as an allocation does (ErrTokenOutOfRange): no block
// was ever cached under them, and a caller whose tokenizer disagrees with
// the Manager's model should hear so. It checks the call first (open), so
// that a nil context and a closed or failed Manager answer as in every
// other call, whatever the tokens; the context's end is left to the
// query's first ask.
func (m *Manager) chainKeys(ctx context.Context, tokens []int64, salt, lora string) (*blockpool.Keys, error) {
	if err := m.open(ctx); err != nil {
		return nil, err
	}
	if err := blockpool.CheckTokens(tokens, m.cfg.VocabSize); err != nil {
		return nil, err
	}
	return blockpool.ComputeKeys(m.namespace(salt, lora), tokens, m.cfg.BlockTokens, m.cfg.PinnedBytes > 0), nil
}

func hashes(k *blockpool.Keys) []uint64 {
	out := make([]uint64, len(k.Hashes))
	for i, x := range k.Hashes {
		out[i] = uint64(x)
	}
	return out
}

// Chain names a prompt's chain of blocks as an AllocRequest does: its
// tokens and the namespace they were allocated in (Salt and LoRA, under the
// Manager's model).
type Chain struct {
	Tokens []int64
	Salt   string
	LoRA   string
}

// Exists reports how many leading tokens of tokens each tier holds, verified
// (digest) in the namespace of salt and the Manager's model. It changes
// nothing. ExistsChain names a LoRA adapter too.
func (m *Manager) Exists(ctx context.Context, tokens []int64, salt string) (Presence, error) {
	return m.ExistsChain(ctx, Chain{Tokens: tokens, Salt: salt})
}

// ExistsChain is Exists for a chain allocated under a LoRA adapter too.
func (m *Manager) ExistsChain(ctx context.Context, c Chain) (Presence, error) {
	k, err := m.chainKeys(ctx, c.Tokens, c.Salt, c.LoRA)
	if err != nil {
		return Presence{}, err
	}
	return m.exists(ctx, c.Tokens, k, 0)
}

// exists asks each tier for its leading run of k's blocks from block from on.
func (m *Manager) exists(ctx context.Context, tokens []int64, k *blockpool.Keys, from int) (Presence, error) {
	var p Presence
	gpuTokens, err := m.gpuRun(ctx, tokens, k)
	if err != nil {
		return Presence{}, err
	}
	p.Tokens[GPU.Index()] = gpuTokens
	below := hashes(k)[from:]
	for _, ta := range m.tiers[1:] {
		lr, ok, err := m.queryTier(ctx, ta, messages.QueryExists, below, k.Digests[from:])
		if errors.Is(err, ErrTierDown) {
			continue // holds nothing that is served
		}
		if err != nil {
			return Presence{}, err
		}
		if ok {
			p.Tokens[ta.tier.Index()] = lr.Tokens.Of(ta.tier) * m.cfg.BlockTokens // it answers in blocks
		}
	}
	return p, nil
}

// gpuRun returns the tokens of k's leading blocks the GPU serves (hits, as
// an allocation verifies them).
func (m *Manager) gpuRun(ctx context.Context, tokens []int64, k *blockpool.Keys) (int, error) {
	q := &messages.Query{Kind: messages.QueryExists, Tokens: append([]int64(nil), tokens...), Keys: k, Reply: make(chan *messages.QueryResult, 1)}
	r, err := ask(ctx, m, m.gpuPID, &q.Call, q, q.Reply)
	if err != nil {
		return 0, err
	}
	if r.Err != nil {
		return 0, r.Err
	}
	return r.Tokens.Of(GPU), nil
}

// queryTier asks a tier below the GPU about a chain's blocks hs, whose prefix
// digests are ds. ok is false, and nothing asked, for a tier that answers no
// queries: the remote one, whose server evicts and expires on its own.
func (m *Manager) queryTier(ctx context.Context, ta tierActor, kind messages.QueryKind, hs []uint64, ds []prefixhash.Digest) (r *messages.QueryResult, ok bool, err error) {
	switch ta.tier {
	case Pinned:
		q := &messages.PinnedQuery{Kind: kind, Hashes: hs, Digests: ds, Reply: make(chan *messages.QueryResult, 1)}
		r, err = ask(ctx, m, ta.pid, nil, q, q.Reply)
	case Disk:
		q := &messages.LowerQuery{Kind: kind, Hashes: hs, Digests: digestArrays(ds), Reply: make(chan *messages.QueryResult, 1)}
		r, err = ask(ctx, m, ta.pid, nil, q, q.Reply)
	default:
		return nil, false, nil
	}
	return r, true, err
}

// LookupRequest names a prompt for Lookup, as an AllocRequest would.
type LookupRequest struct {
	Tokens []int64
	Salt   string
	LoRA   string
}

// LookupResult says what an allocation of the prompt would find now, per tier
// and in order: Tokens.Of(GPU) on the GPU, then Tokens.Below() more below it,
// each block counted for the first tier in order that holds it (pinned memory,
// then disk, then the shared remote tier), with the double-get thresholds
// applied (DoubleGetSkipped when they turned a lower hit away). It is a
// snapshot: blocks may move before an allocation, and a block the shared
// tier lists may still fail verification when it is read.
type LookupResult struct {
	Tokens           TierTokens
	DoubleGetSkipped bool
}

// Lookup reports the hit a prompt would get, per tier, without side effects:
// nothing is allocated, pinned, loaded or counted as a hit (vLLM's
// get_computed_blocks before admission). Below the GPU's hit it asks the
// index the question an allocation asks (which tier serves each block, the
// first in order that holds it, the shared tier, one round trip, for what
// the node's tiers lack), so a chain split between pinned memory, disk and
// the shared tier counts whole, as an allocation loads it.
//
// With a shared tier configured, Lookup waits for its answer, as an
// allocation does: on a server that is slow or hangs, up to
// RemoteConfig.ReadTimeout (default 1s), after which the shared tier counts
// 0 and Lookup answers with what the node holds. A context that ends first
// fails Lookup with the context's error (nothing changed): give Lookup at
// least ReadTimeout to have the node's own answer whatever the server does.
func (m *Manager) Lookup(ctx context.Context, req LookupRequest) (LookupResult, error) {
	k, err := m.chainKeys(ctx, req.Tokens, req.Salt, req.LoRA)
	if err != nil {
		return LookupResult{}, err
	}
	gpuTokens, err := m.gpuRun(ctx, req.Tokens, k)
	if err != nil {
		return LookupResult{}, err
	}
	var res LookupResult
	res.Tokens[GPU.Index()] = gpuTokens
	from := gpuTokens / m.cfg.BlockTokens
	if m.idxPID == nil || from >= len(k.Hashes) {
		return res, nil
	}
	q := &messages.Lookup{Chains: [][]uint64{hashes(k)[from:]}, Reply: make(chan *messages.LookupResult, 1)}
	if len(k.Digests) == len(k.Hashes) { // the shared tier is keyed by digest
		q.Digests = [][]prefixhash.Digest{k.Digests[from:]}
	}
	r, err := ask(ctx, m, m.idxPID, nil, q, q.Reply)
	if errors.Is(err, ErrTierDown) {
		return res, nil // the tiers below serve nothing without it
	}
	if err != nil {
		return LookupResult{}, err
	}
	if r.Unanswered || len(r.Tiers) != 1 {
		return res, nil
	}
	run := r.Tiers[0]
	for _, t := range run {
		res.Tokens[t.Index()] += m.cfg.BlockTokens
	}
	below, total := len(run), (len(req.Tokens)+m.cfg.BlockTokens-1)/m.cfg.BlockTokens
	if below > 0 && (below < m.cfg.DoubleGetMinBlocks || float64(below) < m.cfg.DoubleGetMinRatio*float64(total)) {
		res.Tokens = TierTokens{}
		res.Tokens[GPU.Index()] = gpuTokens
		res.DoubleGetSkipped = true
	}
	return res, nil
}

// Delete drops the chain's cached blocks from every tier (blocks held by live
// sequences stay with them on the GPU, but are no longer cached: never hits
// again, never written down, and counted among the copies dropped) and
// returns how many copies it dropped, summed
// over the tiers (the remote one included): a block cached on the GPU and
// in pinned memory counts twice, so a 3-block chain on both returns 6, not
// 3. On an error it returns the copies dropped until then.
// DeleteChain names a LoRA adapter too. A context that ends before the GPU
// actor took the delete changes nothing (ErrCanceled); once it took it, the
// delete runs to its end on every tier, whatever the context: a delete
// half done would leave the chain served from a tier below.
func (m *Manager) Delete(ctx context.Context, tokens []int64, salt string) (int, error) {
	return m.DeleteChain(ctx, Chain{Tokens: tokens, Salt: salt})
}

// DeleteChain is Delete for a chain allocated under a LoRA adapter too.
func (m *Manager) DeleteChain(ctx context.Context, c Chain) (int, error) {
	tokens := c.Tokens
	k, err := m.chainKeys(ctx, tokens, c.Salt, c.LoRA)
	if err != nil {
		return 0, err
	}
	q := &messages.Query{Kind: messages.QueryDelete, Tokens: append([]int64(nil), tokens...), Keys: k, Reply: make(chan *messages.QueryResult, 1)}
	r, err := ask(ctx, m, m.gpuPID, &q.Call, q, q.Reply)
	if err != nil {
		return 0, err
	}
	ctx = context.WithoutCancel(ctx) // applied on the GPU: the rest follows
	n, hs := r.Deleted, hashes(k)
	flush := func(pid *actor.PID) error { // waits for what the actor holds; its answer is not an error here
		if pid == nil {
			return nil
		}
		_, err := m.flushActor(ctx, pid)
		return err
	}
	for _, ta := range m.tiers[1:] {
		if ta.tier == Disk {
			// Drains the pinned tier started before its delete may still
			// wait in the fan-out to disk and remote: they reach the disk
			// first, so its delete finds them.
			if err := flush(m.lowPID); err != nil && !errors.Is(err, ErrTierDown) {
				return n, err
			}
		}
		lr, ok, err := m.queryTier(ctx, ta, messages.QueryDelete, hs, k.Digests)
		if errors.Is(err, ErrTierDown) {
			if ta.tier == Disk { // its records stay on disk, to be reopened
				return n, fmt.Errorf("%w: %w", ErrNotDurable, err)
			}
			continue // pinned memory: gone with the Manager
		}
		if err != nil {
			return n, err
		}
		if !ok {
			continue // the remote tier, below
		}
		n += lr.Deleted
		switch {
		case lr.Err != nil && ta.tier == Disk: // dropped in memory, but a header scrub failed: not durable
			return n, fmt.Errorf("%w: %w", ErrNotDurable, lr.Err)
		case lr.Err != nil:
			return n, fmt.Errorf("kvtier: delete from the %v tier: %w", ta.tier, lr.Err)
		}
	}
	if m.remPID != nil {
		// Writes of the chain already on their way (drains the pinned tier
		// started before its delete) land first: through the fan-out, then
		// at the remote actor; then the chain goes.
		for _, pid := range []*actor.PID{m.lowPID, m.remPID} {
			if err := flush(pid); err != nil && !errors.Is(err, ErrTierDown) {
				return n, err
			}
		}
		select {
		case <-m.downOf(m.remPID): // it closed the store when it stopped
			return n, fmt.Errorf("%w: the remote tier: %w", ErrNotDurable, ErrTierDown)
		default:
		}
		keys := make([]remote.Key, len(k.Digests))
		for i, d := range k.Digests {
			keys[i] = remote.Key{Digest: d}
		}
		rn, err := m.remote.Delete(ctx, keys)
		n += rn
		if m.evPID != nil && rn > 0 {
			// The remote actor announced the chain's writes (flushed
			// above); its removal is announced here, behind them.
			gone := &messages.Residency{Tier: messages.Remote, Changes: make([]messages.ResidencyChange, len(hs))}
			for i, h := range hs {
				gone.Changes[i] = messages.ResidencyChange{Hash: h}
			}
			m.system.Root.Send(m.evPID, gone)
		}
		if err != nil { // other nodes may still be served the chain from there
			return n, fmt.Errorf("%w: the remote tier: %w", ErrNotDurable, err)
		}
	}
	return n, nil
}

// Prefetch asks the tiers below the GPU to bring the chain up to pinned memory and
// returns how many leading tokens pinned memory holds. PrefetchChain names a
// LoRA adapter too.
func (m *Manager) Prefetch(ctx context.Context, tokens []int64, salt string) (int, error) {
	return m.PrefetchChain(ctx, Chain{Tokens: tokens, Salt: salt})
}

// PrefetchChain is Prefetch for a chain allocated under a LoRA adapter too.
func (m *Manager) PrefetchChain(ctx context.Context, c Chain) (int, error) {
	k, err := m.chainKeys(ctx, c.Tokens, c.Salt, c.LoRA)
	if err != nil {
		return 0, err
	}
	if m.pinPID == nil { // nothing to prefetch into: answered as a call is
		return 0, m.callable(ctx, false /* changing */)
	}
	pq := &messages.PinnedQuery{Kind: messages.QueryPrefetch, Hashes: hashes(k), Digests: k.Digests, Reply: make(chan *messages.QueryResult, 1)}
	pr, err := ask(ctx, m, m.pinPID, nil, pq, pq.Reply)
	if err != nil {
		return 0, err
	}
	return pr.Tokens.Of(Pinned) * m.cfg.BlockTokens, nil
}

// Flush waits until every write in flight when it was called has finished, tier
// by tier from the GPU down.
func (m *Manager) Flush(ctx context.Context) error {
	for _, ta := range m.tiers {
		r, err := m.flushActor(ctx, ta.pid)
		if errors.Is(err, ErrTierDown) {
			continue // what it held in flight was answered as not written
		}
		if err != nil {
			return err
		}
		if r != nil {
			return r
		}
	}
	return nil
}

// flushActor asks one actor for a Flush: reply is the actor's answer, err
// the call's own failure.
func (m *Manager) flushActor(ctx context.Context, pid *actor.PID) (reply, err error) {
	f := &messages.Flush{Reply: make(chan error, 1)}
	return ask(ctx, m, pid, nil, f, f.Reply)
}

// Stats are the Manager's per-tier counters.
type Stats struct {
	// Tiers holds the configured tiers' stats, top first: the GPU, then
	// pinned memory, disk and the remote tier when configured; each names
	// its Tier. Tier looks one up.
	Tiers       []TierStats
	IndexBlocks int // blocks the prefix index knows below the GPU
	// DiskOpen is what opening the disk tier found (records, dropped, time).
	DiskOpen disk.OpenReport
	// Events counts the KV-event stream, with Config.Events.
	Events *EventStats
}

// Tier returns tier t's stats. A tier the Manager was not configured with
// has none: its stats are zero, with Tier set to t, so callers need not ask
// first whether it exists.
func (s Stats) Tier(t Tier) TierStats {
	for _, ts := range s.Tiers {
		if ts.Tier == t {
			return ts
		}
	}
	return TierStats{Tier: t}
}

// EventStats counts the KV-event stream (see messages.EventStats).
type EventStats = messages.EventStats

// Stats returns a snapshot of every tier's counters.
func (m *Manager) Stats(ctx context.Context) (Stats, error) {
	s := Stats{Tiers: make([]TierStats, 0, len(m.tiers))}
	for _, ta := range m.tiers {
		req := &messages.StatsRequest{Reply: make(chan TierStats, 1)}
		ts, err := ask(ctx, m, ta.pid, nil, req, req.Reply)
		if errors.Is(err, ErrTierDown) {
			ts, err = TierStats{Tier: ta.tier, Down: true}, nil
		}
		if err != nil {
			return s, err
		}
		s.Tiers = append(s.Tiers, ts)
	}
	if m.idxPID != nil {
		req := &messages.StatsRequest{Reply: make(chan TierStats, 1)}
		ix, err := ask(ctx, m, m.idxPID, nil, req, req.Reply)
		if err != nil && !errors.Is(err, ErrTierDown) {
			return s, err
		}
		s.IndexBlocks = ix.UsedBlocks
	}
	if m.diskPID != nil {
		s.DiskOpen = m.diskRep
	}
	if m.evPID != nil {
		req := &messages.EventsStatsRequest{Reply: make(chan EventStats, 1)}
		ev, err := ask(ctx, m, m.evPID, nil, req, req.Reply)
		switch {
		case errors.Is(err, ErrTierDown): // no stream: no stats
		case err != nil:
			return s, err
		default:
			s.Events = &ev
		}
	}
	return s, nil
}

// Close flushes in-flight writes (bounded by ctx; none after ErrFailed), stops
// the actors and releases memory. It writes nothing more down: blocks only
// the GPU or pinned memory holds are lost, so after a restart the disk
// serves what reached it before Close (under the default DiskIngestion the
// pinned tier's victims drained by then; under IngestAll every block pinned
// memory took, less writes DiskWriteQuota denied). ctx bounds too the wait for event
// subscribers to take their batches (EventsConfig.Linger). Calls in flight end with ErrClosed or their
// result; later calls return ErrClosed. A second Close returns ErrClosed.
func (m *Manager) Close(ctx context.Context) error {
	if ctx == nil {
		return ErrNilContext
	}
	select {
	case <-m.done:
		return ErrClosed
	case m.closeMu <- struct{}{}:
	}
	defer func() { <-m.closeMu }()
	select {
	case <-m.done:
		return ErrClosed
	default:
	}
	flushErr := m.Flush(ctx)
	if m.metrics != nil {
		m.metrics.unregister()
	}
	close(m.done)
	// Each actor stops before those it asks and watches (a watcher would
	// take the Terminated of an orderly stop for a failure), the publisher
	// last: it hears the others.
	for _, pid := range []*actor.PID{m.watcher, m.gpuPID, m.pinPID, m.lowPID, m.diskPID, m.idxPID, m.remPID, m.evPID} {
		if pid != nil {
			if err := m.system.Root.StopFuture(pid).Wait(); err != nil {
				m.cfg.Logger.Warn("kvtier: stopping an actor", zap.Error(err))
			}
		}
	}
	for _, d := range m.disps {
		d.Stop()
	}
	close(m.stopped) // no actor reads a request any more
	err := errors.Join(flushErr, m.release(ctx))
	if m.ownSys {
		m.system.Shutdown()
	}
	return err
}

// release frees memory in the reverse order of New; the arena's streams drain
// first, so no copy touches freed memory. ctx bounds the events server's
// wait for its subscribers (EventsConfig.Linger).
func (m *Manager) release(ctx context.Context) error {
	var errs []error
	if m.arena != nil {
		errs = append(errs, m.arena.Free())
	}
	if m.pinned != nil {
		// The actors are stopped and the arena's streams drained, so no copy
		// touches slot memory: whatever was in flight when Close came is dropped.
		errs = append(errs, m.pinned.Discard())
	}
	if m.store != nil { // opened, never handed to an actor
		errs = append(errs, m.store.Close())
	}
	if m.evServer != nil { // after its actor stopped: the batches queued go out first
		errs = append(errs, m.evServer.CloseContext(ctx))
	}
	if m.remote != nil && m.remPID == nil { // made, never handed to an actor
		errs = append(errs, m.remote.Close())
	}
	if m.ownDev && m.device != nil {
		errs = append(errs, m.device.Close())
	}
	return errors.Join(errs...)
}

// fingerprint names the block format on disk: a different model shape, model
// id, block size or hash scheme must not read another's records. The arena's
// layout kind is left out: records hold the block's host form under either.
func fingerprint(c Config, l gpu.Layout) uint64 {
	return xxhash.Sum64String(fmt.Sprintf("kvtier/%d/%+v/%d/%d/%q", prefixhash.SchemeVersion, c.Model, c.BlockTokens, l.BlockBytes(), c.ModelID))
}

// digestArrays converts prefix digests for messages that carry plain arrays.
func digestArrays(ds []prefixhash.Digest) [][32]byte {
	out := make([][32]byte, len(ds))
	for i, d := range ds {
		out[i] = d
	}
	return out
}

// freeTarget is how many pinned slots the pinned tier keeps free ahead of
// need, draining victims to the tier below: OffloadAhead or a sixteenth of
// the tier, but never more than a quarter of it, so that a small pinned tier
// still holds blocks to hit instead of draining everything.
func freeTarget(offloadAhead, slots int) int {
	return min(max(offloadAhead, slots/16), slots/4)
}
