package actors

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"go.uber.org/goleak"
	"golang.org/x/sys/unix"

	"github.com/kvtier/kvtier/disk"
	"github.com/kvtier/kvtier/messages"
)

func TestDiskConfigValidation(t *testing.T) {
	for _, c := range []DiskConfig{
		{},
		{Store: &disk.Store{}},
		{Store: &disk.Store{}, Index: &actor.PID{Id: "index"}, WriteQuota: -1},
		{Store: &disk.Store{}, Index: &actor.PID{Id: "index"}, Workers: -1},
	} {
		if _, err := NewDiskActor(c); !errors.Is(err, ErrDiskConfig) {
			t.Errorf("NewDiskActor(%+v): %v, want ErrDiskConfig", c, err)
		}
	}
}

func TestDiskWriteFlushRead(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	e := newDiskEnv(t, 0)
	defer e.stop()

	hashes := seq(16)
	d1 := e.write(hashes[:10]...)
	d2 := e.write(hashes[10:]...)
	e.flush()
	if !slices.Equal(d1.Slots, []int{100, 101, 102, 103, 104, 105, 106, 107, 108, 109}) ||
		!slices.Equal(d2.Slots, []int{100, 101, 102, 103, 104, 105}) {
		t.Fatalf("slots returned %v and %v", d1.Slots, d2.Slots)
	}
	written := append(slices.Sorted(slices.Values(d1.Written)), slices.Sorted(slices.Values(d2.Written))...)
	if !slices.Equal(written, hashes) {
		t.Fatalf("written %v, want %v", written, hashes)
	}
	var added []uint64
	for range 2 {
		u := e.nextUpdate()
		if len(u.Remove) != 0 {
			t.Fatalf("unexpected Remove %v", u.Remove)
		}
		added = append(added, u.Added...)
	}
	if slices.Sort(added); !slices.Equal(added, hashes) {
		t.Fatalf("index Added %v, want %v", added, hashes)
	}

	m, done := e.read(hashes...)
	checkRead(t, m, done, slices.Repeat([]bool{true}, len(hashes))...)

	// Writing a block that is there already skips it but returns its slot.
	if d := e.write(3); !slices.Equal(d.Slots, []int{100}) || len(d.Written) != 0 {
		t.Fatalf("rewrite: %+v", d)
	}
	// A miss is reported, not waited for.
	m, done = e.read(99, 1)
	checkRead(t, m, done, false, true)

	if r := e.query(messages.QueryExists, 1, 2, 3, 99, 4); r.Err != nil || r.Tokens.Of(messages.Disk) != 3 {
		t.Fatalf("exists: %+v", r)
	}
	if r := e.query(messages.QueryDelete, 2, 99); r.Err != nil || r.Deleted != 1 {
		t.Fatalf("delete: %+v", r)
	}
	if u := e.nextUpdate(); !slices.Equal(u.Remove, []uint64{2}) || len(u.Added) != 0 {
		t.Fatalf("delete update %+v", u)
	}
	if r := e.query(messages.QueryPrefetch, 1); r.Err == nil {
		t.Fatal("prefetch query: no error")
	}

	s := e.stats()
	if s.Tier != messages.Disk || s.Blocks != testDiskSlots || s.UsedBlocks != 15 ||
		s.BytesUsed != 15*int64(testDiskPayload) || s.Offloaded != 16 ||
		s.Hits != 17 || s.Misses != 1 || s.InFlight != 0 || s.Extra["skipped"] != 1 {
		t.Fatalf("stats %v %+v", s, s.Extra)
	}
	e.noUpdate()
}

func TestDiskRestartRepublishes(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	e := newDiskEnv(t, 0)
	hashes := seq(20)
	e.write(hashes...)
	e.flush()
	e.nextUpdate()
	e.stop() // closes the store

	e.start()
	defer e.stop()
	if u := e.nextUpdate(); !slices.Equal(u.Added, hashes) {
		t.Fatalf("after restart the index got %+v, want Added %v", u, hashes)
	}
	m, done := e.read(hashes...)
	checkRead(t, m, done, slices.Repeat([]bool{true}, len(hashes))...)
	if s := e.stats(); s.Extra["reopen_records"] != 20 || s.UsedBlocks != 20 {
		t.Fatalf("stats %v %+v", s, s.Extra)
	}
}

