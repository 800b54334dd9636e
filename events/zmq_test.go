package events

import (
	"context"
	"encoding/binary"
	"errors"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
	"go.uber.org/goleak"

	"github.com/kvtier/kvtier/messages"
)

// lockedSource serves a Publisher the test goroutine also feeds.
type lockedSource struct {
	mu sync.Mutex
	p  *Publisher
}

func (s *lockedSource) Replay(_ context.Context, from uint64) ([]Frame, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.p.Replay(from), nil
}

func (s *lockedSource) Snapshot(context.Context) (Frame, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.p.Snapshot(time.Now()), nil
}

// TestOverZMQ: frames on the wire are [topic, 8-byte big-endian seq,
// payload]; a subscriber gets them in order; replay answers from a
// sequence number and ends with vLLM's end marker (checked with a raw
// DEALER, not this package's client); a snapshot plus later batches equals
// the publisher's residency.
func TestOverZMQ(t *testing.T) {
	src := &lockedSource{p: NewPublisher(Config{BlockSize: 1})}
	s, err := Listen(ServerConfig{Endpoint: "tcp://*:0", ReplayEndpoint: "tcp://*:0", Topic: "kv@pod-a@model"}, src)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	pubAddr, replayAddr := s.Addrs()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	raw := zmq4.NewSub(ctx)
	defer raw.Close()
	if err := raw.Dial(pubAddr); err != nil {
		t.Fatal(err)
	}
	if err := raw.SetOption(zmq4.OptionSubscribe, "kv@"); err != nil {
		t.Fatal(err)
	}
	publish := func(r *messages.Residency) {
		src.mu.Lock()
		f, ok := src.p.Apply(r, time.Now())
		src.mu.Unlock()
		if ok && !s.Publish(f) {
			t.Fatal("queue full")
		}
	}
	// A SUB socket joins asynchronously: publish until one arrives.
	var first zmq4.Msg
	got := make(chan zmq4.Msg, 1)
	go func() {
		m, err := raw.Recv()
		if err == nil {
			got <- m
		}
	}()
	for h := uint64(0); ; h++ {
		publish(&messages.Residency{Tier: messages.GPU, Changes: []messages.ResidencyChange{{Stored: true, Hash: h, Tokens: []int64{int64(h)}}}})
		select {
		case first = <-got:
		case <-time.After(20 * time.Millisecond):
			continue
		}
		break
	}
	if len(first.Frames) != 3 || string(first.Frames[0]) != "kv@pod-a@model" || len(first.Frames[1]) != 8 {
		t.Fatalf("frames %q", first.Frames)
	}
	seq := binary.BigEndian.Uint64(first.Frames[1])
	if b, err := DecodeBatch(first.Frames[2]); err != nil || b.Events[0].Hashes[0] != seq {
		t.Fatalf("payload of seq %d: %+v %v", seq, b, err)
	}
	// Replay from 0 through a raw DEALER: [ "", seq ] in, then the batches
	// and [-1, ""].
	d := zmq4.NewDealer(ctx)
	defer d.Close()
	if err := d.Dial(replayAddr); err != nil {
		t.Fatal(err)
	}
	if err := d.Send(zmq4.NewMsgFrom(nil, binary.BigEndian.AppendUint64(nil, 0))); err != nil {
		t.Fatal(err)
	}
	var seqs []uint64
	for {
		m, err := d.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if len(m.Frames) != 3 || len(m.Frames[0]) != 0 {
			t.Fatalf("replay reply %q", m.Frames)
		}
		if int64(binary.BigEndian.Uint64(m.Frames[1])) == -1 {
			if len(m.Frames[2]) != 0 {
				t.Fatal("end marker with a payload")
			}
			break
		}
		seqs = append(seqs, binary.BigEndian.Uint64(m.Frames[1]))
	}
	if len(seqs) < int(seq)+1 || seqs[0] != 0 || seqs[seq] != seq {
		t.Fatalf("replayed %v, want 0..%d at least", seqs, seq)
	}
	// Snapshot, then a batch after it, through the package's client.
	snap, err := FetchSnapshot(ctx, replayAddr)
	if err != nil {
		t.Fatal(err)
	}
	publish(&messages.Residency{Tier: messages.GPU, Changes: []messages.ResidencyChange{{Hash: 0}}})
	v := NewView()
	if err := v.Reset(snap.Seq, snap.Payload); err != nil {
		t.Fatal(err)
	}
	after, err := Replay(ctx, replayAddr, snap.Seq+1)
	if err != nil || len(after) != 1 {
		t.Fatalf("replay after the snapshot: %d frames, %v", len(after), err)
	}
	if err := v.Apply(after[0].Seq, after[0].Payload); err != nil {
		t.Fatal(err)
	}
	src.mu.Lock()
	want := src.p.Residency()
	src.mu.Unlock()
	if !reflect.DeepEqual(v.Residency(), want) {
		t.Fatalf("view %v, publisher %v", v.Residency(), want)
	}
}

