package trace

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// repeatedFieldRef is repeatedField written with encoding/json's tokenizer
// (as Read first had it): the reference the hand scanner is checked
// against.
func repeatedFieldRef(b []byte) string {
	dec := json.NewDecoder(bytes.NewReader(b))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return ""
	}
	var seen [len(fieldNames)]bool
	for dec.More() {
		t, err := dec.Token()
		key, ok := t.(string)
		if err != nil || !ok {
			return ""
		}
		for i, f := range fieldNames {
			if strings.EqualFold(key, f) {
				if seen[i] {
					return f
				}
				seen[i] = true
			}
		}
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return ""
		}
	}
	return ""
}

// FuzzRepeatedField: on every JSON object the hand scanner finds the
// field named twice that the tokenizer finds (nested objects, strings
// holding quotes, braces and field names, escaped and case-folded keys).
func FuzzRepeatedField(f *testing.F) {
	for _, s := range []string{
		goodLine,
		`{"timestamp": 1, "input_length": 10, "output_length": 1, "hash_ids": [0], "hash_ids": [1]}`,
		`{"timestamp": 1, "HASH_IDS": [1], "hash_ids": [0]}`,
		`{"ha\u0073h_ids": [1], "hash_ids": [0]}`,
		`{"timeſtamp": 1, "timestamp": 2}`,
		`{"x": {"timestamp": 1, "hash_ids": [0]}, "timestamp": 1, "hash_ids": [0]}`,
		`{"x": "\"timestamp\": 1, \"timestamp\": 2", "timestamp" : 3}`,
		`{"x": ["timestamp", "timestamp"], "y": "timestamp", "timestamp": {"timestamp": "}"}}`,
		`{"a\\": "timestamp", "timestamp" : 1 , "b": "\\\\", "TimeStamp"	:2}`,
		` {"timestamp":1,"input_length":10}` + "\r",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var v map[string]any
		if json.Unmarshal(b, &v) != nil || !json.Valid(b) {
			return // parseLine scans only lines holding one object
		}
		if got, want := repeatedField(b), repeatedFieldRef(b); got != want {
			t.Errorf("%q: repeatedField %q, the tokenizer %q", b, got, want)
		}
	})
}

// BenchmarkRead reads the embedded sample (600 requests of the
// conversation trace), strict checks included.
func BenchmarkRead(b *testing.B) {
	b.ReportAllocs()
	b.SetBytes(int64(len(sample)))
	for b.Loop() {
		reqs, _, err := Read(bytes.NewReader(sample), Options{})
		if err != nil || len(reqs) == 0 {
			b.Fatal(len(reqs), err)
		}
	}
	b.ReportMetric(float64(b.N)*600/b.Elapsed().Seconds(), "requests/s")
}
