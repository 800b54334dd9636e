package trace

import (
	"bufio"
	"bytes"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/bits"
	"os"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"time"
)

// BlockTokens is the number of tokens one Mooncake hash id stands for.
const BlockTokens = 512

// Request is one line of a trace. Timestamp is in milliseconds from the trace
// start: Read rebases a file's timestamps so that its earliest request is at 0,
// and converts them from Options.TimeUnit.
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
// the (rebased) timestamps' scale.
type Options struct {
	OnError ErrorMode
	// TimeScale multiplies every rebased timestamp (0 means 1): 0.5 replays
	// twice as fast. A timestamp that, scaled, is no longer a time.Duration
	// (about 292 years) is malformed.
	TimeScale float64
	// Limit stops reading after this many requests (0: no limit): the
	// first in the file, sorted and rebased like a whole file. On a trace
	// not sorted by time they need not be the earliest.
	Limit int
	// BlockTokens is the number of tokens one hash id stands for in this
	// file (0 means BlockTokens, Mooncake's 512). Read checks every line's
	// len(hash_ids) against ceil(input_length / BlockTokens).
	BlockTokens int
	// TimeUnit is the time one unit of the file's timestamps stands for
	// (0 means time.Millisecond, Mooncake's): time.Second for a trace
	// stamped in float seconds (guidellm and others), time.Nanosecond for
	// one in nanoseconds. Negative is invalid.
	TimeUnit time.Duration
	// MaxInputTokens is the longest input_length a line may claim (0 means
	// DefaultMaxInputTokens; negative is invalid). A longer line is
	// malformed (field "input_length", wrapping ErrTooManyTokens): a line
	// of MaxLineBytes may claim billions of tokens, which TokensOf would
	// allocate eight bytes each.
	MaxInputTokens int
}

// DefaultMaxInputTokens is Options.MaxInputTokens when it is 0: 16M tokens,
// 16 times the longest context of today's models, 128 MiB as the token ids
// TokensOf returns.
const DefaultMaxInputTokens = 1 << 24

// ErrTooManyTokens is wrapped by the *ParseError (field "input_length") of a
// line whose input_length is over Options.MaxInputTokens.
var ErrTooManyTokens = errors.New("input_length over Options.MaxInputTokens")

// Report says what Read saw.
type Report struct {
	Lines   int          // non-blank lines read
	Skipped int          // malformed lines skipped (Skip mode)
	Errors  []ParseError // the first few skipped lines' errors
	// Base is the earliest timestamp read, as in the file (in TimeUnit,
	// truncated toward zero if it has a fraction): Read subtracts it from
	// every timestamp, so that traces stamped with wall-clock times
	// (milliseconds since the epoch) replay from 0.
	Base int64
}

// ErrMalformed is wrapped by every *ParseError.
var ErrMalformed = errors.New("kvtier: malformed trace line")

// ErrBadOptions is wrapped by the error Read returns for invalid Options,
// before it reads any line.
var ErrBadOptions = errors.New("kvtier: invalid trace options")

// MaxLineBytes is the longest line Read accepts, leading and trailing
// whitespace included.
const MaxLineBytes = 64 << 20

// ErrLineTooLong is wrapped by the *ParseError (field "json") of a line longer
// than MaxLineBytes. Read discards the rest of such a line without keeping it.
var ErrLineTooLong = errors.New("line too long")

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
// file order, but in a trace with a fractional stamp requests that fall in
// one millisecond go by their stamps as written first), rebased so that the earliest is at 0 (Report.Base), converted
// from opts.TimeUnit to milliseconds and then multiplied by opts.TimeScale.
//
// A timestamp may be a JSON integer or, unlike the other fields, a number
// with a fraction or an exponent (12.345, 1.7e9). Integer timestamps are
// rebased and converted exactly; if either a timestamp or the earliest one
// has a fraction, its offset is computed in float64. The offset, in
// milliseconds, is rounded to the nearest millisecond (halves away from
// zero); a TimeScale other than 1 then multiplies it and truncates toward
// zero. With the default TimeUnit an integer offset needs no rounding.
//
// A rebased, scaled timestamp beyond what a time.Duration holds in
// nanoseconds is a *ParseError for its line (field "timestamp"): the file's
// timestamps are then in a finer unit than TimeUnit says, or span centuries.
// Invalid opts give an error wrapping ErrBadOptions; a line longer than
// MaxLineBytes is a *ParseError wrapping ErrLineTooLong, skipped like any
// other in Skip mode.
//
// r may be gzip-compressed (Read decompresses it) and may start with a
// UTF-8 byte order mark (dropped); input in another compression it
// recognises gives an error wrapping ErrCompressed before any line, and
// UTF-16 text (a UTF-16 byte order mark) one wrapping ErrUTF16.
func Read(r io.Reader, opts Options) ([]Request, Report, error) {
	return read(r, opts, MaxLineBytes)
}