// TestConnectingPublisher: an endpoint with a named host connects to a
// router that binds (vLLM's rule), retrying until it listens.
func TestConnectingPublisher(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sub, err := SubscribeListen(ctx, "tcp://127.0.0.1:0", "")
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	p := NewPublisher(Config{BlockSize: 1})
	s, err := Listen(ServerConfig{Endpoint: sub.Addr()}, &lockedSource{p: p})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if pub, _ := s.Addrs(); pub != sub.Addr() {
		t.Fatalf("Addrs %q, want the endpoint dialed %q", pub, sub.Addr())
	}
	got := make(chan Frame, 1)
	go func() {
		if _, f, err := sub.Recv(); err == nil {
			got <- f
		}
	}()
	for {
		f, _ := p.Apply(&messages.Residency{Tier: messages.Disk, Changes: []messages.ResidencyChange{{Stored: true, Hash: uint64(time.Now().UnixNano())}}}, time.Now())
		s.Publish(f)
		select {
		case f := <-got:
			if _, err := DecodeBatch(f.Payload); err != nil {
				t.Fatal(err)
			}
			return
		case <-time.After(20 * time.Millisecond):
		case <-ctx.Done():
			t.Fatal("nothing arrived")
		}
	}
}

// TestSubscribeErrors: a Subscribe or SubscribeListen that fails returns an
// error naming the endpoint and leaves no goroutine behind while the
// caller's context stays alive. (The socket it made is closed too; nothing
// outside zmq4 can observe that.)
func TestSubscribeErrors(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := Subscribe(ctx, "nosuch://127.0.0.1:1", ""); err == nil || !strings.Contains(err.Error(), "nosuch://127.0.0.1:1") {
		t.Fatalf("Subscribe to a bad endpoint: %v, want an error naming it", err)
	}
	if _, err := SubscribeListen(ctx, "tcp://256.0.0.1:0", ""); err == nil || !strings.Contains(err.Error(), "256.0.0.1") {
		t.Fatalf("SubscribeListen on a bad address: %v, want an error naming it", err)
	}
}

// failingSource answers nothing: with block it waits for the server's
// deadline, else it fails at once with err.
type failingSource struct {
	block bool
	err   error
}