func TestDiskCorruptReadIsMiss(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	e := newDiskEnv(t, 0)
	e.write(1, 2, 3)
	e.flush()
	e.stop()
	corruptPayload(t, e.dir, 2)

	e.start()
	defer e.stop()
	e.nextUpdate() // the reopened records
	m, done := e.read(1, 2, 3)
	checkRead(t, m, done, true, false, true)
	checkWhy(t, done, messages.MissNone, messages.MissFailed, messages.MissNone)
	for i, b := range m.Items[1].Bytes {
		if b != 0xAA {
			t.Fatalf("corrupt read touched the slot at byte %d", i)
		}
	}
	if u := e.nextUpdate(); !slices.Equal(u.Remove, []uint64{2}) {
		t.Fatalf("index update %+v, want Remove [2]", u)
	}
	s := e.stats()
	if s.Extra["corrupt"] != 1 || s.Misses != 1 || s.Hits != 2 || s.Failed != 1 || s.UsedBlocks != 2 {
		t.Fatalf("stats %v %+v", s, s.Extra)
	}
	if r := e.query(messages.QueryExists, 2); r.Tokens.Of(messages.Disk) != 0 {
		t.Fatalf("corrupt block still on disk: %+v", r)
	}
}

// TestDiskReadOfAbsentBlockIsEvicted: a block the disk does not hold (never
// written, evicted or removed since the lookup) is a miss that says so,
// MissEvicted, and counts as no failure. The pinned tier used to report
// every such short read as MissFailed, and the GPU counted failed loads
// in runs with no fault (stress TestNoFaultNoFailure).
func TestDiskReadOfAbsentBlockIsEvicted(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	e := newDiskEnv(t, 0)
	defer e.stop()
	e.write(1)
	e.flush()
	m, done := e.read(1, 7)
	checkRead(t, m, done, true, false)
	checkWhy(t, done, messages.MissNone, messages.MissEvicted)
	if s := e.stats(); s.Failed != 0 || s.Mismatches != 0 || s.Misses != 1 {
		t.Fatalf("stats %v", s)
	}
}

func TestDiskDigestMismatchIsMiss(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	e := newDiskEnv(t, 0)
	defer e.stop()
	e.write(1, 2)
	e.flush()
	e.nextUpdate()

	// Block 2 is asked for with block 1's digest: same hash, other prefix.
	m := readMsg(5, time.Time{}, 1, 2)
	m.Items[1].Digest = digestOf(1)
	done := request[*messages.LowerReadDone](e, m)
	checkRead(t, m, done, true, false)
	if !slices.Equal(done.Why, []messages.MissReason{messages.MissNone, messages.MissMismatch}) {
		t.Fatalf("Why %v, want [none mismatch]", done.Why)
	}
	for i, b := range m.Items[1].Bytes {
		if b != 0xAA {
			t.Fatalf("refused read touched the slot at byte %d", i)
		}
	}
	// A reader with no digest is refused too.
	m = readMsg(6, time.Time{}, 2)
	m.Items[0].Digest = [32]byte{}
	done = request[*messages.LowerReadDone](e, m)
	checkRead(t, m, done, false)
	if !slices.Equal(done.Why, []messages.MissReason{messages.MissMismatch}) {
		t.Fatalf("Why %v, want [mismatch]", done.Why)
	}

	// Mismatches are counted as such, not as failures.
	s := e.stats()
	if s.Extra["verify_mismatch"] != 2 || s.Mismatches != 2 || s.Failed != 0 || s.Misses != 2 || s.Hits != 1 || s.UsedBlocks != 2 {
		t.Fatalf("stats %v %+v", s, s.Extra)
	}
	// The block is still there for readers that expect its digest.
	m, done = e.read(2)
	checkRead(t, m, done, true)
}

func TestDiskWriteQuotaDenies(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	e := newDiskEnv(t, 2)
	defer e.stop()
	d := e.write(1, 2, 3, 4, 5)
	if !slices.Equal(d.Slots, []int{100, 101, 102, 103, 104}) {
		t.Fatalf("slots %v: every item's slot must come back", d.Slots)
	}
	if slices.Sort(d.Written); !slices.Equal(d.Written, []uint64{1, 2}) {
		t.Fatalf("written %v, want the first two", d.Written)
	}
	if s := e.stats(); s.Denied != 3 || s.UsedBlocks != 2 {
		t.Fatalf("stats %v", s)
	}
	// The quota frees up as writes complete.
	if d := e.write(3, 4); len(d.Written) != 2 {
		t.Fatalf("second write %+v", d)
	}
}

