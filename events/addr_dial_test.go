package events

import (
	"context"
	"testing"
	"time"
)

// TestSubscribeAddrEmpty: a Subscriber made by Subscribe dials and binds
// nothing, so Addr is "" (it dereferenced a nil listener and panicked).
func TestSubscribeAddrEmpty(t *testing.T) {
	s, err := Listen(ServerConfig{Endpoint: "tcp://*:0", Topic: "kv@m"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	pub, _ := s.Addrs()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sub, err := Subscribe(ctx, pub, "kv@")
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if a := sub.Addr(); a != "" {
		t.Fatalf("Addr of a dialing Subscriber = %q, want \"\"", a)
	}
}
