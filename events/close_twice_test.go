package events

import (
	"sync"
	"testing"
)

// TestPublishAfterClose: Publish after Close drops its batch (false), and a
// second Close returns nil; Publish concurrent with Close either queues or
// drops its batch. Both panicked: Publish sent on the closed queue, and
// Close closed it again. A user's shutdown path can race them.
func TestPublishAfterClose(t *testing.T) {
	s, err := Listen(ServerConfig{Endpoint: "tcp://*:0", Topic: "kv"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s.Publish(Frame{Seq: 1}) {
		t.Error("Publish after Close queued a batch")
	}
	if err := s.Close(); err != nil {
		t.Errorf("a second Close: %v", err)
	}
}

// TestPublishConcurrentWithClose: publishers and several Closes race; no
// panic, every Close returns the same (nil) error, and once Close has
// returned every Publish reports a drop.
func TestPublishConcurrentWithClose(t *testing.T) {
	s, err := Listen(ServerConfig{Endpoint: "tcp://*:0", Topic: "kv", QueueSize: 16}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for seq := range uint64(2000) {
				s.Publish(Frame{Seq: uint64(i)<<32 | seq})
			}
		}()
	}
	errs := make([]error, 3)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			errs[i] = s.Close()
		}()
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("Close %d: %v", i, err)
		}
	}
	if s.Publish(Frame{}) {
		t.Error("Publish after Close queued a batch")
	}
}