func TestDiskFullStoreEvictsAndDenies(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	e := newDiskEnv(t, 100)
	defer e.stop()
	// Every slot is being written, so the last items find nothing to evict.
	d := e.write(seq(testDiskSlots + 3)...)
	if len(d.Slots) != testDiskSlots+3 || len(d.Written) != testDiskSlots {
		t.Fatalf("%d slots back, %d written; want %d and %d", len(d.Slots), len(d.Written), testDiskSlots+3, testDiskSlots)
	}
	e.nextUpdate()
	if s := e.stats(); s.Denied != 3 || s.Evictions != 0 {
		t.Fatalf("stats %v", s)
	}
	// Once they are live, a new block evicts an old one; the index hears both.
	if d := e.write(1000); !slices.Equal(d.Written, []uint64{1000}) {
		t.Fatalf("write into a full store: %+v", d)
	}
	rm, add := e.nextUpdate(), e.nextUpdate()
	if len(rm.Remove) != 1 || !slices.Equal(add.Added, []uint64{1000}) {
		t.Fatalf("updates %+v then %+v, want one Remove then Added [1000]", rm, add)
	}
	if s := e.stats(); s.Evictions != 1 || s.UsedBlocks != testDiskSlots {
		t.Fatalf("stats %v", s)
	}
}

// A Flush waits for the writes in flight when it arrived, not for later ones.
func TestDiskFlushWaitsForEarlierWrites(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	e := newDiskEnv(t, 0)
	defer e.stop()
	e.gate.armWrite()
	f := e.sys.Root.RequestFuture(e.pid, writeMsg(1), testWait)
	recv(t, e.gate.entered)
	flushed := make(chan error, 1)
	e.sys.Root.Send(e.pid, &messages.Flush{Reply: flushed})
	if s := e.stats(); s.InFlight != 1 { // the Flush was handled before this
		t.Fatalf("stats %v", s)
	}
	select {
	case err := <-flushed:
		t.Fatalf("Flush answered (%v) while a write is in flight", err)
	default:
	}
	e.gate.release <- struct{}{}
	if err := recv(t, flushed); err != nil {
		t.Fatal(err)
	}
	res, err := f.Result()
	if err != nil {
		t.Fatal(err)
	}
	if d := res.(*messages.LowerWriteDone); !slices.Equal(d.Written, []uint64{1}) {
		t.Fatalf("write %+v", d)
	}
	if u := e.nextUpdate(); !slices.Equal(u.Added, []uint64{1}) {
		t.Fatalf("index update %+v", u)
	}
}

func TestDiskCoalescesReads(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	e := newDiskEnv(t, 0)
	defer e.stop()
	e.write(1, 2)
	e.flush()

	// Two items of one hash in one message: one I/O.
	before := e.fault.Counts().Reads
	m, done := e.read(1, 1, 2)
	checkRead(t, m, done, true, true, true)
	if n := e.fault.Counts().Reads - before; n != 2 {
		t.Fatalf("%d reads for hashes 1, 1, 2; want 2", n)
	}

	// Two messages for one hash while its read is in flight: one I/O.
	before = e.fault.Counts().Reads
	e.gate.arm()
	m1 := readMsg(1, time.Time{}, 1)
	f1 := e.sys.Root.RequestFuture(e.pid, m1, testWait)
	recv(t, e.gate.entered)
	m2 := readMsg(2, time.Time{}, 1)
	f2 := e.sys.Root.RequestFuture(e.pid, m2, testWait)
	if s := e.stats(); s.Extra["coalesced"] != 2 { // 1 from above, 1 now
		t.Fatalf("coalesced %v, want 2", s.Extra["coalesced"])
	}
	e.gate.release <- struct{}{}
	for _, x := range []struct {
		m *messages.LowerRead
		f interface{ Result() (any, error) }
	}{{m1, f1}, {m2, f2}} {
		res, err := x.f.Result()
		if err != nil {
			t.Fatal(err)
		}
		checkRead(t, x.m, res.(*messages.LowerReadDone), true)
	}
	if n := e.fault.Counts().Reads - before; n != 1 {
		t.Fatalf("%d reads for two coalesced requests, want 1", n)
	}
}