func (s failingSource) Replay(ctx context.Context, _ uint64) ([]Frame, error) {
	if s.block {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return nil, s.err
}

func (s failingSource) Snapshot(ctx context.Context) (Frame, error) {
	_, err := s.Replay(ctx, 0)
	return Frame{}, err
}

// TestReplayFailureIsAnError: a replay or snapshot the server's Source
// fails or times out reaches the client as a *ReplayError matching
// ErrNoReplay (and context.DeadlineExceeded for a timeout), not as an
// empty replay; on the wire it is the end marker's sequence number with a
// "kvtier-replay-failed <code>: ..." payload, and a request of the wrong
// size is refused the same way.
func TestReplayFailureIsAnError(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, tc := range []struct {
		name   string
		src    failingSource
		code   string
		detail string
	}{
		{"timeout", failingSource{block: true}, ReplayTimedOut, "deadline exceeded"},
		{"error", failingSource{err: errors.New("the actor is gone")}, ReplayFailed, "the actor is gone"},
	} {
		s, err := Listen(ServerConfig{Endpoint: "tcp://*:0", ReplayEndpoint: "tcp://*:0", ReplayTimeout: 20 * time.Millisecond}, tc.src)
		if err != nil {
			t.Fatal(err)
		}
		_, replayAddr := s.Addrs()
		check := func(what string, err error) {
			t.Helper()
			var re *ReplayError
			if !errors.As(err, &re) || !errors.Is(err, ErrNoReplay) {
				t.Fatalf("%s %s: %v, want a *ReplayError matching ErrNoReplay", tc.name, what, err)
			}
			if re.Code != tc.code || !strings.Contains(re.Detail, tc.detail) {
				t.Fatalf("%s %s: code %q detail %q, want %q and %q", tc.name, what, re.Code, re.Detail, tc.code, tc.detail)
			}
			if got := errors.Is(err, context.DeadlineExceeded); got != (tc.code == ReplayTimedOut) {
				t.Fatalf("%s %s: errors.Is(err, context.DeadlineExceeded) = %v", tc.name, what, got)
			}
		}
		fs, err := Replay(ctx, replayAddr, 0)
		if fs != nil {
			t.Fatalf("%s: a failed replay returned %d frames", tc.name, len(fs))
		}
		check("replay", err)
		_, err = FetchSnapshot(ctx, replayAddr)
		check("snapshot", err)
		// zmq4's ROUTER may report closing a connection the client closed
		// first ("use of closed network connection"): not what this tests.
		_ = s.Close()
	}

	// The wire form, through a raw DEALER, for a request of 3 bytes.
	s, err := Listen(ServerConfig{Endpoint: "tcp://*:0", ReplayEndpoint: "tcp://*:0"}, failingSource{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	_, replayAddr := s.Addrs()
	d := zmq4.NewDealer(ctx)
	defer d.Close()
	if err := d.Dial(replayAddr); err != nil {
		t.Fatal(err)
	}
	if err := d.Send(zmq4.NewMsgFrom(nil, []byte{0, 0, 7})); err != nil {
		t.Fatal(err)
	}
	m, err := d.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Frames) != 3 || len(m.Frames[0]) != 0 || int64(binary.BigEndian.Uint64(m.Frames[1])) != -1 ||
		!strings.HasPrefix(string(m.Frames[2]), "kvtier-replay-failed refused: ") {
		t.Fatalf("a refused request answered %q, want [\"\", -1, \"kvtier-replay-failed refused: ...\"]", m.Frames)
	}
	if _, err := DecodeBatch(m.Frames[2]); !errors.Is(err, ErrDecode) {
		t.Fatalf("the failure payload decodes as a batch: %v", err)
	}
}

// slowSource answers a replay only after its context ends, and then takes
// a while to return, as an actor's reply would.
type slowSource struct {
	entered  chan struct{}
	returned atomic.Bool
}

func (s *slowSource) Replay(ctx context.Context, _ uint64) ([]Frame, error) {
	close(s.entered)
	<-ctx.Done()
	time.Sleep(100 * time.Millisecond) // the slow return Close must wait for
	s.returned.Store(true)
	return nil, ctx.Err()
}

func (s *slowSource) Snapshot(ctx context.Context) (Frame, error) {
	_, err := s.Replay(ctx, 0)
	return Frame{}, err
}

// TestCloseWaitsForReplay: Close cancels a replay request in progress and
// returns only after the Source call returned, so no goroutine of the
// Server still runs (or calls the Source) once Close has returned.
func TestCloseWaitsForReplay(t *testing.T) {
	src := &slowSource{entered: make(chan struct{})}
	s, err := Listen(ServerConfig{Endpoint: "tcp://*:0", ReplayEndpoint: "tcp://*:0", ReplayTimeout: time.Minute}, src)
	if err != nil {
		t.Fatal(err)
	}
	_, replayAddr := s.Addrs()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	asked := make(chan error, 1)
	go func() {
		_, err := Replay(ctx, replayAddr, 0)
		asked <- err
	}()
	select {
	case <-src.entered:
	case <-ctx.Done():
		t.Fatal("the replay request never reached the Source")
	}
	_ = s.Close()
	if !src.returned.Load() {
		t.Fatal("Close returned while the Source was still answering")
	}
	cancel()
	<-asked
}
