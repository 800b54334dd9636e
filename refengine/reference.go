package refengine

// Reference is the ground truth: it computes the whole sequence in one
// Forward over a fresh MemKV that no one else sees, and returns one row of
// logits per token. A cache is correct if Forward over it gives rows
// bit-identical (math.Float32bits) to these.
func (m *Model) Reference(tokens []int64) ([][]float32, error) {
	return m.Forward(m.NewMemKV(), tokens, 0)
}

// ReferenceGenerate is Generate with no cache: each step recomputes the
// prompt and every token generated so far from scratch with Reference.
// It costs O(n) full passes; use it to check a cached Generate of the same
// prompt, which must return the same tokens and bit-identical logits.
func (m *Model) ReferenceGenerate(prompt []int64, n int) (tokens []int64, logits [][]float32, err error) {
	if n < 0 {
		return nil, nil, &ArgError{Arg: "n", Value: n, Reason: "must not be negative"}
	}
	if err := m.checkArgs(m.NewMemKV(), prompt, 0); err != nil {
		return nil, nil, err
	}
	if n > MaxPositions-len(prompt)+1 { // len(prompt)+n-1 > MaxPositions, without overflow
		return nil, nil, &ArgError{Arg: "n", Value: n, Reason: "sequence would exceed MaxPositions"}
	}
	seq := append([]int64(nil), prompt...)
	tokens = make([]int64, 0, n)
	logits = make([][]float32, 0, n)
	for range n {
		row, err := m.ForwardLast(m.NewMemKV(), seq, 0)
		if err != nil {
			return nil, nil, err
		}
		tok := Argmax(row)
		tokens = append(tokens, tok)
		logits = append(logits, row)
		seq = append(seq, tok)
	}
	return tokens, logits, nil
}
