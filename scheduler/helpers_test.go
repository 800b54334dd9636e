package scheduler

import (
	"context"
	"testing"
	"time"

	"github.com/kvtier/kvtier/trace"
)

// unitCost is a simple CostModel: a step costs Step plus PerToken for each
// token computed; a transfer costs a per-token time of its tier.
type unitCost struct {
	Step, PerToken     time.Duration
	PinnedPerToken     time.Duration
	DiskPerToken       time.Duration
	TransferCalls      int
	LastTransferTokens int
}

func (c *unitCost) StepTime(batch []Work) time.Duration {
	d := c.Step
	for _, w := range batch {
		d += time.Duration(w.Tokens) * c.PerToken
	}
	return d
}

func (c *unitCost) TransferTime(from Tier, tokens int) time.Duration {
	switch from {
	case TierPinned:
		return time.Duration(tokens) * c.PinnedPerToken
	case TierDisk:
		return time.Duration(tokens) * c.DiskPerToken
	}
	return 0
}

// simpleCost: 10 ms a step plus 10 µs a token.
func simpleCost() *unitCost {
	return &unitCost{Step: 10 * time.Millisecond, PerToken: 10 * time.Microsecond,
		PinnedPerToken: time.Microsecond, DiskPerToken: 20 * time.Microsecond}
}

// req makes a request arriving at ms with a prompt of in tokens whose blocks
// are the hash ids base, base+1, ...: requests with different bases share
// nothing.
func req(ms int64, in, out int, base int64) trace.Request {
	n := (in + trace.BlockTokens - 1) / trace.BlockTokens
	ids := make([]int64, n)
	for i := range ids {
		ids[i] = base + int64(i)
	}
	return trace.Request{Timestamp: ms, InputLength: in, OutputLength: out, HashIDs: ids}
}

// steps drives s to the end and returns every step's report.
func steps(t *testing.T, s *Scheduler) []StepReport {
	t.Helper()
	var reps []StepReport
	for !s.Done() {
		rep, err := s.Step(context.Background())
		if err != nil {
			t.Fatalf("step %d: %v", len(reps), err)
		}
		reps = append(reps, rep)
		if len(reps) > 1_000_000 {
			t.Fatal("no end in sight")
		}
	}
	return reps
}

func mustNew(t *testing.T, c Cache, reqs []trace.Request, cfg Config) *Scheduler {
	t.Helper()
	s, err := New(c, reqs, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func scheduledTokens(rep StepReport) int {
	n := 0
	for _, sc := range rep.Scheduled {
		n += sc.Tokens
	}
	return n
}
