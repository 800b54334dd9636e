package trace

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// TestMaxInputTokens: a line claiming more input tokens than
// Options.MaxInputTokens (DefaultMaxInputTokens by default) is malformed,
// field input_length, wrapping ErrTooManyTokens, before TokensOf could be
// asked to allocate them; a line at the bound reads.
func TestMaxInputTokens(t *testing.T) {
	line := func(input, blockTokens int) string {
		ids := make([]string, (input+blockTokens-1)/blockTokens)
		for i := range ids {
			ids[i] = fmt.Sprint(i)
		}
		return fmt.Sprintf(`{"timestamp": 0, "input_length": %d, "output_length": 1, "hash_ids": [%s]}`, input, strings.Join(ids, ","))
	}
	for _, c := range []struct {
		opts  Options
		input int
		ok    bool
	}{
		{Options{}, DefaultMaxInputTokens, true},
		{Options{}, DefaultMaxInputTokens + 1, false},
		// 16G tokens in a 3 MB line: 32-token ids would allow them.
		{Options{BlockTokens: 1 << 15}, 1 << 34, false},
		{Options{MaxInputTokens: 100, BlockTokens: 16}, 100, true},
		{Options{MaxInputTokens: 100, BlockTokens: 16}, 101, false},
	} {
		bt := c.opts.BlockTokens
		if bt == 0 {
			bt = BlockTokens
		}
		in := goodLine + "\n" + line(c.input, bt) + "\n"
		reqs, _, err := Read(strings.NewReader(in), c.opts)
		if c.ok {
			if err != nil || len(reqs) != 2 {
				t.Errorf("input_length %d, %+v: %v, want it read", c.input, c.opts, err)
			}
			continue
		}
		var pe *ParseError
		if !errors.As(err, &pe) || !errors.Is(err, ErrTooManyTokens) || !errors.Is(err, ErrMalformed) || pe.Line != 2 || pe.Field != "input_length" {
			t.Errorf("input_length %d, %+v: %v, want ErrTooManyTokens for line 2, field input_length", c.input, c.opts, err)
		}
		o := c.opts
		o.OnError = Skip
		if reqs, rep, err := Read(strings.NewReader(in), o); err != nil || len(reqs) != 1 || rep.Skipped != 1 {
			t.Errorf("input_length %d, skip mode: %d requests, %+v, %v", c.input, len(reqs), rep, err)
		}
	}
	if _, _, err := Read(strings.NewReader(goodLine), Options{MaxInputTokens: -1}); !errors.Is(err, ErrBadOptions) {
		t.Errorf("MaxInputTokens -1: %v, want ErrBadOptions", err)
	}
}
