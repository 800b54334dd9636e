package kvtier

import (
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"
)

// hungServer is a TCP server that takes connections and never answers: a
// shared tier that hangs.
func hungServer(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(io.Discard, c); c.Close() }()
		}
	}()
	return l.Addr().String()
}

// TestLookupSharedTierHung: Lookup asks the shared tier (since c3fc148)
// and waits for it as an allocation does. On a server that hangs it
// answers, once RemoteConfig.ReadTimeout has passed, with what the node's
// own tiers hold, not an error; a context shorter than that ends it with
// the context's error, as Lookup's doc says. Before c3fc148 it never asked
// the shared tier, and a short context got the node's answer.
func TestLookupSharedTierHung(t *testing.T) {
	ctx := context.Background()
	cfg := nodeConfig(&RemoteConfig{Addrs: []string{hungServer(t)}, ReadTimeout: 300 * time.Millisecond}, "hung", "m@1")
	cfg.Ingestion = IngestEvict // nothing written down: no write to wait on at Close
	m := newManager(t, cfg)
	a := toks(100, 4*bt+1)
	r, err := m.Allocate(ctx, AllocRequest{Seq: 1, Tokens: a[:2*bt]})
	if err != nil {
		t.Fatal(err)
	}
	wait(t, r)
	if err := commitFree(ctx, m, 1); err != nil {
		t.Fatal(err)
	}
	l, err := m.Lookup(ctx, LookupRequest{Tokens: a})
	if err != nil || l.Tokens.Of(GPU) != 2*bt || l.Tokens.Sum() != 2*bt {
		t.Fatalf("Lookup with the shared tier hung: %v, %v; want gpu=%d and no error", l.Tokens, err, 2*bt)
	}
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if l, err := m.Lookup(short, LookupRequest{Tokens: a}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lookup under a context shorter than ReadTimeout: %v, %v; want the context's error", l.Tokens, err)
	}
}
