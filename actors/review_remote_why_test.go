package actors

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/kvtier/kvtier/messages"
	"github.com/kvtier/kvtier/remote"
)

// TestRemoteChunkEvictedIsNoFailure (review probe of 42f29ba): Redis's
// maxmemory policy evicts keys one by one (remote.Config.TTL: "Redis's
// maxmemory policy may evict it sooner"), a block's chunk apart from its
// commit record included. A read that finds the record and not its chunk
// met an eviction, no fault: its LowerReadDone.Why must not be MissFailed,
// which the GPU counts as a failed load (the no-fault promise of stress
// TestNoFaultNoFailure). The remote store reported it Corrupt, and the
// remote actor maps Corrupt to MissFailed; it is Missing now (its record
// still deleted). It starts its own redis-server, and skips without one.
func TestRemoteChunkEvictedIsNoFailure(t *testing.T) {
	for _, b := range []string{"redis-server", "redis-cli"} {
		if _, err := exec.LookPath(b); err != nil {
			t.Skipf("%s is not installed", b)
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	srv := exec.Command("redis-server", "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", t.TempDir(), "--save", "", "--appendonly", "no")
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = srv.Process.Kill(); _ = srv.Wait() }()
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	ctx := context.Background()
	var st *remote.Store
	for start := time.Now(); ; {
		if st, err = remote.Open(ctx, remote.Config{Addrs: []string{addr}, PayloadBytes: 64, ChunkBytes: 32}); err == nil {
			break
		}
		if time.Since(start) > 10*time.Second {
			t.Fatalf("redis-server on %s: %v", addr, err)
		}
		time.Sleep(20 * time.Millisecond) // polling a process we started, not an actor
	}
	d := [32]byte{1, 2, 3}
	payload := make([]byte, 64)
	for i := range payload {
		payload[i] = byte(i)
	}
	if errs := st.Put(ctx, []remote.Block{{Key: remote.Key{Digest: d}, Hash: 1, Tokens: 4, Payload: payload}}); errs[0] != nil {
		t.Fatal(errs[0])
	}
	// The server evicts one chunk of the block, as maxmemory does.
	out, err := exec.Command("redis-cli", "-p", strconv.Itoa(port), "--scan", "--pattern", "*:c:*:1").Output()
	keys := strings.Fields(string(out))
	if err != nil || len(keys) != 1 {
		t.Fatalf("chunk keys %q: %v", keys, err)
	}
	if err := exec.Command("redis-cli", "-p", strconv.Itoa(port), "DEL", keys[0]).Run(); err != nil {
		t.Fatal(err)
	}

	sys := actor.NewActorSystem()
	pid := sys.Root.Spawn(actor.PropsFromProducer(NewRemoteActor(RemoteConfig{Store: st})))
	defer func() { _ = sys.Root.StopFuture(pid).Wait() }()
	res, err := sys.Root.RequestFuture(pid, &messages.LowerRead{ID: 1, Items: []messages.LowerReadItem{{Hash: 1, Digest: d, Bytes: make([]byte, 64)}}}, 10*time.Second).Result()
	if err != nil {
		t.Fatal(err)
	}
	done := res.(*messages.LowerReadDone)
	if done.OK[0] || len(done.Why) != 1 || done.Why[0] == messages.MissFailed {
		t.Fatalf("read of a block whose chunk the server evicted: OK %v Why %v, want a miss not MissFailed (the GPU counts it a failed load)", done.OK, done.Why)
	}
}
