package scheduler

import "time"

type phase uint8

const (
	phasePending    phase = iota + 1 // not yet arrived
	phaseWaiting                     // in the waiting queue, holds no blocks
	phaseOnboarding                  // admitted, prefix still loading from a lower tier
	phaseRunning                     // admitted, computing
	phaseFinished
	phaseRejected // can never fit in the GPU cache: ended without being served
)

// sequence is one request's state. It is owned by the Scheduler.
type sequence struct {
	id      SeqID
	idx     int // index in the trace
	arrival time.Duration
	salt    string
	tokens  []int64 // prompt, then the output tokens sampled so far
	prompt  int     // prompt length
	target  int     // output tokens to produce
	phase   phase

	generated int           // output tokens sampled
	computed  int           // leading tokens whose KV is computed or loaded
	allocated int           // leading tokens the cache holds blocks for
	fill      int           // len(tokens) at the last admission: computing up to it is prefill
	firstOut  bool          // the first output token has been sampled
	ttft      time.Duration // arrival to the first output token, once firstOut
	resolved  bool          // an admission's prefix was counted: each one counted since is a readmission's

	admitted time.Duration
	order    uint64 // admission counter: higher is more recent

	// Prefix reported at admission and the load in flight.
	gpu, pinned, disk, remote int
	ready                     <-chan struct{}
	loaded                    func() int
	readyAt                   time.Duration // modelled end of the load
	deadline                  time.Duration // Timeout policy
}

// nextToken is the deterministic token sampled after the sequence's current
// tokens.
func (s *sequence) nextToken(vocab int) int64 {
	z := uint64(s.id)*0x9E3779B97F4A7C15 + uint64(s.generated)*0xBF58476D1CE4E5B9
	z ^= z >> 31
	return int64(z % uint64(vocab))
}

// reset returns a preempted sequence to the waiting state, keeping its tokens.
func (s *sequence) reset() {
	s.phase = phaseWaiting
	s.computed, s.allocated, s.fill = 0, 0, 0
	s.gpu, s.pinned, s.disk, s.remote = 0, 0, 0, 0
	s.ready, s.loaded = nil, nil
}
