package trace

import (
	"errors"
	"io"
	"testing"
)

// errOnce returns its data with err on its first Read, and io.EOF after:
// a reader whose failure is not repeated (the io.Reader contract does not
// ask that it be).
type errOnce struct {
	data string
	err  error
	done bool
}

func (r *errOnce) Read(p []byte) (int, error) {
	if r.done {
		return 0, io.EOF
	}
	r.done = true
	return copy(p, r.data), r.err
}

// TestReadErrorBeforeEightBytes: a read error in the first bytes of the
// input, which Read peeks at for a compression or byte order mark, fails
// Read, in either mode. The peek took the error from the buffered reader,
// and Read went on to the input's end: an empty trace read "successfully",
// or a first line cut short, skipped as malformed in Skip mode.
func TestReadErrorBeforeEightBytes(t *testing.T) {
	errDisk := errors.New("disk on fire")
	for _, data := range []string{"", goodLine[:4]} {
		for _, mode := range []ErrorMode{Stop, Skip} {
			reqs, rep, err := Read(&errOnce{data: data, err: errDisk}, Options{OnError: mode})
			if !errors.Is(err, errDisk) {
				t.Errorf("data %q, mode %v: %d requests, %+v, err %v; want the read error", data, mode, len(reqs), rep, err)
			}
		}
	}
}
