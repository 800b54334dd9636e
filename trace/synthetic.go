package trace

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"time"
)

// ErrSyntheticConfig is wrapped by every error Synthetic returns for a bad config.
var ErrSyntheticConfig = errors.New("kvtier: invalid synthetic trace config")

// maxSyntheticRequests bounds Sessions * Turns.Max (and SystemPrompts) so a
// typo cannot eat the heap.
const maxSyntheticRequests = 1 << 24

// maxSyntheticTokens bounds every token count of a config (the Max of
// SystemTokens, UserTokens and OutputTokens, and MaxInputTokens), far above
// any model's context, so that a range's width and a prompt's growth by an
// answer and a user turn stay well inside an int, even a 32-bit one.
const maxSyntheticTokens = 1 << 28

// IntRange is an inclusive range of integers; a value is drawn uniformly from it.
type IntRange struct {
	Min, Max int
}

// validate checks min <= r.Min <= r.Max <= max: with min >= 0, the width
// r.Max-r.Min+1 that draw uses cannot overflow.
func (r IntRange) validate(name string, min, max int) error {
	if r.Min < min || r.Max < r.Min || r.Max > max {
		return fmt.Errorf("trace: SyntheticConfig.%s %+v: need %d <= Min <= Max <= %d: %w", name, r, min, max, ErrSyntheticConfig)
	}
	return nil
}

func (r IntRange) draw(rng *rand.Rand) int {
	return r.Min + rng.IntN(r.Max-r.Min+1)
}

// SyntheticConfig describes a synthetic multi-turn chat workload. Every field must
// be set; DefaultSyntheticConfig returns a small, valid one to start from.
type SyntheticConfig struct {
	// Seed makes the trace reproducible: equal configs give equal traces.
	Seed uint64
	// Sessions is the number of conversations.
	Sessions int
	// Turns is the number of requests per conversation, before MaxInputTokens
	// cuts a conversation short.
	Turns IntRange
	// Concurrency is how many conversations are open at once. Each arrival goes
	// to one of the open conversations at random; a finished one is replaced by
	// the next. Small values give short reuse distances.
	Concurrency int
	// RatePerSecond is the mean request arrival rate: inter-arrival times are
	// exponential (a Poisson process), timestamps are in milliseconds.
	RatePerSecond float64
	// SystemPrompts is the number of distinct system prompts (0: none). Each
	// conversation starts with one of them, drawn uniformly, so its whole
	// blocks are a leading run of ids shared by many conversations.
	SystemPrompts int
	// SystemTokens is the length of each system prompt in tokens (drawn once
	// per system prompt). Ignored when SystemPrompts is 0.
	SystemTokens IntRange
	// UserTokens is the length of the new user text of each turn.
	UserTokens IntRange
	// OutputTokens is the length of each answer.
	OutputTokens IntRange
	// MaxInputTokens ends a conversation before a turn whose prompt would be
	// longer. It must admit the longest first turn.
	MaxInputTokens int
}

// DefaultSyntheticConfig returns a valid config for quick runs: 1,000
// conversations of 1 to 8 turns, 256 open at once, 4 requests per second,
// 4 system prompts.
func DefaultSyntheticConfig() SyntheticConfig {
	return SyntheticConfig{
		Seed:           1,
		Sessions:       1000,
		Turns:          IntRange{1, 8},
		Concurrency:    256,
		RatePerSecond:  4,
		SystemPrompts:  4,
		SystemTokens:   IntRange{1024, 4096},
		UserTokens:     IntRange{64, 2048},
		OutputTokens:   IntRange{64, 1024},
		MaxInputTokens: 32768,
	}
}

// Validate reports the first bad field of c, wrapping ErrSyntheticConfig.
// Besides each field's own rule, Sessions, SystemPrompts and Turns.Max are at
// most 1<<24, and every token count (the ranges' Max, MaxInputTokens) at most
// 1<<28, so that nothing Synthetic computes from a valid config overflows.
func (c SyntheticConfig) Validate() error {
	if c.Sessions < 1 || c.Sessions > maxSyntheticRequests {
		return fmt.Errorf("trace: SyntheticConfig.Sessions %d must be in [1, %d]: %w", c.Sessions, maxSyntheticRequests, ErrSyntheticConfig)
	}
	if err := c.Turns.validate("Turns", 1, maxSyntheticRequests); err != nil {
		return err
	}
	if int64(c.Sessions)*int64(c.Turns.Max) > maxSyntheticRequests {
		return fmt.Errorf("trace: SyntheticConfig: Sessions*Turns.Max = %d exceeds %d requests: %w",
			int64(c.Sessions)*int64(c.Turns.Max), maxSyntheticRequests, ErrSyntheticConfig)
	}
	if c.Concurrency < 1 {
		return fmt.Errorf("trace: SyntheticConfig.Concurrency %d must be >= 1: %w", c.Concurrency, ErrSyntheticConfig)
	}
	if !(c.RatePerSecond > 0) || math.IsInf(c.RatePerSecond, 0) {
		return fmt.Errorf("trace: SyntheticConfig.RatePerSecond %v must be positive and finite: %w", c.RatePerSecond, ErrSyntheticConfig)
	}
	if c.SystemPrompts < 0 || c.SystemPrompts > maxSyntheticRequests {
		return fmt.Errorf("trace: SyntheticConfig.SystemPrompts %d must be in [0, %d]: %w", c.SystemPrompts, maxSyntheticRequests, ErrSyntheticConfig)
	}
	sysMax := 0
	if c.SystemPrompts > 0 {
		if err := c.SystemTokens.validate("SystemTokens", 1, maxSyntheticTokens); err != nil {
			return err
		}
		sysMax = c.SystemTokens.Max
	}
	if err := c.UserTokens.validate("UserTokens", 1, maxSyntheticTokens); err != nil {
		return err
	}
	if err := c.OutputTokens.validate("OutputTokens", 0, maxSyntheticTokens); err != nil {
		return err
	}
	if c.MaxInputTokens > maxSyntheticTokens {
		return fmt.Errorf("trace: SyntheticConfig.MaxInputTokens %d must be <= %d: %w", c.MaxInputTokens, maxSyntheticTokens, ErrSyntheticConfig)
	}
	// Each sum below is of at most three counts <= maxSyntheticTokens: no
	// overflow, here or in Synthetic, where a prompt <= MaxInputTokens grows
	// by an answer and a user turn before it is checked.
	if c.MaxInputTokens < sysMax+c.UserTokens.Max {
		return fmt.Errorf("trace: SyntheticConfig.MaxInputTokens %d is below the longest first turn (%d system + %d user tokens): %w",
			c.MaxInputTokens, sysMax, c.UserTokens.Max, ErrSyntheticConfig)
	}
	return nil
}