// checkOptions validates opts and returns them with defaults filled in.
func checkOptions(opts Options) (Options, error) {
	if opts.OnError == 0 {
		opts.OnError = Stop
	}
	if opts.OnError != Stop && opts.OnError != Skip {
		return opts, fmt.Errorf("trace: OnError %d is neither Stop nor Skip: %w", opts.OnError, ErrBadOptions)
	}
	if opts.BlockTokens < 0 {
		return opts, fmt.Errorf("trace: BlockTokens %d must be >= 0: %w", opts.BlockTokens, ErrBadOptions)
	}
	if opts.BlockTokens == 0 {
		opts.BlockTokens = BlockTokens
	}
	if !(opts.TimeScale >= 0) || math.IsInf(opts.TimeScale, 0) {
		return opts, fmt.Errorf("trace: TimeScale %v must be finite and >= 0: %w", opts.TimeScale, ErrBadOptions)
	}
	if opts.Limit < 0 {
		return opts, fmt.Errorf("trace: Limit %d must be >= 0: %w", opts.Limit, ErrBadOptions)
	}
	if opts.MaxInputTokens < 0 {
		return opts, fmt.Errorf("trace: MaxInputTokens %d must be >= 0: %w", opts.MaxInputTokens, ErrBadOptions)
	}
	if opts.MaxInputTokens == 0 {
		opts.MaxInputTokens = DefaultMaxInputTokens
	}
	if opts.TimeUnit < 0 {
		return opts, fmt.Errorf("trace: TimeUnit %v must be >= 0: %w", opts.TimeUnit, ErrBadOptions)
	}
	if opts.TimeUnit == 0 {
		opts.TimeUnit = time.Millisecond
	}
	return opts, nil
}

// read is Read with lines limited to maxLine bytes.
func read(r io.Reader, opts Options, maxLine int) ([]Request, Report, error) {
	opts, err := checkOptions(opts)
	if err != nil {
		return nil, Report{}, err
	}
	text, err := textOf(bufio.NewReaderSize(r, 1<<16))
	if err != nil {
		return nil, Report{}, err
	}
	lr := lineReader{r: text, max: maxLine}
	var (
		reqs   []Request
		lines  []int   // reqs[i] is on line lines[i]
		stamps []stamp // reqs[i]'s timestamp, as in the file
		rep    Report
	)
	line := 0
	for {
		raw, tooLong, err := lr.next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, rep, fmt.Errorf("trace: reading line %d: %w", line+1, err)
		}
		line++
		b := bytes.TrimSpace(raw)
		if len(b) == 0 && !tooLong {
			continue
		}
		rep.Lines++
		var req Request
		var ts stamp
		var perr *ParseError
		if tooLong {
			perr = &ParseError{Line: line, Field: "json", Err: fmt.Errorf("over %d bytes: %w", maxLine, ErrLineTooLong)}
		} else {
			req, ts, perr = parseLine(line, b, opts)
		}
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
		reqs = append(reqs, req)
		lines = append(lines, line)
		stamps = append(stamps, ts)
		if opts.Limit > 0 && len(reqs) >= opts.Limit {
			break
		}
	}
	reqs, stamps, err = rebase(reqs, lines, stamps, opts, &rep)
	if err != nil {
		return nil, rep, err
	}
	// Ties in milliseconds keep file order, as they always have for
	// integer stamps; in a trace with a fractional stamp they go by the
	// stamps as written first: stamps in one millisecond still say which
	// came first.
	frac := slices.ContainsFunc(stamps, func(s stamp) bool { return s.frac })
	order := make([]int, len(reqs))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(i, j int) bool {
		a, b := order[i], order[j]
		if reqs[a].Timestamp != reqs[b].Timestamp {
			return reqs[a].Timestamp < reqs[b].Timestamp
		}
		return frac && stamps[a].before(stamps[b])
	})
	sorted := make([]Request, len(reqs))
	for i, k := range order {
		sorted[i] = reqs[k]
	}
	return sorted, rep, nil
}

// lineReader splits its input into lines ending in '\n' (or at the end of
// the input) and holds at most max bytes of one line.
type lineReader struct {
	r   *bufio.Reader
	max int
	buf []byte
}

