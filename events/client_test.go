package events

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/go-zeromq/zmq4/security/null"
	"go.uber.org/goleak"

	"github.com/kvtier/kvtier/messages"
)

// longHeader is a ZMTP frame header with an 8-byte size; cmd marks a
// command frame.
func longHeader(more, cmd bool, size uint64) []byte {
	h := []byte{0x02, 0, 0, 0, 0, 0, 0, 0, 0}
	if more {
		h[0] |= 0x01
	}
	if cmd {
		h[0] |= 0x04
	}
	binary.BigEndian.PutUint64(h[1:], size)
	return h
}

// nullGreeting is a ZMTP 3.0 greeting for the NULL mechanism.
func nullGreeting(server bool) []byte {
	g := make([]byte, 64)
	g[0], g[9], g[10], g[11] = 0xff, 0x7f, 3, 0
	copy(g[12:32], "NULL")
	if server {
		g[32] = 1
	}
	return g
}

// fakePeer is a broken or hostile publisher or replay server: each
// connection to addr runs serve, then is read until the client closes it.
type fakePeer struct {
	ln   net.Listener
	wg   sync.WaitGroup
	addr string
}

func newFakePeer(t *testing.T, serve func(nc net.Conn)) *fakePeer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &fakePeer{ln: ln, addr: "tcp://" + ln.Addr().String()}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			p.wg.Add(1)
			go func() {
				defer p.wg.Done()
				defer nc.Close()
				serve(nc)
				_, _ = io.Copy(io.Discard, nc) // until the client closes it
			}()
		}
	}()
	return p
}

func (p *fakePeer) close() {
	_ = p.ln.Close()
	p.wg.Wait()
}

// zmtpThen handshakes as a socket of type typ, reads the client's first
// message (a subscription or request), then writes raw. A client that
// fails sooner than the test wants finds no error to fail with.
func zmtpThen(typ zmq4.SocketType, raw ...[]byte) func(nc net.Conn) {
	return func(nc net.Conn) {
		c, err := zmq4.Open(nc, null.Security(), typ, nil, true /* server */, nil)
		if err != nil {
			return
		}
		if _, err := c.RecvMsg(); err != nil {
			return
		}
		for _, b := range raw {
			if _, err := c.Write(b); err != nil {
				return // the client closed already
			}
		}
	}
}

// rawThen sends a greeting, then raw, without reading the client.
func rawThen(raw ...[]byte) func(nc net.Conn) {
	return func(nc net.Conn) {
		for _, b := range append([][]byte{nullGreeting(true)}, raw...) {
			if _, err := nc.Write(b); err != nil {
				return
			}
		}
	}
}

// TestClientHugeMessage: a publisher or replay server that declares a
// frame of 2^62 bytes (one 9-byte header), in a message or in the
// handshake, or frames that add up past the bound, or a handshake whose
// READY metadata zmq4 cannot parse, makes Subscribe's Recv, Replay and
// FetchSnapshot return an error (ErrMessageTooBig for a size), and leaves
// no goroutine behind once closed. Through zmq4's sockets the test binary
// crashed (makeslice: len out of range; the metadata: index out of
// range).
func TestClientHugeMessage(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	chunk := make([]byte, 16<<10)
	adding := [][]byte{longHeader(true, false, 16<<10), chunk, longHeader(true, false, 16<<10), chunk, longHeader(false, false, 16<<10), chunk}
	badReady := []byte{0x04, 8, 5, 'R', 'E', 'A', 'D', 'Y', 2, 'a'} // a property name of 2 bytes, 1 sent
	for _, tc := range []struct {
		name    string
		serve   func(nc net.Conn)
		opts    []ClientOption
		tooBig  bool
		handsha bool // the handshake fails: Subscribe itself returns the error
	}{
		{"one huge frame", nil, nil, true, false},
		{"frames adding up", nil, []ClientOption{WithMaxMessage(40 << 10)}, true, false},
		{"huge handshake command", rawThen(longHeader(false, true, 1<<62)), nil, true, true},
		{"malformed READY", rawThen(badReady), nil, false, true},
	} {
		check := func(what string, err error) {
			t.Helper()
			if err == nil || (tc.tooBig && !errors.Is(err, ErrMessageTooBig)) {
				t.Errorf("%s, %s: %v, want an error (ErrMessageTooBig: %v)", tc.name, what, err, tc.tooBig)
			}
		}
		for _, kind := range []string{"subscribe", "replay", "snapshot"} {
			serve := tc.serve
			if serve == nil {
				typ := zmq4.Router
				if kind == "subscribe" {
					typ = zmq4.Pub
				}
				raw := [][]byte{longHeader(false, false, 1<<62)}
				if tc.name == "frames adding up" {
					raw = adding
				}
				serve = zmtpThen(typ, raw...)
			}
			p := newFakePeer(t, serve)
			switch kind {
			case "subscribe":
				sub, err := Subscribe(ctx, p.addr, "kv", tc.opts...)
				if tc.handsha {
					check(kind, err)
					break
				}
				if err != nil {
					t.Fatalf("%s: Subscribe: %v", tc.name, err)
				}
				_, _, err = sub.Recv()
				check("Recv", err)
				_ = sub.Close()
			case "replay":
				fs, err := Replay(ctx, p.addr, 0, tc.opts...)
				check(kind, err)
				if fs != nil {
					t.Errorf("%s: replay returned %d frames", tc.name, len(fs))
				}
			case "snapshot":
				_, err := FetchSnapshot(ctx, p.addr, tc.opts...)
				check(kind, err)
			}
			p.close()
		}
	}
}

