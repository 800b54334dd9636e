package remote

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
)

// Fault drills on servers each test starts for itself (the shared ones of
// .ci/redis.sh serve other packages' tests at the same time, so they are
// never shrunk or killed). They need redis-server and redis-cli on PATH: CI
// installs them; locally a drill skips, saying so, unless
// KVTIER_REQUIRE_REDIS is set.

// freePort returns a loopback TCP port nothing listens on now.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func needServerBinaries(t *testing.T) {
	t.Helper()
	for _, b := range []string{"redis-server", "redis-cli"} {
		if _, err := exec.LookPath(b); err != nil {
			if os.Getenv("KVTIER_REQUIRE_REDIS") != "" {
				t.Fatalf("KVTIER_REQUIRE_REDIS is set (CI) but %s is not installed", b)
			}
			t.Skipf("%s is not installed (apt-get install redis-server): this drill starts its own servers", b)
		}
	}
}

// startServer runs redis-server on a free port with args and returns its
// address; the test's cleanup shuts it down.
func startServer(t *testing.T, args ...string) string {
	t.Helper()
	port := freePort(t)
	dir := t.TempDir()
	argv := append([]string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", dir, "--save", "",
		"--appendonly", "no"}, args...)
	cmd := exec.Command("redis-server", argv...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond)
		if err == nil {
			c.Close()
			return addr
		}
		if time.Now().After(deadline) {
			t.Fatalf("redis-server on %s did not start: %v", addr, err)
		}
		time.Sleep(20 * time.Millisecond) // polling a process we started, not an actor
	}
}

// TestMaxmemoryEvictionIsAMiss: a server whose maxmemory (allkeys-lru) is far
// below what the tier writes evicts chunks and records at will, records
// without their chunks included. Every read is then a byte-exact hit or a
// counted miss, never wrong bytes, and no call hangs or errs to the caller.
func TestMaxmemoryEvictionIsAMiss(t *testing.T) {
	needServerBinaries(t)
	addr := startServer(t, "--maxmemory", "3mb", "--maxmemory-policy", "allkeys-lru")
	s := open(t, Config{Addrs: []string{addr}})
	bs := blocks(21, 400, 6) // 4 MB of payload into a 3 MB server (about 1 MB of which the server itself uses)
	ctx := context.Background()
	for i := 0; i < len(bs); i += 50 {
		for j, err := range s.Put(ctx, bs[i:i+50]) {
			// Writes past maxmemory may be refused (OOM) by the server: a
			// counted failure, never a panic or a hang.
			if err != nil {
				t.Logf("put block %d: %v", i+j, err)
			}
		}
	}
	out, dst := get(t, s, bs)
	count := map[Outcome]int{}
	for i, o := range out {
		count[o]++
		if o == Hit && !bytes.Equal(dst[i], bs[i].Payload) {
			t.Fatalf("block %d served wrong bytes after eviction", i)
		}
	}
	t.Logf("after eviction: %v", count)
	if count[Hit] == len(bs) {
		t.Fatal("nothing was evicted: the drill did not drill")
	}
	if count[Hit] == 0 {
		t.Fatal("nothing survived: expected the most recent writes to be served")
	}
	// The store still works: a small write after the storm is read back.
	fresh := blocks(22, 2, 7)
	put(t, s, fresh)
	if o, d := get(t, s, fresh); o[1] != Hit || !bytes.Equal(d[1], fresh[1].Payload) {
		t.Fatalf("a write after the eviction storm: %v", o)
	}
}

// TestClusterNodeKilled: a 3-node cluster (cluster-require-full-coverage no,
// as a cache should run) loses a node mid-run. Reads of blocks on the dead
// node's slots fail or miss within their deadline; blocks on the live nodes
// are still served byte-exact; nothing hangs, nothing wrong is served, and
// writes go on, failing cleanly where their slot is gone.
func TestClusterNodeKilled(t *testing.T) {
	needServerBinaries(t)
	var addrs []string
	for range 3 {
		addrs = append(addrs, startServer(t, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "1000", "--cluster-require-full-coverage", "no"))
	}
	create := exec.Command("redis-cli", append(append([]string{"--cluster", "create"}, addrs...),
		"--cluster-replicas", "0", "--cluster-yes")...)
	if out, err := create.CombinedOutput(); err != nil {
		t.Fatalf("cluster create: %v\n%s", err, out)
	}
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		out, _ := exec.Command("redis-cli", "-h", "127.0.0.1", "-p", strings.Split(addrs[0], ":")[1], "cluster", "info").Output()
		if bytes.Contains(out, []byte("cluster_state:ok")) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("cluster never became ok: %s", out)
		}
	}
	s := open(t, Config{Addrs: addrs, Cluster: true, Log: zaptest.NewLogger(t)})
	t.Cleanup(func() { routeRedisLog(zap.NewNop()) }) // go-redis may log after the test
	bs := blocks(31, 150, 8)
	put(t, s, bs)
	if out, _ := get(t, s, bs); countOf(out, Hit) != len(bs) {
		t.Fatalf("before the kill: %v", out)
	}
	// Kill the third node (SHUTDOWN NOSAVE: its keys are gone with it).
	_ = exec.Command("redis-cli", "-h", "127.0.0.1", "-p", strings.Split(addrs[2], ":")[1], "shutdown", "nosave").Run()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	start := time.Now()
	items := make([]GetItem, len(bs))
	dst := make([][]byte, len(bs))
	for i, b := range bs {
		dst[i] = make([]byte, payload)
		items[i] = GetItem{Key: b.Key, Hash: b.Hash, Dst: dst[i]}
	}
	out := s.Get(ctx, items)
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("reads after the kill took %v: past their 3s deadline", d)
	}
	hits := 0
	for i, o := range out {
		if o == Hit {
			hits++
			if !bytes.Equal(dst[i], bs[i].Payload) {
				t.Fatalf("block %d served wrong bytes after the kill", i)
			}
		}
	}
	t.Logf("after the kill: %d of %d served, outcomes %v", hits, len(bs), out)
	if hits == len(bs) {
		t.Fatal("every block was served with a node and its keys gone")
	}
	if hits == 0 {
		t.Fatal("no block was served: the live nodes' slots should still be (cluster-require-full-coverage no)")
	}
	// Writes after the kill fail or succeed per slot; none hangs.
	wctx, wcancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer wcancel()
	start = time.Now()
	errs := s.Put(wctx, blocks(32, 10, 9))
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("writes after the kill took %v", d)
	}
	t.Logf("writes after the kill: %v", errs)
}

func countOf(out []Outcome, want Outcome) int {
	n := 0
	for _, o := range out {
		if o == want {
			n++
		}
	}
	return n
}