// synthSession is one conversation: the prompt and output length of each turn.
type synthSession struct {
	system  int   // index of the system prompt, -1 for none
	prompts []int // input length of each turn
	outputs []int
}

// blockKey names the content of one block exactly. A block that lies wholly
// inside system prompt s is owned by -(s+1) and shared; any other block is
// owned by its conversation. end is the block's last token position + 1, so a
// partial last block differs from the full block that later replaces it.
type blockKey struct {
	owner int
	index int
	end   int
}

// Synthetic generates a deterministic multi-turn chat trace.
//
// Each turn's prompt is the previous prompt, the previous answer and new user
// text, so the hash ids of every whole block of the earlier prompt are a prefix
// of the later one. As in the Mooncake traces (and with real chained block
// hashes) the partial last block of a prompt gets its own id, which the next
// turn does not reuse: there that block holds more tokens.
//
// Hash ids are dense (0..N-1, in order of first use); every id has exactly one
// predecessor and len(HashIDs) == ceil(InputLength/BlockTokens). Requests are
// sorted by Timestamp (milliseconds, Poisson arrivals at RatePerSecond); a
// rate so low that an arrival is past what a time.Duration holds is an error
// wrapping ErrSyntheticConfig. cfg is not modified.
func Synthetic(cfg SyntheticConfig) ([]Request, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x6b767469657273))

	sysLen := make([]int, cfg.SystemPrompts)
	for i := range sysLen {
		sysLen[i] = cfg.SystemTokens.draw(rng)
	}
	sessions := make([]synthSession, cfg.Sessions)
	total := 0
	for i := range sessions {
		s := &sessions[i]
		s.system = -1
		prompt := 0
		if cfg.SystemPrompts > 0 {
			s.system = rng.IntN(cfg.SystemPrompts)
			prompt = sysLen[s.system]
		}
		turns := cfg.Turns.draw(rng)
		for t := range turns {
			user := cfg.UserTokens.draw(rng)
			if t > 0 {
				prompt += s.outputs[t-1]
			}
			prompt += user
			if prompt > cfg.MaxInputTokens {
				break
			}
			s.prompts = append(s.prompts, prompt)
			s.outputs = append(s.outputs, cfg.OutputTokens.draw(rng))
		}
		total += len(s.prompts)
	}

	reqs := make([]Request, 0, total)
	ids := make(map[blockKey]int64)
	open := make([]int, 0, min(cfg.Concurrency, cfg.Sessions)) // indexes into sessions
	next := make([]int, cfg.Sessions)                          // next turn of each session
	opened := 0
	refill := func() {
		for len(open) < cfg.Concurrency && opened < len(sessions) {
			if len(sessions[opened].prompts) > 0 {
				open = append(open, opened)
			}
			opened++
		}
	}
	refill()
	clock := 0.0 // milliseconds
	for len(open) > 0 {
		clock += rng.ExpFloat64() / cfg.RatePerSecond * 1000
		if !(clock*float64(time.Millisecond) < durationLimit) { // as Read holds a trace's timestamps
			return nil, fmt.Errorf("trace: SyntheticConfig.RatePerSecond %g: request %d arrives %.3g ms in, past the longest time a Duration holds: %w",
				cfg.RatePerSecond, len(reqs), clock, ErrSyntheticConfig)
		}
		slot := rng.IntN(len(open))
		si := open[slot]
		s := &sessions[si]
		turn := next[si]
		next[si]++
		input := s.prompts[turn]
		reqs = append(reqs, Request{
			Timestamp:    int64(clock),
			InputLength:  input,
			OutputLength: s.outputs[turn],
			HashIDs:      synthHashIDs(ids, si, s.system, sysLenOf(sysLen, s.system), input),
		})
		if next[si] == len(s.prompts) {
			open[slot] = open[len(open)-1]
			open = open[:len(open)-1]
			refill()
		}
	}
	return reqs, nil
}

func sysLenOf(sysLen []int, system int) int {
	if system < 0 {
		return 0
	}
	return sysLen[system]
}

// synthHashIDs returns the block ids of a prompt of input tokens in session si,
// whose first sys tokens are system prompt system, allocating new ids densely.
func synthHashIDs(ids map[blockKey]int64, si, system, sys, input int) []int64 {
	n := (input + BlockTokens - 1) / BlockTokens
	out := make([]int64, n)
	for i := range n {
		end := min((i+1)*BlockTokens, input)
		k := blockKey{owner: si, index: i, end: end}
		if end <= sys && end == (i+1)*BlockTokens {
			k.owner = -(system + 1)
		}
		id, ok := ids[k]
		if !ok {
			id = int64(len(ids))
			ids[k] = id
		}
		out[i] = id
	}
	return out
}
