package trace

import (
	"bufio"
	"bytes"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
)

// BlockTokens is the number of tokens one Mooncake hash id stands for.
const BlockTokens = 512

// Request is one line of a trace. Timestamp is in milliseconds from the trace start.
type Request struct {
	Timestamp    int64   `json:"timestamp"`
	InputLength  int     `json:"input_length"`
	OutputLength int     `json:"output_length"`
	HashIDs      []int64 `json:"hash_ids"`
}

// ErrorMode says what the reader does with a malformed line.
type ErrorMode int

const (
	// Stop ends reading at the first malformed line and returns its *ParseError.
	Stop ErrorMode = iota + 1
	// Skip counts malformed lines in Report.Skipped and goes on.
	Skip
)

// Options tunes Read. The zero value stops on the first bad line and keeps
// timestamps as they are.
type Options struct {
	OnError ErrorMode
	// TimeScale multiplies every timestamp (0 means 1): 0.5 replays twice as fast.
	TimeScale float64
	// Limit stops after this many requests (0: no limit).
	Limit int
}

// Report says what Read saw.
type Report struct {
	Lines   int          // non-blank lines read
	Skipped int          // malformed lines skipped (Skip mode)
	Errors  []ParseError // the first few skipped lines' errors
}

// ErrMalformed is wrapped by every *ParseError.
var ErrMalformed = errors.New("kvtier: malformed trace line")

// ParseError names the line and the field of a malformed trace line.
type ParseError struct {
	Line  int    // 1-based line number
	Field string // JSON field at fault, or "json" for a line that does not parse
	Err   error
}

func (e *ParseError) Error() string {
	return fmt.Sprintf("trace line %d: field %s: %v", e.Line, e.Field, e.Err)
}

// Unwrap lets errors.Is(err, ErrMalformed) hold.
func (e *ParseError) Unwrap() []error { return []error{ErrMalformed, e.Err} }

const maxKeptErrors = 16

// Read parses a whole trace and returns its requests sorted by timestamp (ties keep
// file order).
func Read(r io.Reader, opts Options) ([]Request, Report, error) {
	if opts.OnError == 0 {
		opts.OnError = Stop
	}
	if opts.OnError != Stop && opts.OnError != Skip {
		return nil, Report{}, fmt.Errorf("trace: OnError %d: %w", opts.OnError, ErrMalformed)
	}
	if opts.TimeScale < 0 {
		return nil, Report{}, fmt.Errorf("trace: TimeScale %v must be >= 0", opts.TimeScale)
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 1<<16), 64<<20)
	var (
		reqs []Request
		rep  Report
	)
	line := 0
	for sc.Scan() {
		line++
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		rep.Lines++
		req, perr := parseLine(line, b)
		if perr != nil {
			if opts.OnError == Stop {
				return nil, rep, perr
			}
			rep.Skipped++
			if len(rep.Errors) < maxKeptErrors {
				rep.Errors = append(rep.Errors, *perr)
			}
			continue
		}
		if opts.TimeScale != 0 && opts.TimeScale != 1 {
			req.Timestamp = int64(float64(req.Timestamp) * opts.TimeScale)
		}
		reqs = append(reqs, req)
		if opts.Limit > 0 && len(reqs) >= opts.Limit {
			break
		}
	}
	if err := sc.Err(); err != nil {
		return nil, rep, fmt.Errorf("trace: reading line %d: %w", line+1, err)
	}
	sort.SliceStable(reqs, func(i, j int) bool { return reqs[i].Timestamp < reqs[j].Timestamp })
	return reqs, rep, nil
}

// ReadFile is Read on a named file.
func ReadFile(path string, opts Options) ([]Request, Report, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, Report{}, fmt.Errorf("trace: %w", err)
	}
	defer f.Close()
	return Read(f, opts)
}

// rawRequest keeps pointers so a missing field can be told from a zero one.
type rawRequest struct {
	Timestamp    *json.Number `json:"timestamp"`
	InputLength  *json.Number `json:"input_length"`
	OutputLength *json.Number `json:"output_length"`
	HashIDs      *[]int64     `json:"hash_ids"`
}

func parseLine(line int, b []byte) (Request, *ParseError) {
	var raw rawRequest
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(&raw); err != nil {
		field := "json"
		var ute *json.UnmarshalTypeError
		if errors.As(err, &ute) && ute.Field != "" {
			field = ute.Field
		}
		return Request{}, &ParseError{Line: line, Field: field, Err: err}
	}
	var req Request
	var perr *ParseError
	num := func(field string, n *json.Number, min int64) int64 {
		if perr != nil {
			return 0
		}
		if n == nil {
			perr = &ParseError{Line: line, Field: field, Err: errors.New("missing")}
			return 0
		}
		v, err := n.Int64()
		if err != nil {
			perr = &ParseError{Line: line, Field: field, Err: fmt.Errorf("not an integer: %q", n.String())}
			return 0
		}
		if v < min {
			perr = &ParseError{Line: line, Field: field, Err: fmt.Errorf("%d is below %d", v, min)}
			return 0
		}
		return v
	}
	req.Timestamp = num("timestamp", raw.Timestamp, 0)
	req.InputLength = int(num("input_length", raw.InputLength, 1))
	req.OutputLength = int(num("output_length", raw.OutputLength, 0))
	if perr != nil {
		return Request{}, perr
	}
	if raw.HashIDs == nil || len(*raw.HashIDs) == 0 {
		return Request{}, &ParseError{Line: line, Field: "hash_ids", Err: errors.New("missing or empty")}
	}
	req.HashIDs = *raw.HashIDs
	for i, id := range req.HashIDs {
		if id < 0 {
			return Request{}, &ParseError{Line: line, Field: "hash_ids", Err: fmt.Errorf("id %d at index %d is negative", id, i)}
		}
	}
	if want := (req.InputLength + BlockTokens - 1) / BlockTokens; len(req.HashIDs) != want {
		return Request{}, &ParseError{Line: line, Field: "hash_ids", Err: fmt.Errorf(
			"%d ids for input_length %d, want ceil(%d/%d) = %d", len(req.HashIDs), req.InputLength, req.InputLength, BlockTokens, want)}
	}
	return req, nil
}

//go:embed testdata/conversation_sample.jsonl
var sample []byte

// SampleName names the embedded default workload in reports.
const SampleName = "embedded: conversation_trace.jsonl, first 600 requests"

// Sample returns the embedded default workload: the first 600 requests of the
// Mooncake conversation trace.
func Sample() []Request {
	reqs, _, err := Read(bytes.NewReader(sample), Options{})
	if err != nil {
		panic("kvtier: embedded trace sample does not parse: " + err.Error())
	}
	return reqs
}
