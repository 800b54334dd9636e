package trace

import (
	"errors"
	"math"
	"reflect"
	"testing"
)

func smallSyntheticConfig() SyntheticConfig {
	c := DefaultSyntheticConfig()
	c.Sessions = 200
	c.Concurrency = 8
	return c
}

func TestSyntheticDeterministic(t *testing.T) {
	cfg := smallSyntheticConfig()
	a, err := Synthetic(cfg)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Synthetic(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(a, b) {
		t.Fatal("equal configs gave different traces")
	}
	cfg.Seed++
	c, err := Synthetic(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if reflect.DeepEqual(a, c) {
		t.Fatal("a different seed gave the same trace")
	}
	if cfg != func() SyntheticConfig { c := smallSyntheticConfig(); c.Seed++; return c }() {
		t.Fatal("Synthetic modified its config")
	}
}

// TestSyntheticShape checks the Mooncake invariants: sorted timestamps, one id
// per started block, dense ids, one predecessor per id, no repeat in a request.
func TestSyntheticShape(t *testing.T) {
	reqs, err := Synthetic(smallSyntheticConfig())
	if err != nil {
		t.Fatal(err)
	}
	if len(reqs) < 200 {
		t.Fatalf("%d requests for 200 sessions", len(reqs))
	}
	pred := make(map[int64]int64) // id -> predecessor, -1 for a first block
	var maxID int64 = -1
	for i, r := range reqs {
		if i > 0 && r.Timestamp < reqs[i-1].Timestamp {
			t.Fatalf("request %d: timestamp %d before %d", i, r.Timestamp, reqs[i-1].Timestamp)
		}
		if want := (r.InputLength + BlockTokens - 1) / BlockTokens; len(r.HashIDs) != want {
			t.Fatalf("request %d: %d ids for %d tokens", i, len(r.HashIDs), r.InputLength)
		}
		if r.InputLength > smallSyntheticConfig().MaxInputTokens {
			t.Fatalf("request %d: input %d over the cap", i, r.InputLength)
		}
		seen := make(map[int64]bool)
		for j, id := range r.HashIDs {
			if seen[id] {
				t.Fatalf("request %d repeats id %d", i, id)
			}
			seen[id] = true
			if id > maxID+1 {
				t.Fatalf("request %d: id %d skips %d: ids are not dense", i, id, maxID+1)
			}
			maxID = max(maxID, id)
			p := int64(-1)
			if j > 0 {
				p = r.HashIDs[j-1]
			}
			if old, ok := pred[id]; ok && old != p {
				t.Fatalf("id %d has predecessors %d and %d", id, old, p)
			}
			pred[id] = p
		}
	}
	// Poisson at 4/s: the mean gap should be near 250 ms.
	gap := float64(reqs[len(reqs)-1].Timestamp-reqs[0].Timestamp) / float64(len(reqs)-1)
	if math.Abs(gap-250) > 50 {
		t.Fatalf("mean inter-arrival %.1f ms, want about 250", gap)
	}
}

// TestSyntheticTurnsExtendPrompt runs one conversation at a time with exactly
// three turns each, so requests 3k..3k+2 are one conversation, and checks that
// the whole blocks of each turn's prompt are a prefix of the next turn's ids and
// that the system prompts are shared.
func TestSyntheticTurnsExtendPrompt(t *testing.T) {
	cfg := smallSyntheticConfig()
	cfg.Concurrency = 1
	cfg.Turns = IntRange{3, 3}
	cfg.MaxInputTokens = cfg.SystemTokens.Max + 3*(cfg.UserTokens.Max+cfg.OutputTokens.Max)
	reqs, err := Synthetic(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(reqs) != 3*cfg.Sessions {
		t.Fatalf("%d requests, want %d", len(reqs), 3*cfg.Sessions)
	}
	firsts := make(map[int64]int) // first id -> sessions starting with it
	for i := 0; i < len(reqs); i += 3 {
		firsts[reqs[i].HashIDs[0]]++
		for j := i + 1; j < i+3; j++ {
			prev, cur := reqs[j-1], reqs[j]
			if cur.InputLength < prev.InputLength+prev.OutputLength+cfg.UserTokens.Min {
				t.Fatalf("request %d: input %d does not extend %d + %d output", j, cur.InputLength, prev.InputLength, prev.OutputLength)
			}
			whole := prev.InputLength / BlockTokens
			if !reflect.DeepEqual(cur.HashIDs[:whole], prev.HashIDs[:whole]) {
				t.Fatalf("request %d: whole blocks of the earlier prompt are not a prefix:\n%v\n%v", j, prev.HashIDs, cur.HashIDs)
			}
			if whole < len(prev.HashIDs) && cur.HashIDs[whole] == prev.HashIDs[whole] {
				t.Fatalf("request %d reuses the partial last block of the earlier prompt", j)
			}
		}
	}
	// Conversations share nothing past their system prompt.
	owner := make(map[int64]int)
	for i, r := range reqs {
		for j, id := range r.HashIDs {
			if o, ok := owner[id]; ok && o != i/3 && j >= cfg.SystemTokens.Max/BlockTokens {
				t.Fatalf("id %d at index %d is shared by conversations %d and %d", id, j, o, i/3)
			}
			owner[id] = i / 3
		}
	}
	if len(firsts) > cfg.SystemPrompts {
		t.Fatalf("%d distinct first blocks, want at most %d system prompts", len(firsts), cfg.SystemPrompts)
	}
	for id, n := range firsts {
		if n < 10 {
			t.Fatalf("system prompt block %d starts only %d of %d sessions", id, n, cfg.Sessions)
		}
	}
}

func TestSyntheticValidation(t *testing.T) {
	cases := []struct {
		name string
		edit func(*SyntheticConfig)
	}{
		{"no sessions", func(c *SyntheticConfig) { c.Sessions = 0 }},
		{"zero turns", func(c *SyntheticConfig) { c.Turns = IntRange{0, 3} }},
		{"inverted turns", func(c *SyntheticConfig) { c.Turns = IntRange{4, 3} }},
		{"too many", func(c *SyntheticConfig) { c.Sessions = 1 << 22; c.Turns = IntRange{1, 8} }},
		{"no concurrency", func(c *SyntheticConfig) { c.Concurrency = 0 }},
		{"zero rate", func(c *SyntheticConfig) { c.RatePerSecond = 0 }},
		{"NaN rate", func(c *SyntheticConfig) { c.RatePerSecond = math.NaN() }},
		{"infinite rate", func(c *SyntheticConfig) { c.RatePerSecond = math.Inf(1) }},
		{"negative system prompts", func(c *SyntheticConfig) { c.SystemPrompts = -1 }},
		{"empty system prompt", func(c *SyntheticConfig) { c.SystemTokens = IntRange{0, 10} }},
		{"empty user text", func(c *SyntheticConfig) { c.UserTokens = IntRange{0, 10} }},
		{"negative output", func(c *SyntheticConfig) { c.OutputTokens = IntRange{-1, 10} }},
		{"cap below first turn", func(c *SyntheticConfig) { c.MaxInputTokens = 100 }},
	}
	for _, tc := range cases {
		cfg := DefaultSyntheticConfig()
		tc.edit(&cfg)
		reqs, err := Synthetic(cfg)
		if !errors.Is(err, ErrSyntheticConfig) || reqs != nil {
			t.Errorf("%s: got %d requests, error %v; want ErrSyntheticConfig", tc.name, len(reqs), err)
		}
	}
	// SystemTokens does not matter without system prompts.
	cfg := DefaultSyntheticConfig()
	cfg.SystemPrompts = 0
	cfg.SystemTokens = IntRange{}
	cfg.Sessions = 10
	reqs, err := Synthetic(cfg)
	if err != nil || len(reqs) == 0 {
		t.Fatalf("no system prompts: %d requests, %v", len(reqs), err)
	}
}

// TestSyntheticNoOverflow: every config Validate accepts runs without a
// panic, and those whose ranges or sums would overflow an int are refused.
func TestSyntheticNoOverflow(t *testing.T) {
	const maxInt = math.MaxInt
	cases := []struct {
		name string
		edit func(*SyntheticConfig)
	}{
		{"output range to MaxInt", func(c *SyntheticConfig) { c.OutputTokens = IntRange{0, maxInt} }},
		{"output range to MaxInt-1", func(c *SyntheticConfig) { c.OutputTokens = IntRange{0, maxInt - 1} }},
		{"user range to MaxInt", func(c *SyntheticConfig) {
			c.UserTokens = IntRange{1, maxInt}
			c.MaxInputTokens = maxInt
		}},
		{"system range to MaxInt", func(c *SyntheticConfig) {
			c.SystemTokens = IntRange{1, maxInt}
			c.MaxInputTokens = maxInt
		}},
		{"system plus user wraps", func(c *SyntheticConfig) {
			c.SystemTokens = IntRange{maxInt/2 + 1, maxInt/2 + 1}
			c.UserTokens = IntRange{maxInt/2 + 1, maxInt/2 + 1}
			c.MaxInputTokens = 100
		}},
		{"prompt plus answer wraps", func(c *SyntheticConfig) {
			c.Turns = IntRange{2, 2}
			c.MaxInputTokens = maxInt - 10
			c.UserTokens = IntRange{1, 1 << 20}
			c.OutputTokens = IntRange{maxInt / 2, maxInt / 2}
		}},
		{"sessions times turns wraps", func(c *SyntheticConfig) {
			c.Sessions = 1 << 40
			c.Turns = IntRange{1, 1 << 24}
		}},
		{"huge system prompt count", func(c *SyntheticConfig) { c.SystemPrompts = maxInt }},
		{"huge concurrency", func(c *SyntheticConfig) { c.Concurrency = maxInt }},
	}
	for _, tc := range cases {
		cfg := DefaultSyntheticConfig()
		cfg.Sessions = 2
		cfg.Turns = IntRange{1, 2}
		tc.edit(&cfg)
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Errorf("%s: Synthetic panicked on a config Validate accepted: %v", tc.name, r)
				}
			}()
			err := cfg.Validate()
			if err != nil && !errors.Is(err, ErrSyntheticConfig) {
				t.Errorf("%s: %v does not wrap ErrSyntheticConfig", tc.name, err)
			}
			if err != nil {
				return
			}
			reqs, err := Synthetic(cfg)
			if err != nil || len(reqs) == 0 {
				t.Errorf("%s: accepted, then %d requests, %v", tc.name, len(reqs), err)
			}
		}()
	}
	// The overflowing ranges themselves are refused, whatever else is set.
	for _, r := range []IntRange{{0, maxInt}, {1, maxInt}, {0, 1<<28 + 1}} {
		cfg := DefaultSyntheticConfig()
		cfg.OutputTokens = r
		if err := cfg.Validate(); !errors.Is(err, ErrSyntheticConfig) {
			t.Errorf("OutputTokens %+v: %v, want ErrSyntheticConfig", r, err)
		}
	}
}
