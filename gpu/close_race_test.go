//go:build !cuda

package gpu

import (
	"fmt"
	"sync"
	"testing"
	"time"
)

// TestBufferFreeDuringDeviceClose: a host buffer its owner frees while
// Device.Close drains the streams is freed once, not "freed twice" by Close.
func TestBufferFreeDuringDeviceClose(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	d := newHostWithFault(t, func(Direction, []CopyOp) error {
		once.Do(func() { close(entered); <-release })
		return nil
	})
	_, s := arenaStream(t, d)
	used, err := d.AllocHost(4096)
	if err != nil {
		t.Fatal(err)
	}
	other, err := d.AllocHost(4096)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.CopyD2H([]CopyOp{{0, used.Bytes()}}); err != nil {
		t.Fatal(err)
	}
	<-entered
	closed := make(chan any, 1)
	go func() {
		defer func() { closed <- recover() }()
		_ = d.Close()
	}()
	time.Sleep(50 * time.Millisecond) // Close is draining the stream
	if err := other.Free(); err != nil {
		t.Fatal(err)
	}
	close(release)
	if p := <-closed; p != nil {
		t.Fatalf("Device.Close panicked after a concurrent HostBuffer.Free: %v", p)
	}
}

// TestDeviceCloseWaitsForArenaFree: a Device.Close during an Arena.Free
// waits for that arena's streams to drain before it unmaps the host buffers
// their copies use.
func TestDeviceCloseWaitsForArenaFree(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	d := newHostWithFault(t, func(Direction, []CopyOp) error {
		first := false
		once.Do(func() { first = true; close(entered); <-release })
		if first {
			return fmt.Errorf("aborted by the test") // copying now could hit unmapped memory
		}
		return nil
	})
	a, s := arenaStream(t, d)
	buf, err := d.AllocHost(4096)
	if err != nil {
		t.Fatal(err)
	}
	ev, err := s.CopyD2H([]CopyOp{{0, buf.Bytes()}})
	if err != nil {
		t.Fatal(err)
	}
	<-entered
	freed := make(chan error, 1)
	go func() { freed <- a.Free() }()
	time.Sleep(50 * time.Millisecond) // Free is draining the stream
	closeDone := make(chan error, 1)
	go func() { closeDone <- d.Close() }()
	select {
	case <-closeDone:
		bad := !isDone(ev) && buf.Bytes() == nil
		close(release)
		<-freed
		if bad {
			t.Fatal("Device.Close returned, its host buffer unmapped, while a copy into it was still in flight")
		}
	case <-time.After(time.Second): // Close waits for the drain, as it should
		close(release)
		<-freed
		<-closeDone
	}
}

// newHostWithFault is a host device whose copies first call fault; the
// tests close it themselves.
func newHostWithFault(t *testing.T, fault func(Direction, []CopyOp) error) Device {
	t.Helper()
	d, err := NewHost(HostConfig{Fault: fault})
	if err != nil {
		t.Fatal(err)
	}
	return d
}