func TestDiskReadDeadline(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	e, t0, now := clockDiskEnv(t) // a deadline on the wall clock could pass before the read started
	defer e.stop()

	// The read of 1 is held at the file until after the deadline.
	e.gate.arm()
	late := readMsg(1, t0.Add(10*time.Millisecond), 1)
	f := e.sys.Root.RequestFuture(e.pid, late, testWait)
	recv(t, e.gate.entered)
	passDeadlines(now)
	res, err := f.Result()
	if err != nil {
		t.Fatal(err)
	}
	checkRead(t, late, res.(*messages.LowerReadDone), false)
	checkWhy(t, res.(*messages.LowerReadDone), messages.MissLate)
	if s := e.stats(); s.Timeouts != 1 || s.Misses != 1 || s.InFlight != 1 {
		t.Fatalf("stats %v", s)
	}
	e.gate.release <- struct{}{}
	// This read joins the late one or starts after it completed; either way
	// its answer comes after the late result was handled.
	m, done := e.read(1)
	checkRead(t, m, done, true)
	for i, b := range late.Items[0].Bytes {
		if b != 0xAA {
			t.Fatalf("late read wrote byte %d of a slot after LowerReadDone", i)
		}
	}
	// A deadline already passed is answered at once.
	m = readMsg(3, now.Load().Add(-time.Second), 2)
	done = request[*messages.LowerReadDone](e, m)
	checkRead(t, m, done, false)
	checkWhy(t, done, messages.MissLate)
	if s := e.stats(); s.Timeouts != 2 || s.InFlight != 0 || s.UsedBlocks != 2 {
		t.Fatalf("stats %v", s)
	}
}

// TestDiskReadDeadlineOnClock: the read deadline is judged on the actor's
// Clock: a timer that fires while the clock is short of the deadline (a
// simulator's clock) waits again, and the read ends late only once the
// clock passes it.
func TestDiskReadDeadlineOnClock(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	e, t0, now := clockDiskEnv(t)
	defer e.stop()

	e.gate.arm()
	m := readMsg(1, t0.Add(10*time.Millisecond), 1)
	f := e.sys.Root.RequestFuture(e.pid, m, testWait)
	recv(t, e.gate.entered)
	time.Sleep(50 * time.Millisecond) // 5x the deadline in wall time; the clock has not moved
	e.gate.release <- struct{}{}
	res, err := f.Result()
	if err != nil {
		t.Fatal(err)
	}
	checkRead(t, m, res.(*messages.LowerReadDone), true)

	e.gate.arm()
	m = readMsg(2, t0.Add(10*time.Millisecond), 2)
	f = e.sys.Root.RequestFuture(e.pid, m, testWait)
	recv(t, e.gate.entered)
	later := t0.Add(time.Hour)
	now.Store(&later)
	res, err = f.Result()
	if err != nil {
		t.Fatal(err)
	}
	checkRead(t, m, res.(*messages.LowerReadDone), false)
	if s := e.stats(); s.Timeouts != 1 {
		t.Fatalf("stats %v, want one timeout", s)
	}
	e.gate.release <- struct{}{}
}

// TestDiskReadDeadlineAnswersWhatLanded: at its deadline a read answers the
// items whose blocks were read and copied as read, verified, and only the
// rest as late: the pinned tier grants that leading run, and the GPU tier,
// which asks the tiers below to answer ahead of its own deadline, copies it
// up in time.
func TestDiskReadDeadlineAnswersWhatLanded(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	e, t0, now := clockDiskEnv(t)
	defer e.stop()

	e.gate.armData(payloadOf(2)[:64]) // block 2's read is held once it has read
	m := readMsg(1, t0.Add(10*time.Millisecond), 1, 2)
	f := e.sys.Root.RequestFuture(e.pid, m, testWait)
	recv(t, e.gate.entered)
	for deadline := time.Now().Add(testWait); e.stats().Hits < 1; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("block 1 was never read")
		}
	}
	later := t0.Add(time.Hour)
	now.Store(&later)
	res, err := f.Result()
	if err != nil {
		t.Fatal(err)
	}
	checkRead(t, m, res.(*messages.LowerReadDone), true, false)
	if s := e.stats(); s.Timeouts != 1 || s.Hits != 1 {
		t.Fatalf("stats %v, want one hit and one timeout", s)
	}
	e.gate.release <- struct{}{}
}

