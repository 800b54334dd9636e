package actors

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/kvtier/kvtier/disk"
	"github.com/kvtier/kvtier/messages"
)

const (
	testDiskPayload = 8 << 10 // 8 KiB payloads keep the slot files small
	testDiskSlots   = 32
	// testWait bounds every wait for a reply; it is a failsafe for a hung
	// actor, never a way to synchronise.
	testWait = 10 * time.Second
)

// gateFS wraps an FS so a test can hold one I/O in flight: after arm (or
// armWrite), the next read (write) signals entered and blocks until the test
// sends on release.
type gateFS struct {
	disk.FS
	hold, holdWrite atomic.Bool
	entered         chan struct{}
	release         chan struct{}
	// holdData, when set, holds the first read whose bytes contain it,
	// after the read (armData).
	holdData atomic.Pointer[[]byte]
}

// armData holds the next read that reads data, once it has read it.
func (g *gateFS) armData(data []byte) { g.holdData.Store(&data) }

// waitData holds a read that read the armed data.
func (f *gateFile) waitData(bufs ...[]byte) {
	d := f.g.holdData.Load()
	if d == nil || !slices.ContainsFunc(bufs, func(b []byte) bool { return bytes.Contains(b, *d) }) {
		return
	}
	if f.g.holdData.CompareAndSwap(d, nil) {
		f.g.entered <- struct{}{}
		<-f.g.release
	}
}

func newGateFS(inner disk.FS) *gateFS {
	return &gateFS{FS: inner, entered: make(chan struct{}, 1), release: make(chan struct{})}
}

func (g *gateFS) arm()      { g.hold.Store(true) }
func (g *gateFS) armWrite() { g.holdWrite.Store(true) }

// OpenFile implements disk.FS.
func (g *gateFS) OpenFile(name string, direct bool) (disk.File, error) {
	f, err := g.FS.OpenFile(name, direct)
	if err != nil {
		return nil, err
	}
	return &gateFile{File: f, g: g}, nil
}

type gateFile struct {
	disk.File
	g *gateFS
}

func (f *gateFile) wait(hold *atomic.Bool) {
	if hold.CompareAndSwap(true, false) {
		f.g.entered <- struct{}{}
		<-f.g.release
	}
}

func (f *gateFile) WriteAt(p []byte, off int64) (int, error) {
	f.wait(&f.g.holdWrite)
	return f.File.WriteAt(p, off)
}

func (f *gateFile) ReadAt(p []byte, off int64) (int, error) {
	f.wait(&f.g.hold)
	n, err := f.File.ReadAt(p, off)
	f.waitData(p)
	return n, err
}

