package trace

import (
	"errors"
	"io"
	"math"
	"strings"
	"testing"
)

const goodLine = `{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [0]}`

// TestTrailingDataMalformed: a line is one JSON object; anything after it (a
// second object, a stray brace, text) makes the line malformed, in both modes,
// instead of silently losing what follows.
func TestTrailingDataMalformed(t *testing.T) {
	for _, bad := range []string{
		goodLine + `{"timestamp": 5, "input_length": 10, "output_length": 1, "hash_ids": [1]}`,
		goodLine + ` {"timestamp": 5, "input_length": 10, "output_length": 1, "hash_ids": [1]}`,
		goodLine + `}`,
		goodLine + ` garbage`,
		goodLine + ` 7`,
	} {
		in := goodLine + "\n" + bad + "\n" + goodLine + "\n"
		_, _, err := Read(strings.NewReader(in), Options{})
		var pe *ParseError
		if !errors.As(err, &pe) || !errors.Is(err, ErrMalformed) || pe.Line != 2 || pe.Field != "json" {
			t.Errorf("%s: err %v, want a *ParseError for line 2, field json", bad, err)
			continue
		}
		reqs, rep, err := Read(strings.NewReader(in), Options{OnError: Skip})
		if err != nil || len(reqs) != 2 || rep.Skipped != 1 || rep.Errors[0].Line != 2 {
			t.Errorf("%s: skip mode gave %d requests, %+v, %v", bad, len(reqs), rep, err)
		}
	}
	// Surrounding whitespace is not trailing data.
	if reqs, _, err := Read(strings.NewReader(" \t"+goodLine+" \t\r\n"), Options{}); err != nil || len(reqs) != 1 {
		t.Fatalf("padded line: %d requests, %v", len(reqs), err)
	}
}

// TestLongLine: a line over the limit is a *ParseError wrapping ErrLineTooLong
// for its own line; Skip mode skips it and reads the lines after it.
func TestLongLine(t *testing.T) {
	const max = 200
	long := `{"timestamp": 1, "pad": "` + strings.Repeat("x", 3*max) + `", "input_length": 10, "output_length": 1, "hash_ids": [0]}`
	atMax := goodLine + strings.Repeat(" ", max-len(goodLine))
	for _, last := range []string{"\n", ""} { // the long line last, with and without a newline
		in := goodLine + "\n" + atMax + "\n" + long + last
		_, _, err := read(strings.NewReader(in), Options{}, max)
		var pe *ParseError
		if !errors.As(err, &pe) || !errors.Is(err, ErrMalformed) || !errors.Is(err, ErrLineTooLong) || pe.Line != 3 {
			t.Errorf("last %q: err %v, want a *ParseError wrapping ErrLineTooLong on line 3", last, err)
		}
	}
	in := goodLine + "\n" + long + "\n" + atMax + "\n" + long + long + "\n\n" + goodLine
	reqs, rep, err := read(strings.NewReader(in), Options{OnError: Skip}, max)
	if err != nil || len(reqs) != 3 || rep.Lines != 5 || rep.Skipped != 2 ||
		rep.Errors[0].Line != 2 || rep.Errors[1].Line != 4 || !errors.Is(&rep.Errors[1], ErrLineTooLong) {
		t.Fatalf("skip mode: %d requests, %+v, %v", len(reqs), rep, err)
	}
}

// TestLongLineRealLimit: Read itself (MaxLineBytes) types an over-long line
// and goes on in Skip mode. The long line is streamed, not held in memory.
func TestLongLineRealLimit(t *testing.T) {
	if testing.Short() {
		t.Skip("reads 64 MiB")
	}
	in := io.MultiReader(
		strings.NewReader(goodLine+"\n"+`{"timestamp": 1, "pad": "`),
		io.LimitReader(repeatReader('x'), MaxLineBytes),
		strings.NewReader(`", "input_length": 10, "output_length": 1, "hash_ids": [0]}`+"\n"+goodLine+"\n"),
	)
	reqs, rep, err := Read(in, Options{OnError: Skip})
	if err != nil || len(reqs) != 2 || rep.Skipped != 1 || rep.Errors[0].Line != 2 || !errors.Is(&rep.Errors[0], ErrLineTooLong) {
		t.Fatalf("%d requests, %+v, %v", len(reqs), rep, err)
	}
}

