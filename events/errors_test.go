package events

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestErrBadEndpoint: an endpoint that cannot work at all is refused with
// ErrBadEndpoint, by the server and the clients alike, so a caller can tell
// it from a busy port; a refused Listen binds nothing.
func TestErrBadEndpoint(t *testing.T) {
	for _, ep := range []string{
		"inproc://kv", "udp://*:5557", "kv", // schemes
		"tcp://*:notaport", "tcp://*:99999", // bound, bad port
		"tcp://router", "tcp://router:port", "tcp://:5557", "tcp://router:65536", // connected, no host or port
		"tcp://127.0.0.1:0", // connected to port 0, which no one listens on
	} {
		s, err := Listen(ServerConfig{Endpoint: ep}, nil)
		if !errors.Is(err, ErrBadEndpoint) || errors.Is(err, ErrBadConfig) {
			t.Errorf("Listen(%q): %v, want ErrBadEndpoint", ep, err)
		}
		if s != nil {
			s.Close()
		}
	}
	// A bad replay endpoint: the PUB socket bound first is released.
	s, err := Listen(ServerConfig{Endpoint: "tcp://*:0", ReplayEndpoint: "inproc://r"}, failingSource{})
	if !errors.Is(err, ErrBadEndpoint) || s != nil {
		t.Errorf("a bad replay endpoint: %v, want ErrBadEndpoint", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := Subscribe(ctx, "udp://127.0.0.1:5557", ""); !errors.Is(err, ErrBadEndpoint) {
		t.Errorf("Subscribe on udp://: %v, want ErrBadEndpoint", err)
	}
	// Port 0 can never be dialed: refused at once, not retried until ctx ends.
	if _, err := Subscribe(ctx, "tcp://127.0.0.1:0", ""); !errors.Is(err, ErrBadEndpoint) || ctx.Err() != nil {
		t.Errorf("Subscribe on port 0: %v, want ErrBadEndpoint at once", err)
	}
	if _, err := Replay(ctx, "tcp://127.0.0.1:0", 0); !errors.Is(err, ErrBadEndpoint) || ctx.Err() != nil {
		t.Errorf("Replay on port 0: %v, want ErrBadEndpoint at once", err)
	}
	if _, err := SubscribeListen(ctx, "tcp://*:notaport", ""); !errors.Is(err, ErrBadEndpoint) {
		t.Errorf("SubscribeListen on a bad port: %v, want ErrBadEndpoint", err)
	}
	// A good endpoint still serves.
	s, err = Listen(ServerConfig{Endpoint: "tcp://*:0"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
}

// TestErrBadConfig: a ServerConfig or ClientOption refused is ErrBadConfig,
// not ErrBadEndpoint.
func TestErrBadConfig(t *testing.T) {
	if _, err := Listen(ServerConfig{Endpoint: "tcp://*:0", ReplayEndpoint: "tcp://127.0.0.1:0"}, nil); !errors.Is(err, ErrBadConfig) || errors.Is(err, ErrBadEndpoint) {
		t.Errorf("a replay endpoint with no Source: %v, want ErrBadConfig", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := Subscribe(ctx, "tcp://127.0.0.1:1", "", WithMaxMessage(0)); !errors.Is(err, ErrBadConfig) {
		t.Errorf("WithMaxMessage(0): %v, want ErrBadConfig", err)
	}
}