// TestDiskWriteEIO: a write that fails is answered as not written, counted
// Failed, and observed as a failed transfer that moved nothing
// (messages.LinkObserver); the tier keeps working.
func TestDiskWriteEIO(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	e := newDiskEnv(t, 0)
	defer e.stop()
	type seen struct {
		blocks int
		bytes  int64
		ok     bool
	}
	observed := make(chan seen, 8)
	e.stop()
	e.observe = func(l messages.Link, blocks int, bytes int64, _ time.Duration, ok bool) {
		observed <- seen{blocks, bytes, ok}
	}
	e.start()
	e.fault.Inject(disk.Fault{Op: disk.FaultWrite, Err: unix.EIO, Times: 1})
	d := e.write(1)
	if !slices.Equal(d.Slots, []int{100}) || len(d.Written) != 0 {
		t.Fatalf("failed write answered %+v, want slot 100 back and nothing written", d)
	}
	select {
	case o := <-observed: // before the worker reported to the actor
		if o != (seen{0, 0, false}) {
			t.Fatalf("failed write observed as %+v, want a failed transfer of nothing", o)
		}
	default:
		t.Fatal("the failed write was not observed")
	}
	if s := e.stats(); s.Failed != 1 || s.UsedBlocks != 0 || s.Extra["write_errors"] != 1 {
		t.Fatalf("stats %v %+v", s, s.Extra)
	}
	// The tier keeps working, and the index never heard of block 1.
	if d := e.write(2); !slices.Equal(d.Written, []uint64{2}) {
		t.Fatalf("write after EIO: %+v", d)
	}
	if u := e.nextUpdate(); !slices.Equal(u.Added, []uint64{2}) {
		t.Fatalf("index update %+v, want Added [2] only", u)
	}
	m, done := e.read(1, 2)
	checkRead(t, m, done, false, true)
}

func TestDiskReadEIOIsMiss(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	e := newDiskEnv(t, 0)
	defer e.stop()
	e.write(1)
	e.nextUpdate()
	e.fault.Inject(disk.Fault{Op: disk.FaultRead, Err: unix.EIO, Times: 1})
	m, done := e.read(1)
	checkRead(t, m, done, false)
	checkWhy(t, done, messages.MissFailed)
	if u := e.nextUpdate(); !slices.Equal(u.Remove, []uint64{1}) {
		t.Fatalf("index update %+v, want Remove [1]", u)
	}
	if s := e.stats(); s.Failed != 1 || s.Misses != 1 {
		t.Fatalf("stats %v", s)
	}
}

// A QueryDelete is answered only once the removed blocks' headers are
// zeroed on disk, so the deletion survives a crash.
func TestDiskDeleteAnswersWhenDurable(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	e := newDiskEnv(t, 0)
	defer e.stop()
	e.write(1, 2, 3)
	e.flush()
	e.nextUpdate()
	if got := headersOnDisk(t, e.dir); !slices.Equal(got, []uint64{1, 2, 3}) {
		t.Fatalf("headers on disk %v", got)
	}

	e.gate.armWrite() // hold the scrub
	reply := make(chan *messages.QueryResult, 1)
	e.sys.Root.Send(e.pid, &messages.LowerQuery{Kind: messages.QueryDelete, Hashes: []uint64{2, 99}, Reply: reply})
	recv(t, e.gate.entered)
	// The block is gone from the index and the store at once...
	if u := e.nextUpdate(); !slices.Equal(u.Remove, []uint64{2}) {
		t.Fatalf("index update %+v, want Remove [2]", u)
	}
	if r := e.query(messages.QueryExists, 2); r.Tokens.Of(messages.Disk) != 0 {
		t.Fatalf("deleted block still on disk: %+v", r)
	}
	// ...but the delete is not answered while its header is on disk.
	select {
	case r := <-reply:
		t.Fatalf("delete answered before the scrub: %+v", r)
	default:
	}
	e.gate.release <- struct{}{}
	if r := recv(t, reply); r.Err != nil || r.Deleted != 1 {
		t.Fatalf("delete: %+v", r)
	}
	if got := headersOnDisk(t, e.dir); !slices.Equal(got, []uint64{1, 3}) {
		t.Fatalf("headers on disk after the delete %v", got)
	}
	m, done := e.read(1, 2, 3)
	checkRead(t, m, done, true, false, true)
	if s := e.stats(); s.Extra["removes"] != 1 || s.Failed != 0 || s.UsedBlocks != 2 {
		t.Fatalf("stats %v %+v", s, s.Extra)
	}
}