type repeatReader byte

func (r repeatReader) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = byte(r)
	}
	return len(p), nil
}

// TestBadOptions: invalid Options are refused up front with ErrBadOptions,
// never blamed on a line (no *ParseError, no ErrMalformed).
func TestBadOptions(t *testing.T) {
	for _, o := range []Options{
		{TimeScale: math.NaN()},
		{TimeScale: math.Inf(1)},
		{TimeScale: math.Inf(-1)},
		{TimeScale: -1},
		{BlockTokens: -1},
		{OnError: 3},
		{OnError: -1},
		{Limit: -1},
	} {
		reqs, _, err := Read(strings.NewReader(goodLine), o)
		var pe *ParseError
		if !errors.Is(err, ErrBadOptions) || errors.Is(err, ErrMalformed) || errors.As(err, &pe) || reqs != nil {
			t.Errorf("%+v: %d requests, err %v; want ErrBadOptions only", o, len(reqs), err)
		}
	}
	for _, o := range []Options{{}, {TimeScale: 0}, {TimeScale: 2.5}, {OnError: Skip, BlockTokens: 16, Limit: 1}} {
		if _, _, err := Read(strings.NewReader(`{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [0]}`), o); err != nil {
			t.Errorf("%+v: %v", o, err)
		}
	}
}

// TestBlockSizeHint: a line whose id count fits another block size says
// which (a trace of 16-token ids read as Mooncake's 512 named no way out),
// and one that fits no power of two says nothing more.
func TestBlockSizeHint(t *testing.T) {
	_, _, err := Read(strings.NewReader(`{"timestamp": 0, "input_length": 40, "output_length": 1, "hash_ids": [1, 2, 3]}`), Options{})
	if err == nil || !strings.Contains(err.Error(), "16-token ids would match") {
		t.Fatalf("error %v, want the hint of a block size of 16", err)
	}
	_, _, err = Read(strings.NewReader(`{"timestamp": 0, "input_length": 40, "output_length": 1, "hash_ids": [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41]}`), Options{})
	if err == nil || strings.Contains(err.Error(), "would match") {
		t.Fatalf("error %v, want no hint: 41 ids fit no block size for 40 tokens", err)
	}
}

// TestFloorIDsHint: a trace that gives no id to a prompt's partly filled
// last block (floor(input_length / block) ids, as Dynamo's datagen README
// words the rule) fails with an error saying so; it named no cause, as no
// power-of-two block size matches 13 ids for 6758 tokens.
func TestFloorIDsHint(t *testing.T) {
	ids := `[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]`
	_, _, err := Read(strings.NewReader(`{"timestamp": 0, "input_length": 6758, "output_length": 1, "hash_ids": `+ids+`}`), Options{})
	var pe *ParseError
	if !errors.As(err, &pe) || pe.Field != "hash_ids" || !strings.Contains(err.Error(), "floor(6758/512)") || !strings.Contains(err.Error(), "partly filled last block") {
		t.Fatalf("error %v, want one saying the 13 ids are floor(6758/512), none for the partly filled last block", err)
	}
	// A whole number of blocks has no partly filled one: the ids are short.
	_, _, err = Read(strings.NewReader(`{"timestamp": 0, "input_length": 1024, "output_length": 1, "hash_ids": [0]}`), Options{})
	if err == nil || strings.Contains(err.Error(), "floor(") {
		t.Fatalf("error %v, want no floor hint for 1 id of 1024 tokens", err)
	}
}
