package trace

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestReadSortsAndParses(t *testing.T) {
	in := `{"timestamp": 5, "input_length": 600, "output_length": 3, "hash_ids": [0, 1]}

{"timestamp": 2, "input_length": 10, "output_length": 0, "hash_ids": [7]}
`
	reqs, rep, err := Read(strings.NewReader(in), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Lines != 2 || len(reqs) != 2 {
		t.Fatalf("lines %d reqs %d, want 2 and 2", rep.Lines, len(reqs))
	}
	if reqs[0].Timestamp != 0 || reqs[1].Timestamp != 3 || rep.Base != 2 || reqs[1].HashIDs[1] != 1 || reqs[1].InputLength != 600 {
		t.Fatalf("unexpected requests %+v", reqs)
	}
}

func TestMalformedLines(t *testing.T) {
	cases := []struct {
		line, field string
	}{
		{`{"timestamp": 1, "input_length": 10, "output_length": 1, "hash_ids": [0]`, "json"},
		{`{"input_length": 10, "output_length": 1, "hash_ids": [0]}`, "timestamp"},
		{`{"timestamp": -1, "input_length": 10, "output_length": 1, "hash_ids": [0]}`, "timestamp"},
		{`{"timestamp": -0.5, "input_length": 10, "output_length": 1, "hash_ids": [0]}`, "timestamp"},
		{`{"timestamp": 1e400, "input_length": 10, "output_length": 1, "hash_ids": [0]}`, "timestamp"},
		{`{"timestamp": 99999999999999999999, "input_length": 10, "output_length": 1, "hash_ids": [0]}`, "timestamp"},
		{`{"timestamp": 1, "input_length": 10.0, "output_length": 1, "hash_ids": [0]}`, "input_length"},
		{`{"timestamp": 1, "input_length": 10, "output_length": 1e0, "hash_ids": [0]}`, "output_length"},
		{`{"timestamp": 1, "input_length": 10, "output_length": 1, "hash_ids": [0.0]}`, "hash_ids"},
		{`{"timestamp": 1, "input_length": 0, "output_length": 1, "hash_ids": [0]}`, "input_length"},
		{`{"timestamp": 1, "input_length": 10, "hash_ids": [0]}`, "output_length"},
		{`{"timestamp": 1, "input_length": 10, "output_length": 1}`, "hash_ids"},
		{`{"timestamp": 1, "input_length": 10, "output_length": 1, "hash_ids": []}`, "hash_ids"},
		{`{"timestamp": 1, "input_length": 10, "output_length": 1, "hash_ids": [-3]}`, "hash_ids"},
		{`{"timestamp": 1, "input_length": 10, "output_length": 1, "hash_ids": ["a"]}`, "hash_ids"},
		{`{"timestamp": 1, "input_length": 1000, "output_length": 1, "hash_ids": [0]}`, "hash_ids"},
	}
	good := `{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [0]}`
	for _, c := range cases {
		in := good + "\n" + c.line + "\n" + good + "\n"
		_, _, err := Read(strings.NewReader(in), Options{})
		var pe *ParseError
		if !errors.As(err, &pe) || !errors.Is(err, ErrMalformed) {
			t.Fatalf("%s: got %v, want a *ParseError", c.line, err)
		}
		if pe.Line != 2 || pe.Field != c.field {
			t.Fatalf("%s: line %d field %q, want line 2 field %q (%v)", c.line, pe.Line, pe.Field, c.field, err)
		}
		reqs, rep, err := Read(strings.NewReader(in), Options{OnError: Skip})
		if err != nil || len(reqs) != 2 || rep.Skipped != 1 || rep.Errors[0].Field != c.field {
			t.Fatalf("%s: skip mode gave %d reqs, %+v, %v", c.line, len(reqs), rep, err)
		}
	}
}

func TestTimeScaleAndLimit(t *testing.T) {
	in := `{"timestamp": 1000, "input_length": 10, "output_length": 1, "hash_ids": [0]}
{"timestamp": 2000, "input_length": 10, "output_length": 1, "hash_ids": [1]}
{"timestamp": 5000, "input_length": 10, "output_length": 1, "hash_ids": [2]}`
	reqs, _, err := Read(strings.NewReader(in), Options{TimeScale: 0.5, Limit: 2})
	if err != nil || len(reqs) != 2 || reqs[0].Timestamp != 0 || reqs[1].Timestamp != 500 {
		t.Fatalf("got %+v %v", reqs, err)
	}
}

func TestSample(t *testing.T) {
	reqs := Sample()
	if len(reqs) != 600 {
		t.Fatalf("sample has %d requests, want 600", len(reqs))
	}
	if reqs[0].InputLength != 6758 || len(reqs[0].HashIDs) != 14 {
		t.Fatalf("first request %+v does not match the trace", reqs[0])
	}
}

func TestTokensDeterministicAndShared(t *testing.T) {
	a := Request{InputLength: 700, HashIDs: []int64{3, 9}}
	b := Request{InputLength: 1024, HashIDs: []int64{3, 4}}
	ta, tb := Tokens(a, 1000), Tokens(b, 1000)
	if len(ta) != 700 || len(tb) != 1024 {
		t.Fatalf("lengths %d %d", len(ta), len(tb))
	}
	same := 0
	for i := range BlockTokens {
		if ta[i] != tb[i] {
			t.Fatalf("shared id 3 gave different token %d", i)
		}
		if ta[BlockTokens+i%188] == tb[BlockTokens+i%188] {
			same++
		}
	}
	if same > 20 {
		t.Fatalf("different ids gave %d equal tokens out of 512", same)
	}
	for _, tok := range tb {
		if tok < 0 || tok >= 1000 {
			t.Fatalf("token %d outside vocab", tok)
		}
	}
	if again := Tokens(a, 1000); again[699] != ta[699] {
		t.Fatal("not deterministic")
	}
}

// TestAbsoluteTimestamps: a trace stamped with wall-clock times (milliseconds
// or nanoseconds since the epoch) is rebased to its first request, and a
// timestamp still too large for a time.Duration after rebasing and scaling is
// a line-numbered error.
func TestAbsoluteTimestamps(t *testing.T) {
	line := func(ts int64, id int) string {
		return fmt.Sprintf(`{"timestamp": %d, "input_length": 10, "output_length": 1, "hash_ids": [%d]}`, ts, id)
	}
	const epochMS = int64(1_717_000_000_000) // 2024-05-29 in ms
	in := line(epochMS+2500, 1) + "\n" + line(epochMS, 0) + "\n" + line(epochMS+1000, 2) + "\n"
	reqs, rep, err := Read(strings.NewReader(in), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := []int64{reqs[0].Timestamp, reqs[1].Timestamp, reqs[2].Timestamp}; !slices.Equal(got, []int64{0, 1000, 2500}) || rep.Base != epochMS {
		t.Fatalf("ms since the epoch: timestamps %v base %d, want [0 1000 2500] base %d", got, rep.Base, epochMS)
	}
	reqs, _, err = Read(strings.NewReader(in), Options{TimeScale: 3})
	if err != nil || reqs[2].Timestamp != 7500 {
		t.Fatalf("rebased then scaled: %+v %v", reqs, err)
	}

	// Nanoseconds since the epoch, read as milliseconds: rebased, one hour
	// of trace is 3.6e12 "ms", 3.6e18 ns, which fits at scale 1 and not at 3.
	const epochNS = epochMS * 1_000_000
	hour := int64(time.Hour)
	in = line(epochNS, 0) + "\n" + line(epochNS+hour/2, 1) + "\n" + line(epochNS+hour, 2) + "\n"
	reqs, _, err = Read(strings.NewReader(in), Options{})
	if err != nil || reqs[2].Timestamp != hour {
		t.Fatalf("ns since the epoch at scale 1: %+v %v", reqs, err)
	}
	for _, c := range []struct {
		scale    float64
		badLine  int // the first line whose scaled offset overflows
		keptSkip int // requests left in Skip mode
	}{{3, 3, 2}, {1e6, 2, 1}} {
		_, _, err = Read(strings.NewReader(in), Options{TimeScale: c.scale})
		var pe *ParseError
		if !errors.As(err, &pe) || !errors.Is(err, ErrMalformed) || pe.Field != "timestamp" || pe.Line != c.badLine {
			t.Fatalf("scale %g: %v, want a timestamp error on line %d", c.scale, err, c.badLine)
		}
		reqs, rep, err = Read(strings.NewReader(in), Options{TimeScale: c.scale, OnError: Skip})
		if err != nil || len(reqs) != c.keptSkip || rep.Skipped != 3-c.keptSkip || rep.Errors[0].Line != c.badLine {
			t.Fatalf("scale %g, skip mode: %+v %+v %v", c.scale, reqs, rep, err)
		}
	}
}

// TestReadBlockTokens: a trace written with 16-token blocks is read with
// BlockTokens 16, and refused with the default 512, as is a negative size.
func TestReadBlockTokens(t *testing.T) {
	const line = `{"timestamp": 1700000000000, "input_length": 40, "output_length": 1, "hash_ids": [7, 8, 9]}`
	reqs, rep, err := Read(strings.NewReader(line), Options{BlockTokens: 16})
	if err != nil || len(reqs) != 1 || reqs[0].Timestamp != 0 || rep.Base != 1700000000000 {
		t.Fatalf("BlockTokens 16: %v, %+v, %+v", err, reqs, rep)
	}
	if _, _, err := Read(strings.NewReader(line), Options{}); !errors.Is(err, ErrMalformed) {
		t.Fatalf("default block size: err %v, want ErrMalformed", err)
	}
	if _, _, err := Read(strings.NewReader(line), Options{BlockTokens: -1}); err == nil {
		t.Fatal("BlockTokens -1 accepted")
	}
}

// TestLimitIsFileOrder: Limit keeps the first lines of the file, which
// reading stops after, then sorts them: on a trace not sorted by time they
// are not the earliest requests, and the rebase is to the earliest of them.
func TestLimitIsFileOrder(t *testing.T) {
	in := `{"timestamp": 50, "input_length": 10, "output_length": 1, "hash_ids": [5]}` + "\n" +
		`{"timestamp": 20, "input_length": 10, "output_length": 1, "hash_ids": [2]}` + "\n" +
		`{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [0]}` + "\n"
	reqs, rep, err := Read(strings.NewReader(in), Options{Limit: 2})
	if err != nil || len(reqs) != 2 || rep.Base != 20 || reqs[0].HashIDs[0] != 2 || reqs[1].HashIDs[0] != 5 || reqs[1].Timestamp != 30 {
		t.Fatalf("%+v, %+v, %v; want the first two lines, sorted, rebased to 20", reqs, rep, err)
	}
}