// A delete whose scrub fails still removes the block but says so in Err.
func TestDiskDeleteScrubFailure(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	e := newDiskEnv(t, 0)
	defer e.stop()
	e.write(1)
	e.flush()
	e.nextUpdate()
	e.fault.Inject(disk.Fault{Op: disk.FaultWrite, Err: unix.EIO, Times: 1})
	r := e.query(messages.QueryDelete, 1)
	if r.Deleted != 1 || !errors.Is(r.Err, unix.EIO) {
		t.Fatalf("delete: %+v", r)
	}
	if s := e.stats(); s.Failed != 1 || s.UsedBlocks != 0 {
		t.Fatalf("stats %v", s)
	}
}

// Stopping with a read held at the file waits for it, answers the request
// and closes the store, which then reopens with the block intact.
func TestDiskStopDrainsInFlightIO(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	e := newDiskEnv(t, 0)
	e.write(1)
	e.flush()
	e.nextUpdate()

	e.gate.arm()
	m := readMsg(1, time.Time{}, 1)
	f := e.sys.Root.RequestFuture(e.pid, m, testWait)
	recv(t, e.gate.entered)
	stopped := e.sys.Root.StopFuture(e.pid)
	e.gate.release <- struct{}{}
	if err := stopped.Wait(); err != nil {
		t.Fatal(err)
	}
	res, err := f.Result()
	if err != nil {
		t.Fatal(err)
	}
	// The held read finished during the stop and was delivered before the
	// store closed.
	checkRead(t, m, res.(*messages.LowerReadDone), true)
	if err := e.sys.Root.StopFuture(e.index).Wait(); err != nil {
		t.Fatal(err)
	}

	e.start() // fails if the store was not closed (directory lock)
	defer e.stop()
	if u := e.nextUpdate(); !slices.Equal(u.Added, []uint64{1}) {
		t.Fatalf("after restart %+v", u)
	}
	m, done := e.read(1)
	checkRead(t, m, done, true)
}

// TestDiskExpiredReadCancelled: a read still queued for a worker when
// every request waiting for it was answered at its deadline is cancelled
// without I/O (the block stays on disk); one a worker runs completes.
func TestDiskExpiredReadCancelled(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	e, t0, now := oneWorkerClockEnv(t)
	defer e.stop()

	e.gate.arm()
	m1 := readMsg(1, time.Time{}, 1) // holds the one worker
	f1 := e.sys.Root.RequestFuture(e.pid, m1, testWait)
	recv(t, e.gate.entered)
	before := e.fault.Counts().Reads
	m2 := readMsg(2, t0.Add(10*time.Millisecond), 2) // queued behind it
	f2 := e.sys.Root.RequestFuture(e.pid, m2, testWait)
	e.stats() // m2 is queued, its deadline still ahead on the clock
	passDeadlines(now)
	res, err := f2.Result()
	if err != nil {
		t.Fatal(err)
	}
	checkRead(t, m2, res.(*messages.LowerReadDone), false)
	if s := e.stats(); s.Extra["queued"] != 0 || s.InFlight != 1 || s.Extra["cancelled"] != 1 || s.Timeouts != 1 {
		t.Fatalf("after the late read: stats %v %+v; want it cancelled, only the held read in flight", s, s.Extra)
	}
	e.gate.release <- struct{}{}
	res, err = f1.Result()
	if err != nil {
		t.Fatal(err)
	}
	checkRead(t, m1, res.(*messages.LowerReadDone), true)
	if n := e.fault.Counts().Reads - before; n != 1 {
		t.Fatalf("%d reads reached the file, want the held one's alone (none for the cancelled read)", n)
	}
	m, done := e.read(2) // still on disk
	checkRead(t, m, done, true)

	// A queued read that another request still waits for is not cancelled
	// when one of its requests is answered at its deadline.
	e.gate.arm()
	f1 = e.sys.Root.RequestFuture(e.pid, readMsg(5, time.Time{}, 1), testWait)
	recv(t, e.gate.entered)
	patient := readMsg(6, time.Time{}, 2)
	f2 = e.sys.Root.RequestFuture(e.pid, patient, testWait)
	late := readMsg(7, now.Load().Add(10*time.Millisecond), 2)
	f3 := e.sys.Root.RequestFuture(e.pid, late, testWait)
	e.stats() // late waits for the queued read too
	passDeadlines(now)
	res, err = f3.Result()
	if err != nil {
		t.Fatal(err)
	}
	checkRead(t, late, res.(*messages.LowerReadDone), false)
	if s := e.stats(); s.Extra["cancelled"] != 1 || s.Extra["queued"] != 1 {
		t.Fatalf("stats %v %+v: the read another request waits for was cancelled", s, s.Extra)
	}
	e.gate.release <- struct{}{}
	if _, err := f1.Result(); err != nil {
		t.Fatal(err)
	}
	res, err = f2.Result()
	if err != nil {
		t.Fatal(err)
	}
	checkRead(t, patient, res.(*messages.LowerReadDone), true)
}