// ReadvAt keeps the store's single-preadv read path.
func (f *gateFile) ReadvAt(bufs [][]byte, off int64) (int, error) {
	f.wait(&f.g.hold)
	defer f.waitData(bufs...)
	if v, ok := f.File.(disk.VectoredReader); ok {
		return v.ReadvAt(bufs, off)
	}
	n := 0
	for _, b := range bufs {
		k, err := f.File.ReadAt(b, off+int64(n))
		n += k
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// diskEnv is one disk actor under test with a recording index actor.
type diskEnv struct {
	t       *testing.T
	sys     *actor.ActorSystem
	dir     string
	fault   *disk.FaultFS
	gate    *gateFS
	quota   int
	workers int
	index   *actor.PID
	updates chan *messages.IndexUpdate
	pid     *actor.PID
	store   *disk.Store      // the actor's, read only once it stopped
	clock   func() time.Time // the actor's Clock (nil: time.Now)
	// writeFault is the actor's DiskConfig.writeFault, read at start.
	writeFault func(hash uint64)
	// observe is the actor's DiskConfig.Observe, read at start.
	observe messages.LinkObserver
}

// newDiskEnv opens a store in a fresh temp dir and starts a disk actor on it.
func newDiskEnv(t *testing.T, quota int) *diskEnv {
	t.Helper()
	return newDiskEnvClock(t, quota, nil)
}

// oneWorkerEnv is a disk actor with one I/O worker, blocks 1 and 2 written
// and announced: a second read queues behind a held first one.
func oneWorkerEnv(t *testing.T) *diskEnv {
	t.Helper()
	return oneWorker(newDiskEnv(t, 0))
}

// oneWorkerClockEnv is oneWorkerEnv on a clock the test sets (now,
// starting at t0): a queued read's deadline passes when the test moves the
// clock, not while the read is still on its way to the actor (a deadline
// 20 ms ahead on the wall clock sometimes passed before the actor got the
// read on a loaded machine, and the read was answered late at once, never
// queued).
func oneWorkerClockEnv(t *testing.T) (e *diskEnv, t0 time.Time, now *atomic.Pointer[time.Time]) {
	t.Helper()
	t0, now = testClock()
	return oneWorker(newDiskEnvClock(t, 0, func() time.Time { return *now.Load() })), t0, now
}

// oneWorker restarts e with one I/O worker and writes and announces blocks
// 1 and 2.
func oneWorker(e *diskEnv) *diskEnv {
	e.t.Helper()
	e.stop()
	e.workers = 1
	e.start()
	e.write(1, 2)
	e.flush()
	e.nextUpdate()
	return e
}

// clockDiskEnv is a disk actor on a clock the test sets (now, starting at
// t0), with blocks 1 and 2 written.
func clockDiskEnv(t *testing.T) (e *diskEnv, t0 time.Time, now *atomic.Pointer[time.Time]) {
	t.Helper()
	t0, now = testClock()
	e = newDiskEnvClock(t, 0, func() time.Time { return *now.Load() })
	e.write(1, 2)
	e.flush()
	return e, t0, now
}

// testClock is a clock a test sets, reading t0 until it does.
func testClock() (t0 time.Time, now *atomic.Pointer[time.Time]) {
	t0 = time.Unix(1e9, 0)
	now = new(atomic.Pointer[time.Time])
	now.Store(&t0)
	return t0, now
}

// passDeadlines moves now an hour on: every read deadline set before it,
// relative to now, has passed.
func passDeadlines(now *atomic.Pointer[time.Time]) {
	later := now.Load().Add(time.Hour)
	now.Store(&later)
}

// newDiskEnvClock is newDiskEnv with the actor on clock.
func newDiskEnvClock(t *testing.T, quota int, clock func() time.Time) *diskEnv {
	t.Helper()
	fault := &disk.FaultFS{}
	e := &diskEnv{t: t, sys: actor.NewActorSystem(), dir: t.TempDir(), fault: fault, gate: newGateFS(fault), quota: quota, clock: clock}
	e.start()
	return e
}

// start opens the store in e.dir and spawns a new index recorder and disk actor.
func (e *diskEnv) start() {
	e.t.Helper()
	st, _, err := disk.Open(disk.Config{
		Dir:           e.dir,
		CapacityBytes: testDiskSlots * disk.SlotBytes(testDiskPayload),
		PayloadBytes:  testDiskPayload,
		Fingerprint:   0xd15c,
		FS:            e.gate,
	})
	if err != nil {
		e.t.Fatalf("disk.Open: %v", err)
	}
	e.store = st
	updates := make(chan *messages.IndexUpdate, 1024)
	e.updates = updates
	e.index = e.sys.Root.Spawn(actor.PropsFromFunc(func(ctx actor.Context) {
		if u, ok := ctx.Message().(*messages.IndexUpdate); ok {
			updates <- u
		}
	}))
	prod, err := NewDiskActor(DiskConfig{Store: st, Index: e.index, WriteQuota: e.quota, Workers: e.workers, Clock: e.clock, writeFault: e.writeFault, Observe: e.observe})
	if err != nil {
		e.t.Fatalf("NewDiskActor: %v", err)
	}
	e.pid = e.sys.Root.Spawn(actor.PropsFromProducer(prod))
}

// stop stops the disk actor (which closes the store) and the index recorder.
func (e *diskEnv) stop() {
	e.t.Helper()
	for _, pid := range []*actor.PID{e.pid, e.index} {
		if err := e.sys.Root.StopFuture(pid).Wait(); err != nil {
			e.t.Fatalf("stop %v: %v", pid, err)
		}
	}
}

// request sends msg with RequestFuture and returns the reply.
func request[R any](e *diskEnv, msg any) R {
	e.t.Helper()
	res, err := e.sys.Root.RequestFuture(e.pid, msg, testWait).Result()
	if err != nil {
		e.t.Fatalf("request %T: %v", msg, err)
	}
	r, ok := res.(R)
	if !ok {
		e.t.Fatalf("request %T: reply %T", msg, res)
	}
	return r
}

func (e *diskEnv) write(hashes ...uint64) *messages.LowerWriteDone {
	e.t.Helper()
	return request[*messages.LowerWriteDone](e, writeMsg(hashes...))
}

func writeMsg(hashes ...uint64) *messages.LowerWrite {
	m := &messages.LowerWrite{}
	for i, h := range hashes {
		m.Items = append(m.Items, messages.LowerWriteItem{
			Hash: h, Parent: h - 1, Namespace: 7, Tokens: 16, Digest: digestOf(h), Slot: 100 + i, Bytes: payloadOf(h),
		})
	}
	return m
}

// readMsg builds a LowerRead whose item buffers are filled with a sentinel.
func readMsg(id uint64, deadline time.Time, hashes ...uint64) *messages.LowerRead {
	m := &messages.LowerRead{ID: id, Deadline: deadline}
	for i, h := range hashes {
		b := disk.AlignedBuffer(testDiskPayload)
		for j := range b {
			b[j] = 0xAA
		}
		m.Items = append(m.Items, messages.LowerReadItem{Hash: h, Digest: digestOf(h), Slot: 200 + i, Bytes: b})
	}
	return m
}

func (e *diskEnv) read(hashes ...uint64) (*messages.LowerRead, *messages.LowerReadDone) {
	e.t.Helper()
	m := readMsg(1, time.Time{}, hashes...)
	return m, request[*messages.LowerReadDone](e, m)
}

// checkRead checks that each item reported ok[i] and, when ok, holds its
// block's exact payload.
func checkRead(t *testing.T, m *messages.LowerRead, done *messages.LowerReadDone, ok ...bool) {
	t.Helper()
	if done.ID != m.ID || !slices.Equal(done.OK, ok) {
		t.Fatalf("LowerReadDone %d %v, want %d %v", done.ID, done.OK, m.ID, ok)
	}
	for i, it := range m.Items {
		if ok[i] && !bytes.Equal(it.Bytes, payloadOf(it.Hash)) {
			t.Fatalf("item %d (hash %d): bytes differ from the block written", i, it.Hash)
		}
	}
}

// checkWhy checks LowerReadDone.Why item by item.
func checkWhy(t *testing.T, done *messages.LowerReadDone, want ...messages.MissReason) {
	t.Helper()
	if !slices.Equal(done.Why, want) {
		t.Fatalf("LowerReadDone.Why %v, want %v", done.Why, want)
	}
}

func (e *diskEnv) flush() {
	e.t.Helper()
	reply := make(chan error, 1)
	e.sys.Root.Send(e.pid, &messages.Flush{Reply: reply})
	if err := recv(e.t, reply); err != nil {
		e.t.Fatalf("Flush: %v", err)
	}
}

func (e *diskEnv) stats() messages.TierStats {
	e.t.Helper()
	reply := make(chan messages.TierStats, 1)
	e.sys.Root.Send(e.pid, &messages.StatsRequest{Reply: reply})
	return recv(e.t, reply)
}

func (e *diskEnv) query(kind messages.QueryKind, hashes ...uint64) *messages.QueryResult {
	e.t.Helper()
	reply := make(chan *messages.QueryResult, 1)
	e.sys.Root.Send(e.pid, &messages.LowerQuery{Kind: kind, Hashes: hashes, Reply: reply})
	return recv(e.t, reply)
}

// nextUpdate returns the next IndexUpdate the index received.
func (e *diskEnv) nextUpdate() *messages.IndexUpdate {
	e.t.Helper()
	u := recv(e.t, e.updates)
	if u.Tier != messages.Disk {
		e.t.Fatalf("IndexUpdate for tier %v", u.Tier)
	}
	return u
}

// noUpdate checks that the index has received nothing more. Callers make
// sure every update the actor sent has arrived, e.g. by a later update.
func (e *diskEnv) noUpdate() {
	e.t.Helper()
	select {
	case u := <-e.updates:
		e.t.Fatalf("unexpected IndexUpdate %+v", u)
	default:
	}
}

func recv[T any](t *testing.T, c <-chan T) T {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(testWait):
		t.Fatalf("no reply within %v", testWait)
		panic("unreachable")
	}
}

// digestOf is block h's stand-in prefix digest.
func digestOf(h uint64) [32]byte {
	return sha256.Sum256(binary.LittleEndian.AppendUint64([]byte("prefix"), h))
}

// payloadOf returns block h's deterministic, page-aligned payload.
func payloadOf(h uint64) []byte {
	r := rand.New(rand.NewPCG(h, 0xd15c))
	p := disk.AlignedBuffer(testDiskPayload)
	for i := 0; i < len(p); i += 8 {
		binary.LittleEndian.PutUint64(p[i:], r.Uint64())
	}
	return p
}

func seq(n int) []uint64 {
	hs := make([]uint64, n)
	for i := range hs {
		hs[i] = uint64(i + 1)
	}
	return hs
}

// corruptPayload flips a bit in the middle of block h's payload in the
// closed store under dir.
func corruptPayload(t *testing.T, dir string, h uint64) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, de := range entries {
		name := filepath.Join(dir, de.Name())
		data, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		i := bytes.Index(data, payloadOf(h)[:256])
		if i < 0 {
			continue
		}
		data[i+testDiskPayload/2] ^= 0x10
		if err := os.WriteFile(name, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Fatalf("payload of block %d not found under %s", h, dir)
}

// headersOnDisk returns the sorted hashes of the valid-looking record
// headers in the slot files under dir: a 4 KiB block starting with the
// record magic, hash at byte 24.
func headersOnDisk(t *testing.T, dir string) []uint64 {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(dir, "slots-*.kv"))
	if err != nil || len(names) == 0 {
		t.Fatalf("no slot files under %s: %v", dir, err)
	}
	var hashes []uint64
	for _, name := range names {
		data, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		sb := int(disk.SlotBytes(testDiskPayload))
		for off := 0; off+disk.BlockSize <= len(data); off += sb {
			if binary.LittleEndian.Uint32(data[off:]) == 0x4b565444 {
				hashes = append(hashes, binary.LittleEndian.Uint64(data[off+24:]))
			}
		}
	}
	slices.Sort(hashes)
	return hashes
}
