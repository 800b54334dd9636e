package actors

import (
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/kvtier/kvtier/events"
	"github.com/kvtier/kvtier/messages"
)

// refusing is a sender whose queue is full for every third frame, and
// whose subscribers' queues dropped 5 batches.
type refusing struct{ got, refused []uint64 }

func (r *refusing) SubscriberDrops() uint64 { return 5 }

func (r *refusing) Publish(f events.Frame) bool {
	if f.Seq%3 == 2 {
		r.refused = append(r.refused, f.Seq)
		return false
	}
	r.got = append(r.got, f.Seq)
	return true
}

// TestEventsActorCountsDrops: a frame the sender refuses is counted as
// dropped, its sequence number is not reused (subscribers see the gap),
// and replay still serves it; the sender's drops for slow subscribers are
// reported too.
func TestEventsActorCountsDrops(t *testing.T) {
	sys := actor.NewActorSystem()
	snd := &refusing{}
	pid := sys.Root.Spawn(actor.PropsFromProducer(NewEventsActor(EventsConfig{Publisher: events.NewPublisher(events.Config{BlockSize: 1}), Server: snd})))
	for h := range uint64(9) {
		sys.Root.Send(pid, &messages.Residency{Tier: messages.GPU, Changes: []messages.ResidencyChange{{Stored: true, Hash: h, Tokens: []int64{1}}}})
	}
	reply := make(chan messages.EventStats, 1)
	sys.Root.Send(pid, &messages.EventsStatsRequest{Reply: reply})
	var st messages.EventStats
	select {
	case st = <-reply:
	case <-time.After(10 * time.Second):
		t.Fatal("no stats")
	}
	if st.Published != 10 || st.Dropped != uint64(len(snd.refused)) || st.Dropped != 3 || st.SubscriberDrops != 5 || st.LastSeq != 9 || st.Resident["GPU"] != 9 {
		t.Fatalf("stats %+v, refused %v", st, snd.refused)
	}
	src := NewEventsSource(sys)
	src.Bind(pid)
	fs, err := src.Replay(t.Context(), 0)
	if err != nil || len(fs) != 10 {
		t.Fatalf("replay: %d frames, %v", len(fs), err)
	}
	for i, f := range fs {
		if f.Seq != uint64(i) {
			t.Fatalf("replay frame %d has seq %d", i, f.Seq)
		}
	}
	if err := sys.Root.StopFuture(pid).Wait(); err != nil {
		t.Fatal(err)
	}
}
