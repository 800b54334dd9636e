package kvtier

import (
	"context"
	"slices"

	"github.com/kvtier/kvtier/messages"
)

// EventEndpoints returns the KV-event sockets bound (ports resolved), ""
// without Config.Events or without a replay endpoint, as a client
// connects to them: a wildcard host is reported as 127.0.0.1 (see
// events.Server.Addrs).
func (m *Manager) EventEndpoints() (pub, replay string) {
	if m.evServer == nil {
		return "", ""
	}
	return m.evServer.Addrs()
}

// EventsSeq returns the sequence number of the last KV-event batch that
// covers every change of residency made before the call (ok false before
// any batch, or without Config.Events). After Flush, a subscriber that has
// applied the batches up to it holds what the tiers hold.
func (m *Manager) EventsSeq(ctx context.Context) (seq uint64, ok bool, err error) {
	if m.evPID == nil {
		return 0, false, m.callable(ctx, false /* changing */)
	}
	reply := make(chan messages.EventsSeq, 1)
	req := &messages.EventsSync{Reply: reply}
	// The way the GPU's changes go (GPU, pinned, index, publisher), behind
	// every change made before the call and the lower tiers' own: should
	// one of them have stopped for good, nothing answers.
	down, stop := m.anyDown(m.pinPID, m.idxPID, m.evPID)
	defer stop()
	r, err := askDown(ctx, m, m.gpuPID, down, nil, req, reply)
	return r.Seq, r.OK, err
}

// Residency returns the hashes of the blocks each local tier serves hits
// from, sorted: the GPU's from its block pool, the pinned and disk tiers'
// from the prefix index that lookups consult. A diagnostic: it copies
// every hash. The remote tier is shared and left out.
func (m *Manager) Residency(ctx context.Context) (map[Tier][]uint64, error) {
	req := &messages.ResidencyQuery{Reply: make(chan map[Tier][]uint64, 1)}
	out, err := ask(ctx, m, m.gpuPID, nil, req, req.Reply)
	if err != nil {
		return nil, err
	}
	if m.idxPID != nil {
		req = &messages.ResidencyQuery{Reply: make(chan map[Tier][]uint64, 1)}
		low, err := ask(ctx, m, m.idxPID, nil, req, req.Reply)
		if err != nil {
			return nil, err
		}
		for t, hs := range low {
			out[t] = hs
		}
	}
	for _, hs := range out {
		slices.Sort(hs)
	}
	return out, nil
}
