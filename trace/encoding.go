package trace

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
)

// ErrCompressed is wrapped by the error Read returns, before any line, for
// input compressed in a format it does not decompress (zstd, xz, bzip2, a
// zip archive): decompress it first. Gzip is read directly.
var ErrCompressed = errors.New("kvtier: trace compressed in a format Read does not decompress")

// ErrUTF16 is wrapped by the error Read returns, before any line, for input
// that starts with a UTF-16 byte order mark (Windows PowerShell 5's >
// writes such files): convert it to UTF-8 first.
var ErrUTF16 = errors.New("kvtier: trace is UTF-16 text, not UTF-8")

// gzipMagic starts a gzip member (RFC 1952).
var gzipMagic = []byte{0x1f, 0x8b}

// otherCompressions are the formats Read recognises and refuses, by the
// bytes their files start with.
var otherCompressions = []struct {
	name  string
	magic []byte
}{
	{"zstd", []byte{0x28, 0xb5, 0x2f, 0xfd}},
	{"xz", []byte{0xfd, '7', 'z', 'X', 'Z', 0x00}},
	{"bzip2", []byte("BZh")},
	{"zip", []byte{'P', 'K', 0x03, 0x04}},
}

// utf8BOM is the UTF-8 byte order mark some editors write before the text.
var utf8BOM = []byte{0xef, 0xbb, 0xbf}

// textOf returns the trace text r holds: r itself, or, if r starts with
// a gzip header, its decompressed contents (every member, one after
// another), in either case without a leading UTF-8 byte order mark, which
// is no part of line 1. The caller closes nothing: the gzip reader holds
// no resource beyond r.
func textOf(r *bufio.Reader) (*bufio.Reader, error) {
	head, err := peek(r, 8)
	if err != nil {
		return nil, err
	}
	if bytes.HasPrefix(head, gzipMagic) {
		zr, err := gzip.NewReader(r)
		if err != nil {
			return nil, fmt.Errorf("trace: reading the gzip header: %w", err)
		}
		r = bufio.NewReaderSize(zr, r.Size())
	} else {
		for _, c := range otherCompressions {
			if bytes.HasPrefix(head, c.magic) {
				return nil, fmt.Errorf("trace: the input is %s-compressed (it starts with %q): decompress it first (gzip is read directly): %w", c.name, c.magic, ErrCompressed)
			}
		}
	}
	if head, err = peek(r, len(utf8BOM)); err != nil {
		return nil, err
	}
	if bytes.HasPrefix(head, []byte{0xff, 0xfe}) || bytes.HasPrefix(head, []byte{0xfe, 0xff}) {
		return nil, fmt.Errorf("trace: the input starts with a UTF-16 byte order mark: convert it to UTF-8 first (iconv -f UTF-16 -t UTF-8): %w", ErrUTF16)
	}
	if bytes.Equal(head, utf8BOM) {
		if _, err := r.Discard(len(utf8BOM)); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// peek returns up to n bytes at the start of r, fewer at the end of the
// input. A read error fails it: bufio.Reader.Peek hands the error over
// once and forgets it, and a reader need not repeat it, so the first line
// would read on past it (an input that failed at once read as an empty
// trace).
func peek(r *bufio.Reader, n int) ([]byte, error) {
	head, err := r.Peek(n)
	if err != nil && err != io.EOF && !errors.Is(err, bufio.ErrBufferFull) {
		return nil, fmt.Errorf("trace: reading line 1: %w", err)
	}
	return head, nil
}

// notJSONLines explains, for a line that does not decode as one JSON object,
// a file that is not JSON Lines: a JSON array of requests, or objects
// spread over several lines (pretty-printed). err is the decoder's error;
// the result is err itself for any other line.
func notJSONLines(b []byte, err error) error {
	switch {
	case len(b) > 0 && b[0] == '[':
		return fmt.Errorf("a JSON array, not an object: a trace is JSON Lines, one request object a line (convert an array with jq -c '.[]'): %w", err)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return fmt.Errorf("the line ends inside its JSON object: a trace is JSON Lines, one whole request object a line (is it pretty-printed? jq -c . flattens it): %w", err)
	}
	return err
}
