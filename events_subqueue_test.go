package kvtier

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/kvtier/kvtier/events"
)

// TestEventsSubscriberQueue: EventsConfig.SubscriberQueue bounds the batches
// waiting for one subscriber (events.ServerConfig.SubscriberQueue), so an
// embedder can cap what a stuck router costs. With a queue of one, a
// subscriber that stops reading loses batches once its connection's buffers
// are full (some megabytes here); under the default of 10000 batches it would
// lose none in this run. Before the field existed the Manager always used the
// default, whatever the embedder needed.
func TestEventsSubscriberQueue(t *testing.T) {
	for _, bad := range []*EventsConfig{{Endpoint: "tcp://*:0", SubscriberQueue: -1}} {
		if _, err := New(Config{GPUBlocks: 8, Events: bad}); !errors.Is(err, ErrBadConfig) {
			t.Errorf("%+v: %v, want ErrBadConfig", bad, err)
		}
	}
	m := newManager(t, Config{GPUBlocks: 2 * subqBlocks, BlockTokens: subqBlockTokens,
		Events: &EventsConfig{Endpoint: "tcp://*:0", Topic: "kv", SubscriberQueue: 1}})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	stuck := stuckSubscriber(t, ctx, m)
	defer stuck.Close()
}

// subqBlockTokens and subqBlocks make each step of stuckSubscriber one
// batch of about 50 KB of token ids.
const subqBlockTokens, subqBlocks = 512, 32

// stuckSubscriber subscribes to m's events (m made with SubscriberQueue 1,
// GPUBlocks 2*subqBlocks and BlockTokens subqBlockTokens), reads one batch
// and no more, and runs requests far past what its connection buffers:
// its queue is full, its writer blocked on a full connection. The caller
// closes it.
func stuckSubscriber(t *testing.T, ctx context.Context, m *Manager) *events.Subscriber {
	t.Helper()
	pub, _ := m.EventEndpoints()
	stuck, err := events.Subscribe(ctx, pub, "")
	if err != nil {
		t.Fatal(err)
	}
	joined := make(chan struct{})
	go func() { // reads one batch, to show it has joined, and no more
		if _, _, err := stuck.Recv(); err == nil {
			close(joined)
		}
	}()

	prompt := make([]int64, subqBlocks*subqBlockTokens) // about 50 KB of token ids a batch
	step := func(i int) {
		for j := range prompt {
			prompt[j] = int64(i*len(prompt) + j)
		}
		seq := uint64(i + 1)
		r, err := m.Allocate(ctx, AllocRequest{Seq: seq, Tokens: prompt})
		if err != nil {
			t.Fatal(err)
		}
		<-r.Ready.Done()
		if err := m.Commit(ctx, seq, len(prompt)); err != nil {
			t.Fatal(err)
		}
		if err := m.Free(ctx, seq); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; ; i++ { // until the subscriber has its first batch
		step(i)
		select {
		case <-joined:
		case <-time.After(20 * time.Millisecond):
			if ctx.Err() != nil {
				t.Fatal("the subscriber never joined")
			}
			continue
		}
		break
	}
	// 1,500 batches of about 50 KB, far past the connection's buffers and
	// far short of the default queue. All of them: a queue of one drops a
	// batch whenever the writer is still sending the one before, long
	// before the connection is full, so the first drop does not show the
	// writer blocked.
	for i := range 1500 {
		step(1000 + i)
	}
	st, err := m.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Events != nil && st.Events.SubscriberDrops > 0 {
		return stuck
	}
	stuck.Close()
	t.Fatalf("no batch dropped for the stuck subscriber with SubscriberQueue 1: %+v", st.Events)
	return nil
}