// next returns the next line without its '\n', valid until the next call, or
// io.EOF after the last line. A line over max bytes is read to its end and
// dropped: next returns nil and tooLong true.
func (lr *lineReader) next() (line []byte, tooLong bool, err error) {
	lr.buf = lr.buf[:0]
	read := 0
	for {
		chunk, err := lr.r.ReadSlice('\n')
		read += len(chunk)
		body := chunk
		if err == nil {
			body = body[:len(body)-1] // the '\n'
		}
		if !tooLong {
			if len(lr.buf)+len(body) > lr.max {
				tooLong = true
				lr.buf = lr.buf[:0]
			} else {
				lr.buf = append(lr.buf, body...)
			}
		}
		switch {
		case err == nil:
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case err == io.EOF:
			if read == 0 {
				return nil, false, io.EOF
			}
		default:
			return nil, false, err
		}
		if tooLong {
			return nil, true, nil
		}
		return lr.buf, false, nil
	}
}

// durationLimit is 2^63: a float64 number of nanoseconds below it converts
// to a time.Duration exactly.
const durationLimit = float64(math.MaxInt64)

// stamp is a timestamp as the file wrote it: an integer, exact, or a
// number with a fraction or an exponent, as a float64.
type stamp struct {
	i    int64   // the integer; a fractional stamp's value truncated
	f    float64 // the value, if frac
	frac bool
}

func (s stamp) float() float64 {
	if s.frac {
		return s.f
	}
	return float64(s.i)
}

func (s stamp) String() string {
	if s.frac {
		return strconv.FormatFloat(s.f, 'g', -1, 64)
	}
	return strconv.FormatInt(s.i, 10)
}

// before reports whether a is earlier than b, exactly if both are integers.
func (a stamp) before(b stamp) bool {
	if !a.frac && !b.frac {
		return a.i < b.i
	}
	return a.float() < b.float()
}

// offsetMS returns ts-base, base <= ts, in whole milliseconds (rounded to the
// nearest, halves up) for timestamps in units of unit, and false if that is
// past what an int64 holds. Integer stamps give an exact result.
func offsetMS(ts, base stamp, unit time.Duration) (int64, bool) {
	if !ts.frac && !base.frac {
		off := uint64(ts.i - base.i) // 0 <= base.i <= ts.i: no overflow
		hi, lo := bits.Mul64(off, uint64(unit))
		lo, carry := bits.Add64(lo, uint64(time.Millisecond/2), 0)
		hi += carry
		if hi >= uint64(time.Millisecond) {
			return 0, false // the quotient needs over 64 bits
		}
		ms, _ := bits.Div64(hi, lo, uint64(time.Millisecond))
		if ms > math.MaxInt64 {
			return 0, false
		}
		return int64(ms), true
	}
	off := max(ts.float()-base.float(), 0)
	ms := math.Round(off * (float64(unit) / float64(time.Millisecond)))
	if !(ms < durationLimit) {
		return 0, false
	}
	return int64(ms), true
}

// rebase subtracts the earliest timestamp from every request's, converts
// them from opts.TimeUnit to milliseconds, scales them, and rejects (Stop)
// or drops (Skip) those whose offset overflows a time.Duration, in file
// order. lines gives each request's line and stamps its timestamp; the
// stamps of the requests kept are returned with them.
func rebase(reqs []Request, lines []int, stamps []stamp, opts Options, rep *Report) ([]Request, []stamp, error) {
	if len(reqs) == 0 {
		return reqs, stamps, nil
	}
	base := stamps[0]
	for _, s := range stamps[1:] {
		if s.before(base) {
			base = s
		}
	}
	rep.Base = base.i
	scale := opts.TimeScale
	if scale == 0 {
		scale = 1
	}
	kept := reqs[:0]
	keptStamps := stamps[:0]
	for i, r := range reqs {
		off, ok := offsetMS(stamps[i], base, opts.TimeUnit)
		scaled := float64(off) * scale
		if !ok || !(scaled*float64(time.Millisecond) < durationLimit) {
			perr := &ParseError{Line: lines[i], Field: "timestamp", Err: fmt.Errorf(
				"timestamp %v is %v units of %v after the first request (timestamp %v), times %g: past the longest time a Duration holds (%.0f ms): is TimeUnit %v right?",
				stamps[i], offUnits(stamps[i], base), opts.TimeUnit, base, scale, durationLimit/float64(time.Millisecond), opts.TimeUnit)}
			if opts.OnError == Stop {
				return nil, nil, perr
			}
			rep.Skipped++
			if len(rep.Errors) < maxKeptErrors {
				rep.Errors = append(rep.Errors, *perr)
			}
			continue
		}
		r.Timestamp = off
		if scale != 1 {
			r.Timestamp = int64(scaled)
		}
		kept = append(kept, r)
		keptStamps = append(keptStamps, stamps[i])
	}
	return kept, keptStamps, nil
}

