package trace

import (
	"bytes"
	"compress/gzip"
	"errors"
	"testing"
)

// FuzzRead: whatever the bytes, Read returns without panicking, and either
// an error or requests that keep the format's promises: sorted, rebased
// timestamps, positive input lengths, non-negative ids and outputs, and
// ceil(input_length / BlockTokens) ids a request. A stop-mode error on a
// line is a *ParseError wrapping ErrMalformed.
func FuzzRead(f *testing.F) {
	f.Add([]byte(twoLines), 512)
	f.Add([]byte("\ufeff"+twoLines), 16)
	f.Add([]byte(`{"timestamp": 1.5e3, "input_length": 600, "output_length": 0, "hash_ids": [9223372036854775807, 0]}`), 512)
	f.Add([]byte("[\n"+goodLine+"\n]"), 512)
	var gz bytes.Buffer
	w := gzip.NewWriter(&gz)
	_, _ = w.Write([]byte(twoLines))
	_ = w.Close()
	f.Add(gz.Bytes(), 512)
	f.Fuzz(func(t *testing.T, in []byte, blockTokens int) {
		blockTokens = 1 + (blockTokens&0xffff+0x10000)%0x10000
		for _, mode := range []ErrorMode{Stop, Skip} {
			reqs, rep, err := Read(bytes.NewReader(in), Options{OnError: mode, BlockTokens: blockTokens})
			if err != nil {
				var pe *ParseError
				if errors.As(err, &pe) && (!errors.Is(err, ErrMalformed) || pe.Line < 1) {
					t.Fatalf("mode %d: %v: a ParseError that is not ErrMalformed or names no line", mode, err)
				}
				continue
			}
			if rep.Lines-rep.Skipped < len(reqs) {
				t.Fatalf("mode %d: %d requests from %d lines, %d skipped", mode, len(reqs), rep.Lines, rep.Skipped)
			}
			for i, r := range reqs {
				if r.Timestamp < 0 || (i > 0 && r.Timestamp < reqs[i-1].Timestamp) || (i == 0 && r.Timestamp != 0) {
					t.Fatalf("mode %d: request %d at %d ms, after %v", mode, i, r.Timestamp, reqs[:i])
				}
				if r.InputLength < 1 || r.OutputLength < 0 || len(r.HashIDs) != (r.InputLength+blockTokens-1)/blockTokens {
					t.Fatalf("mode %d: request %d: %+v with %d-token blocks", mode, i, r, blockTokens)
				}
				for _, id := range r.HashIDs {
					if id < 0 {
						t.Fatalf("mode %d: request %d: negative id %d", mode, i, id)
					}
				}
			}
		}
	})
}
