package trace

import (
	"bytes"
	"compress/gzip"
	"errors"
	"strings"
	"testing"
)

// twoLines is a two-request trace; every encoding test reads it back.
const twoLines = goodLine + "\n" + `{"timestamp": 5, "input_length": 600, "output_length": 2, "hash_ids": [0, 1]}` + "\n"

func checkTwoLines(t *testing.T, what string, reqs []Request, rep Report, err error) {
	t.Helper()
	if err != nil || len(reqs) != 2 || rep.Lines != 2 || reqs[1].Timestamp != 5 || len(reqs[1].HashIDs) != 2 {
		t.Fatalf("%s: %d requests, %+v, %v; want the two requests", what, len(reqs), rep, err)
	}
}

// TestByteOrderMark: a UTF-8 byte order mark before the first line (Windows
// editors, PowerShell's Out-File) is no part of line 1; it used to make line 1
// malformed ("invalid character 'ï'"). One anywhere else is still malformed.
func TestByteOrderMark(t *testing.T) {
	const bom = "\ufeff"
	reqs, rep, err := Read(strings.NewReader(bom+twoLines), Options{})
	checkTwoLines(t, "leading BOM", reqs, rep, err)
	reqs, rep, err = Read(strings.NewReader(bom+strings.ReplaceAll(twoLines, "\n", "\r\n")), Options{})
	checkTwoLines(t, "leading BOM, CRLF", reqs, rep, err)
	_, _, err = Read(strings.NewReader(goodLine+"\n"+bom+goodLine+"\n"), Options{})
	var pe *ParseError
	if !errors.As(err, &pe) || pe.Line != 2 {
		t.Fatalf("BOM on line 2: %v, want a *ParseError for line 2", err)
	}
}

// TestGzip: a gzip-compressed trace (Dynamo writes .jsonl.gz) is read as
// the trace it holds, several gzip members one after another included, with
// line numbers counted in the decompressed text. It used to fail on line 1
// ("invalid character '\x1f'").
func TestGzip(t *testing.T) {
	gz := func(s string) []byte {
		var b bytes.Buffer
		w := gzip.NewWriter(&b)
		if _, err := w.Write([]byte(s)); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		return b.Bytes()
	}
	reqs, rep, err := Read(bytes.NewReader(gz(twoLines)), Options{})
	checkTwoLines(t, "gzip", reqs, rep, err)
	first, second, _ := strings.Cut(twoLines, "\n")
	members := append(gz(first+"\n"), gz(second)...)
	reqs, rep, err = Read(bytes.NewReader(members), Options{})
	checkTwoLines(t, "two gzip members", reqs, rep, err)
	reqs, rep, err = Read(bytes.NewReader(gz("\ufeff"+twoLines)), Options{})
	checkTwoLines(t, "gzip of a BOM and the trace", reqs, rep, err)

	_, _, err = Read(bytes.NewReader(gz(goodLine+"\n"+`{"timestamp": 1}`+"\n")), Options{})
	var pe *ParseError
	if !errors.As(err, &pe) || pe.Line != 2 {
		t.Fatalf("gzip, bad line 2: %v, want a *ParseError for line 2", err)
	}
	trunc := gz(twoLines)
	trunc = trunc[:len(trunc)-6]
	if _, _, err = Read(bytes.NewReader(trunc), Options{}); err == nil || errors.Is(err, ErrMalformed) {
		t.Fatalf("truncated gzip: %v, want a read error", err)
	}
}

// TestOtherCompression: a trace compressed in a format Read does not
// decompress is refused at once with ErrCompressed, naming the format, not
// as a malformed line 1.
func TestOtherCompression(t *testing.T) {
	for name, magic := range map[string]string{
		"zstd":  "\x28\xb5\x2f\xfd",
		"xz":    "\xfd7zXZ\x00",
		"bzip2": "BZh9",
		"zip":   "PK\x03\x04",
	} {
		_, _, err := Read(strings.NewReader(magic+"\x00\x01\x02rest"), Options{})
		if !errors.Is(err, ErrCompressed) || errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: err %v, want ErrCompressed naming %s", name, err, name)
		}
	}
}

// TestNotJSONLines: a file holding a JSON array of requests, or requests
// pretty-printed over several lines, fails on line 1 with an error that says
// the trace must be JSON Lines, not only "cannot unmarshal array" or
// "unexpected EOF".
func TestNotJSONLines(t *testing.T) {
	for name, in := range map[string]string{
		"array":        "[" + goodLine + ", " + goodLine + "]\n",
		"pretty":       "{\n  \"timestamp\": 0,\n  \"input_length\": 10,\n  \"output_length\": 1,\n  \"hash_ids\": [0]\n}\n",
		"pretty array": "[\n  " + goodLine + "\n]\n",
		"split in two": `{"timestamp": 0, "input_length": 10,` + "\n" + `"output_length": 1, "hash_ids": [0]}` + "\n",
	} {
		_, _, err := Read(strings.NewReader(in), Options{})
		var pe *ParseError
		if !errors.As(err, &pe) || pe.Line != 1 || pe.Field != "json" || !strings.Contains(err.Error(), "JSON Lines") {
			t.Errorf("%s: err %v, want a *ParseError for line 1 saying the trace must be JSON Lines", name, err)
		}
	}
}

// TestUTF16: a UTF-16 trace (Windows PowerShell 5's > writes one) is
// refused before any line with ErrUTF16, not as line 1's "invalid
// character 'ÿ'".
func TestUTF16(t *testing.T) {
	for name, bom := range map[string]string{"LE": "\xff\xfe", "BE": "\xfe\xff"} {
		var b strings.Builder
		b.WriteString(bom)
		for _, c := range twoLines {
			if name == "LE" {
				b.WriteString(string([]byte{byte(c), 0}))
			} else {
				b.WriteString(string([]byte{0, byte(c)}))
			}
		}
		_, _, err := Read(strings.NewReader(b.String()), Options{})
		if !errors.Is(err, ErrUTF16) || errors.Is(err, ErrMalformed) {
			t.Errorf("UTF-16%s: err %v, want ErrUTF16", name, err)
		}
	}
}
