package events

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/go-zeromq/zmq4/security/null"
)

// Helpers for the tests that play a raw ZMTP peer against a Server.

// dialRaw opens a plain TCP connection to a tcp:// address a Server reports.
func dialRaw(t *testing.T, addr string) net.Conn {
	t.Helper()
	nc, err := net.Dial("tcp", strings.TrimPrefix(addr, "tcp://"))
	if err != nil {
		t.Fatal(err)
	}
	return nc
}

// dialZMTP dials addr and completes a ZMTP handshake as a typ peer. Close
// the net.Conn when done.
func dialZMTP(t *testing.T, addr string, typ zmq4.SocketType) (*zmq4.Conn, net.Conn) {
	t.Helper()
	nc := dialRaw(t, addr)
	c, err := zmq4.Open(nc, null.Security(), typ, nil, false, nil)
	if err != nil {
		_ = nc.Close()
		t.Fatalf("%s: handshake as %v: %v", addr, typ, err)
	}
	return c, nc
}

// closedByServer fails the test unless the server closes nc within 30 s
// (the read ends in EOF or a reset, not at the deadline), then closes nc.
func closedByServer(t *testing.T, nc net.Conn, what string) {
	t.Helper()
	defer nc.Close()
	_ = nc.SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.ReadAll(nc); errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("%s: the server kept the connection", what)
	}
}

// stillServes checks that both of s's ends still serve: a subscriber joins
// and a replay from 0 answers.
func stillServes(t *testing.T, s *Server, after string) {
	t.Helper()
	pubAddr, replayAddr := s.Addrs()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sub, err := Subscribe(ctx, pubAddr, "kv")
	if err != nil {
		t.Fatalf("subscribe after %s: %v", after, err)
	}
	defer sub.Close()
	joined(t, s, recvAll(sub), nil)
	if _, err := Replay(ctx, replayAddr, 0); err != nil {
		t.Fatalf("replay after %s: %v", after, err)
	}
}
