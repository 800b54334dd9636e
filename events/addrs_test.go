package events

import (
	"context"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestAddrsConnectable: Addrs reports a wildcard bind ("tcp://*:0",
// "tcp://[::]:0") as 127.0.0.1 with the port picked, which libzmq connects
// to without ZMQ_IPV6, and a named host or an ipc:// path as bound; a
// client connects to what it reports. It reported "tcp://[::]:port", and
// an ipc:// replay endpoint as "tcp://<path>".
func TestAddrsConnectable(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		pub, replay       string
		wantPub, wantRepl string // prefixes
	}{
		{"tcp://*:0", "tcp://*:0", "tcp://127.0.0.1:", "tcp://127.0.0.1:"},
		{"tcp://[::]:0", "tcp://0.0.0.0:0", "tcp://127.0.0.1:", "tcp://127.0.0.1:"},
		{"ipc://" + filepath.Join(dir, "pub.sock"), "tcp://127.0.0.1:0", "ipc://" + filepath.Join(dir, "pub.sock"), "tcp://127.0.0.1:"},
		{"tcp://*:0", "ipc://" + filepath.Join(dir, "replay.sock"), "tcp://127.0.0.1:", "ipc://" + filepath.Join(dir, "replay.sock")},
	} {
		if strings.Contains(c.pub, "[::]") && !hasIPv6() {
			t.Logf("%s: skipped, this host cannot bind IPv6", c.pub)
			continue
		}
		s, err := Listen(ServerConfig{Endpoint: c.pub, ReplayEndpoint: c.replay, Topic: "kv"}, &lockedSource{p: NewPublisher(Config{BlockSize: 1})})
		if err != nil {
			t.Fatal(err)
		}
		pub, replay := s.Addrs()
		if !strings.HasPrefix(pub, c.wantPub) || strings.HasSuffix(pub, ":0") {
			t.Errorf("%s: Addrs reports %q, want %s…", c.pub, pub, c.wantPub)
		}
		if !strings.HasPrefix(replay, c.wantRepl) || strings.HasSuffix(replay, ":0") {
			t.Errorf("%s: Addrs reports replay %q, want %s…", c.replay, replay, c.wantRepl)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		sub, err := Subscribe(ctx, pub, "kv")
		if err != nil {
			t.Errorf("Subscribe(%q): %v", pub, err)
		} else {
			joined(t, s, recvAll(sub), nil)
			_ = sub.Close()
		}
		if _, err := Replay(ctx, replay, 0); err != nil {
			t.Errorf("Replay(%q): %v", replay, err)
		}
		cancel()
		_ = s.Close()
	}

	sub, err := SubscribeListen(context.Background(), "tcp://*:0", "kv")
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if a := sub.Addr(); !strings.HasPrefix(a, "tcp://127.0.0.1:") {
		t.Errorf("SubscribeListen(tcp://*:0).Addr() = %q, want tcp://127.0.0.1:…", a)
	}
}

// hasIPv6 reports whether this host can bind an IPv6 socket (a host with
// IPv6 disabled cannot bind "[::]").
func hasIPv6() bool {
	l, err := net.Listen("tcp6", "[::1]:0")
	if err != nil {
		return false
	}
	_ = l.Close()
	return true
}