// Jobs still queued for a worker at stop are cancelled without I/O: their
// requests get false and the blocks stay on disk.
func TestDiskStopCancelsQueuedIO(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	e := oneWorkerEnv(t)

	e.gate.arm()
	m1 := readMsg(1, time.Time{}, 1)
	f1 := e.sys.Root.RequestFuture(e.pid, m1, testWait)
	recv(t, e.gate.entered)
	m2 := readMsg(2, time.Time{}, 2)
	f2 := e.sys.Root.RequestFuture(e.pid, m2, testWait)
	if s := e.stats(); s.Extra["queued"] != 1 || s.InFlight != 2 {
		t.Fatalf("stats %v %+v", s, s.Extra)
	}
	stopped := e.sys.Root.StopFuture(e.pid)
	e.gate.release <- struct{}{}
	if err := stopped.Wait(); err != nil {
		t.Fatal(err)
	}
	for _, x := range []struct {
		m  *messages.LowerRead
		f  interface{ Result() (any, error) }
		ok bool
	}{{m1, f1, true}, {m2, f2, false}} {
		res, err := x.f.Result()
		if err != nil {
			t.Fatal(err)
		}
		checkRead(t, x.m, res.(*messages.LowerReadDone), x.ok)
	}
	for i, b := range m2.Items[0].Bytes {
		if b != 0xAA {
			t.Fatalf("cancelled read wrote byte %d", i)
		}
	}
	if err := e.sys.Root.StopFuture(e.index).Wait(); err != nil {
		t.Fatal(err)
	}

	e.start()
	defer e.stop()
	if u := e.nextUpdate(); !slices.Equal(u.Added, []uint64{1, 2}) {
		t.Fatalf("after restart %+v", u)
	}
	m, done := e.read(1, 2)
	checkRead(t, m, done, true, true)
}

// A write of a block another request is still writing answers only after
// that request announced it: the slot above is given back once the block
// is on the disk for the index (and the event stream), never before.
func TestDiskRewriteWaitsForTheWriteInFlight(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	e := newDiskEnv(t, 0)
	defer e.stop()
	e.gate.armWrite()
	first := e.sys.Root.RequestFuture(e.pid, writeMsg(7), testWait)
	recv(t, e.gate.entered)
	second := futureResult(e.sys.Root.RequestFuture(e.pid, writeMsg(7), testWait))
	if s := e.stats(); s.Extra["skipped"] != 1 { // the second request was planned before this
		e.gate.release <- struct{}{}
		t.Fatalf("stats %+v", s.Extra)
	}
	select {
	case <-time.After(50 * time.Millisecond):
	case <-second:
		e.gate.release <- struct{}{}
		t.Fatal("the second write answered while the first was writing its block")
	}
	e.gate.release <- struct{}{}
	if _, err := first.Result(); err != nil {
		t.Fatal(err)
	}
	if err := <-second; err != nil {
		t.Fatal(err)
	}
	if u := e.nextUpdate(); !slices.Equal(u.Added, []uint64{7}) {
		t.Fatalf("announced %+v", u)
	}
	e.noUpdate()
}

// futureResult delivers f's error once it has its result. One goroutine
// waits: a protoactor Future wakes a single waiter.
func futureResult(f *actor.Future) <-chan error {
	c := make(chan error, 1)
	go func() {
		_, err := f.Result()
		c <- err
	}()
	return c
}