// TestSubscribeListenHugeMessage: a publisher that connects to a
// SubscribeListen socket and declares a huge frame reaches Recv as
// ErrMessageTooBig; another publisher's batches still arrive after it.
func TestSubscribeListenHugeMessage(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sub, err := SubscribeListen(ctx, "tcp://127.0.0.1:0", "")
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	nc, err := net.Dial("tcp", strings.TrimPrefix(sub.Addr(), "tcp://"))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	c, err := zmq4.Open(nc, null.Security(), zmq4.Pub, nil, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write(longHeader(false, false, 1<<62)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := sub.Recv(); !errors.Is(err, ErrMessageTooBig) {
		t.Fatalf("Recv after a huge frame: %v, want ErrMessageTooBig", err)
	}
	s, err := Listen(ServerConfig{Endpoint: sub.Addr(), Topic: "kv"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	got := recvAll(sub)
	joined(t, s, got, []byte{1})
}

// TestClientMaxMessage: a snapshot over WithMaxMessage's bound fails with
// ErrMessageTooBig and names the bound; the default takes it; a bound that
// is not positive is refused.
func TestClientMaxMessage(t *testing.T) {
	src := &lockedSource{p: NewPublisher(Config{BlockSize: 4})}
	var cs []messages.ResidencyChange
	for h := range uint64(100) {
		cs = append(cs, messages.ResidencyChange{Stored: true, Hash: h + 1, Parent: h, HasParent: h > 0, Tokens: []int64{1000, 2000, 3000, 4000}})
	}
	src.p.Apply(&messages.Residency{Tier: messages.GPU, Changes: cs}, time.Now())
	s, err := Listen(ServerConfig{Endpoint: "tcp://*:0", ReplayEndpoint: "tcp://*:0"}, src)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	_, replayAddr := s.Addrs()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := FetchSnapshot(ctx, replayAddr, WithMaxMessage(512)); !errors.Is(err, ErrMessageTooBig) || !strings.Contains(err.Error(), "512 bytes") {
		t.Fatalf("a snapshot over the bound: %v, want ErrMessageTooBig naming 512 bytes", err)
	}
	snap, err := FetchSnapshot(ctx, replayAddr)
	if err != nil {
		t.Fatal(err)
	}
	v := NewView()
	if err := v.Reset(snap.Seq, snap.Payload); err != nil || len(v.Residency()[MediumGPU]) != 100 {
		t.Fatalf("snapshot under the default bound: %v, %v", v.Residency(), err)
	}
	if _, err := FetchSnapshot(ctx, replayAddr, WithMaxMessage(0)); err == nil || !strings.Contains(err.Error(), "WithMaxMessage(0)") {
		t.Fatalf("WithMaxMessage(0): %v, want it refused", err)
	}
	if _, err := Subscribe(ctx, "tcp://127.0.0.1:1", "", WithMaxMessage(-1)); err == nil {
		t.Fatal("Subscribe WithMaxMessage(-1): no error")
	}
}
