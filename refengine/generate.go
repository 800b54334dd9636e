package refengine

// Generate decodes greedily. The prompt occupies positions
// start..start+len(prompt)-1 and positions 0..start-1 must already be in
// kv (start 0 for a fresh sequence). Step 0 runs the prompt through
// ForwardLast; each later step feeds the previous step's token at the
// next position. It returns the n tokens chosen by Argmax and, per step,
// the logits they were chosen from.
//
// For n >= 1, on return kv holds positions 0..start+len(prompt)+n-2: the
// last generated token has not been fed. To continue, pass it as the
// prompt of the next Generate with start = start+len(prompt)+n-1.
//
// n = 0 checks the arguments as for any n (a valid kv, a non-empty prompt
// of tokens in the vocabulary that fits MaxPositions from start) and runs
// nothing: it returns empty, non-nil slices and leaves kv as it was, with
// the prompt not fed (positions 0..start-1 only). To continue, pass the
// same prompt and start again.
func (m *Model) Generate(kv KVStore, prompt []int64, start, n int) (tokens []int64, logits [][]float32, err error) {
	if n < 0 {
		return nil, nil, &ArgError{Arg: "n", Value: n, Reason: "must not be negative"}
	}
	if err := m.checkArgs(kv, prompt, start); err != nil {
		return nil, nil, err
	}
	// checkArgs bounds start+len(prompt) by MaxPositions, so this cannot
	// overflow as start+len(prompt)+n-1 > MaxPositions would for a huge n.
	if n > MaxPositions-start-len(prompt)+1 {
		return nil, nil, &ArgError{Arg: "n", Value: n, Reason: "sequence would exceed MaxPositions"}
	}
	tokens = make([]int64, 0, n)
	logits = make([][]float32, 0, n)
	in, pos := prompt, start
	for range n {
		row, err := m.ForwardLast(kv, in, pos)
		if err != nil {
			return nil, nil, err
		}
		tok := Argmax(row)
		tokens = append(tokens, tok)
		logits = append(logits, row)
		pos += len(in)
		in = []int64{tok}
	}
	return tokens, logits, nil
}

// Argmax returns the index of the largest logit; on a tie the lowest
// index wins, and NaNs never win over a number. It returns -1 for an empty
// slice.
func Argmax(logits []float32) int64 { return int64(argmax(logits)) }
