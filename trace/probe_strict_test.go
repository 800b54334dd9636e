package trace

import (
	"errors"
	"strings"
	"testing"
)

// TestProbeNullAndQuotedValuesMalformed: a JSON null among hash_ids, or a
// number written as a string, is a malformed line for its field. encoding/json
// turns a null array element into 0 without an error (hash id 0 is the first
// block of some other request: a false shared prefix) and accepts a quoted
// number into a json.Number.
func TestProbeNullAndQuotedValuesMalformed(t *testing.T) {
	for _, c := range []struct{ line, field string }{
		{`{"timestamp": 1, "input_length": 600, "output_length": 1, "hash_ids": [7, null]}`, "hash_ids"},
		{`{"timestamp": 1, "input_length": 10, "output_length": 1, "hash_ids": [null]}`, "hash_ids"},
		{`{"timestamp": "1", "input_length": 10, "output_length": 1, "hash_ids": [0]}`, "timestamp"},
		{`{"timestamp": 1, "input_length": "10", "output_length": 1, "hash_ids": [0]}`, "input_length"},
		{`{"timestamp": 1, "input_length": 10, "output_length": "1", "hash_ids": [0]}`, "output_length"},
		{`{"timestamp": 1, "input_length": 10, "output_length": 1, "hash_ids": ["0"]}`, "hash_ids"},
		{`{"timestamp": null, "input_length": 10, "output_length": 1, "hash_ids": [0]}`, "timestamp"},
	} {
		reqs, _, err := Read(strings.NewReader(goodLine+"\n"+c.line+"\n"), Options{})
		var pe *ParseError
		if !errors.As(err, &pe) || !errors.Is(err, ErrMalformed) || pe.Line != 2 || pe.Field != c.field {
			t.Errorf("%s: %d requests %+v, err %v; want a *ParseError for line 2, field %s", c.line, len(reqs), reqs, err, c.field)
		}
	}
}

// TestProbeDuplicateFieldMalformed: a line naming a field twice is
// ambiguous (encoding/json keeps the last value, and matches names without
// regard to case): it is malformed for that field, not read with one of
// its values.
func TestProbeDuplicateFieldMalformed(t *testing.T) {
	for _, c := range []struct{ line, field string }{
		{`{"timestamp": 1, "input_length": 10, "output_length": 1, "hash_ids": [0], "hash_ids": [1]}`, "hash_ids"},
		{`{"timestamp": 1, "input_length": 10, "output_length": 1, "hash_ids": [0], "HASH_IDS": [1]}`, "hash_ids"},
		{`{"timestamp": 1, "timestamp": 900, "input_length": 10, "output_length": 1, "hash_ids": [0]}`, "timestamp"},
		{`{"Input_Length": 10, "timestamp": 1, "input_length": 10, "output_length": 1, "hash_ids": [0]}`, "input_length"},
	} {
		reqs, _, err := Read(strings.NewReader(goodLine+"\n"+c.line+"\n"), Options{})
		var pe *ParseError
		if !errors.As(err, &pe) || !errors.Is(err, ErrMalformed) || pe.Line != 2 || pe.Field != c.field {
			t.Errorf("%s: %d requests %+v, err %v; want a *ParseError for line 2, field %s", c.line, len(reqs), reqs, err, c.field)
		}
	}
	// Other fields, once each, are still allowed.
	if _, _, err := Read(strings.NewReader(`{"timestamp": 1, "input_length": 10, "output_length": 1, "hash_ids": [0], "session": 3}`), Options{}); err != nil {
		t.Errorf("an extra field: %v", err)
	}
}