// offUnits formats ts-base in the file's unit, for an error message.
func offUnits(ts, base stamp) string {
	if !ts.frac && !base.frac {
		return strconv.FormatInt(ts.i-base.i, 10)
	}
	return strconv.FormatFloat(ts.float()-base.float(), 'g', -1, 64)
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
	Timestamp    *jsonTime  `json:"timestamp"`
	InputLength  *jsonInt   `json:"input_length"`
	OutputLength *jsonInt   `json:"output_length"`
	HashIDs      *[]jsonInt `json:"hash_ids"`
}

// jsonInt is an integer written as a JSON number. encoding/json would
// take a quoted number into a json.Number, and a null array element as
// 0 (hash id 0: a false shared prefix); jsonInt refuses both.
type jsonInt int64

func (n *jsonInt) UnmarshalJSON(b []byte) error {
	bad := func(what string) error {
		return &json.UnmarshalTypeError{Value: what, Type: reflect.TypeFor[int64]()}
	}
	if len(b) == 0 || (b[0] != '-' && (b[0] < '0' || b[0] > '9')) {
		return bad(string(b)) // a string, null, an object, an array, a bool
	}
	v, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil {
		return bad("number " + string(b)) // a fraction, an exponent, out of range
	}
	*n = jsonInt(v)
	return nil
}

// jsonTime is a timestamp written as a JSON number: an integer, kept
// exact, or a number with a fraction or an exponent, read as a float64
// whose magnitude is below 2^63 (parseLine refuses a negative one). Like
// jsonInt it refuses a string, null and the rest.
type jsonTime stamp

func (t *jsonTime) UnmarshalJSON(b []byte) error {
	var n jsonInt
	err := n.UnmarshalJSON(b)
	if err == nil {
		*t = jsonTime{i: int64(n)}
		return nil
	}
	if !bytes.ContainsAny(b, ".eE") || len(b) == 0 || (b[0] != '-' && (b[0] < '0' || b[0] > '9')) {
		return err // not a number, or an integer out of range
	}
	f, perr := strconv.ParseFloat(string(b), 64)
	if perr != nil || !(f < durationLimit) || f <= -durationLimit {
		return &json.UnmarshalTypeError{Value: "number " + string(b), Type: reflect.TypeFor[time.Duration]()} // past what a time.Duration holds
	}
	*t = jsonTime{i: int64(f), f: f, frac: true} // parseLine refuses f < 0
	return nil
}

func parseLine(line int, b []byte, opts Options) (Request, stamp, *ParseError) {
	blockTokens := opts.BlockTokens
	var raw rawRequest
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&raw); err != nil {
		field := "json"
		var ute *json.UnmarshalTypeError
		if errors.As(err, &ute) && ute.Field != "" {
			field = ute.Field
		} else {
			err = notJSONLines(b, err)
		}
		return Request{}, stamp{}, &ParseError{Line: line, Field: field, Err: err}
	}
	if off := dec.InputOffset(); off != int64(len(b)) {
		return Request{}, stamp{}, &ParseError{Line: line, Field: "json", Err: fmt.Errorf(
			"data after the JSON object (byte %d of %d): one request per line", off, len(b))}
	}
	if f := repeatedField(b); f != "" {
		return Request{}, stamp{}, &ParseError{Line: line, Field: f, Err: errors.New("named twice: which value holds is ambiguous")}
	}
	var req Request
	var perr *ParseError
	num := func(field string, n *jsonInt, min int64) int64 {
		if perr != nil {
			return 0
		}
		if n == nil {
			perr = &ParseError{Line: line, Field: field, Err: errors.New("missing")}
			return 0
		}
		v := int64(*n)
		if v < min {
			perr = &ParseError{Line: line, Field: field, Err: fmt.Errorf("%d is below %d", v, min)}
			return 0
		}
		return v
	}
	var ts stamp
	switch {
	case raw.Timestamp == nil:
		perr = &ParseError{Line: line, Field: "timestamp", Err: errors.New("missing")}
	case raw.Timestamp.frac && raw.Timestamp.f < 0, !raw.Timestamp.frac && raw.Timestamp.i < 0:
		perr = &ParseError{Line: line, Field: "timestamp", Err: fmt.Errorf("%v is below 0", stamp(*raw.Timestamp))}
	default:
		ts = stamp(*raw.Timestamp)
	}
	inputLength := num("input_length", raw.InputLength, 1)
	req.OutputLength = int(num("output_length", raw.OutputLength, 0))
	if perr != nil {
		return Request{}, stamp{}, perr
	}
	if inputLength > int64(opts.MaxInputTokens) {
		return Request{}, stamp{}, &ParseError{Line: line, Field: "input_length", Err: fmt.Errorf(
			"%d tokens, over %d: %w", inputLength, opts.MaxInputTokens, ErrTooManyTokens)}
	}
	req.InputLength = int(inputLength)
	if raw.HashIDs == nil || len(*raw.HashIDs) == 0 {
		return Request{}, stamp{}, &ParseError{Line: line, Field: "hash_ids", Err: errors.New("missing or empty")}
	}
	req.HashIDs = make([]int64, len(*raw.HashIDs))
	for i, id := range *raw.HashIDs {
		req.HashIDs[i] = int64(id)
	}
	for i, id := range req.HashIDs {
		if id < 0 {
			return Request{}, stamp{}, &ParseError{Line: line, Field: "hash_ids", Err: fmt.Errorf("id %d at index %d is negative", id, i)}
		}
	}
	if want := (req.InputLength + blockTokens - 1) / blockTokens; len(req.HashIDs) != want {
		return Request{}, stamp{}, &ParseError{Line: line, Field: "hash_ids", Err: fmt.Errorf(
			"%d ids for input_length %d, want ceil(%d/%d) = %d%s%s", len(req.HashIDs), req.InputLength, req.InputLength, blockTokens, want,
			floorHint(req.InputLength, len(req.HashIDs), blockTokens), blockSizeHint(req.InputLength, len(req.HashIDs)))}
	}
	return req, ts, nil
}

