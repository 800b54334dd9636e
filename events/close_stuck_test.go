package events

import (
	"context"
	"encoding/binary"
	"sync"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
)

// bigSource answers every replay with many large frames, and says when it
// has answered.
type bigSource struct {
	frames   []Frame
	once     sync.Once
	answered chan struct{}
}

func (s *bigSource) Replay(context.Context, uint64) ([]Frame, error) {
	s.once.Do(func() { close(s.answered) })
	return s.frames, nil
}

func (s *bigSource) Snapshot(context.Context) (Frame, error) { return s.frames[0], nil }

// TestCloseWithStuckReplayClient: a replay client that asks and never
// reads its answer fills the connection, so the write of the answer
// blocks. Close must still return: it closes the connection rather than
// waiting for that write (it hung for ever, as the write has no deadline
// and only closing the socket ends it).
func TestCloseWithStuckReplayClient(t *testing.T) {
	src := &bigSource{answered: make(chan struct{})}
	for i := range 256 {
		src.frames = append(src.frames, Frame{Seq: uint64(i), Payload: make([]byte, 256<<10)}) // 64 MiB in all
	}
	s, err := Listen(ServerConfig{Endpoint: "tcp://*:0", ReplayEndpoint: "tcp://*:0"}, src)
	if err != nil {
		t.Fatal(err)
	}
	_, replayAddr := s.Addrs()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	d := zmq4.NewDealer(ctx) // asks, and never calls Recv
	defer d.Close()
	if err := d.Dial(replayAddr); err != nil {
		t.Fatal(err)
	}
	if err := d.Send(zmq4.NewMsgFrom(nil, binary.BigEndian.AppendUint64(nil, 0))); err != nil {
		t.Fatal(err)
	}
	<-src.answered
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	select {
	case <-closed:
	case <-time.After(30 * time.Second):
		t.Fatal("Close hung behind a replay answer its client does not read")
	}
}

// TestStuckReplayClientDelaysNoOther: while one replay client's answer is
// stuck in its full connection, another client's replay is answered.
// (zmq4's ROUTER socket was served one request at a time by one
// goroutine: the stuck write held up every later request until Close, and
// the second client's Replay timed out.)
func TestStuckReplayClientDelaysNoOther(t *testing.T) {
	src := &bigSource{answered: make(chan struct{})}
	payload := make([]byte, 256<<10)
	for i := range 256 {
		src.frames = append(src.frames, Frame{Seq: uint64(i), Payload: payload}) // 64 MiB on the wire
	}
	s, err := Listen(ServerConfig{Endpoint: "tcp://*:0", ReplayEndpoint: "tcp://*:0"}, src)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	_, replayAddr := s.Addrs()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d := zmq4.NewDealer(ctx) // asks, and never calls Recv
	defer d.Close()
	if err := d.Dial(replayAddr); err != nil {
		t.Fatal(err)
	}
	if err := d.Send(zmq4.NewMsgFrom(nil, binary.BigEndian.AppendUint64(nil, 0))); err != nil {
		t.Fatal(err)
	}
	<-src.answered
	fs, err := Replay(ctx, replayAddr, 0)
	if err != nil || len(fs) != len(src.frames) {
		t.Fatalf("a second client's replay: %d frames, %v (want %d)", len(fs), err, len(src.frames))
	}
}