// floorHint says, for a line with floor(inputLength/blockTokens) ids where
// the last block is partly filled, that the trace gave that block no id,
// or "" for any other line.
func floorHint(inputLength, ids, blockTokens int) string {
	if inputLength%blockTokens == 0 || ids != inputLength/blockTokens {
		return ""
	}
	return fmt.Sprintf(" (that is floor(%d/%d): the trace gives no id to the prompt's partly filled last block of %d tokens; every block needs one, the last included, as in Mooncake's traces)",
		inputLength, blockTokens, inputLength%blockTokens)
}

// blockSizeHint suggests, for a line whose id count does not match the
// block size read with, the power-of-two block size that would match (the
// trace was likely written with it), or "" if none does.
func blockSizeHint(inputLength, ids int) string {
	for b := 1; b <= 1<<16; b *= 2 {
		if (inputLength+b-1)/b == ids {
			return fmt.Sprintf(" (%d-token ids would match: is the trace's block size, Options.BlockTokens, %d?)", b, b)
		}
	}
	return ""
}

// fieldNames are the fields a line holds, as encoding/json matches them
// (ignoring case).
var fieldNames = [...]string{"timestamp", "input_length", "output_length", "hash_ids"}

// repeatedField returns the field that object b, valid JSON (parseLine
// decoded it first), names more than once ("" if none): encoding/json
// would keep its last value. It scans b once by hand: a second pass of
// encoding/json's Decoder.Token over every line made Read about twice as
// slow.
func repeatedField(b []byte) string {
	var seen [len(fieldNames)]bool
	depth := 0
	for i := 0; i < len(b); i++ {
		switch b[i] {
		case '{', '[':
			depth++
		case '}', ']':
			depth--
		case '"':
			end := i + 1 // to the closing quote, then past it
			for ; b[end] != '"'; end++ {
				if b[end] == '\\' {
					end++
				}
			}
			end++
			key := b[i:end]
			i = end - 1
			if depth != 1 || !followedByColon(b[end:]) {
				continue // a value, or a key of a nested object
			}
			name := key[1 : len(key)-1]
			if bytes.IndexByte(name, '\\') >= 0 {
				var s string
				if json.Unmarshal(key, &s) != nil {
					return ""
				}
				name = []byte(s)
			}
			for k, f := range fieldNames {
				if bytes.EqualFold(name, []byte(f)) {
					if seen[k] {
						return f
					}
					seen[k] = true
				}
			}
		}
	}
	return ""
}

// followedByColon reports whether b starts with a colon after JSON
// whitespace: the string before it was an object's key.
func followedByColon(b []byte) bool {
	for _, c := range b {
		switch c {
		case ' ', '\t', '\n', '\r':
		case ':':
			return true
		default:
			return false
		}
	}
	return false
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
