package trace

// Tokens returns the prompt of req as token ids for a trace of Mooncake's
// BlockTokens (512) tokens a hash id: it is TokensOf(req, BlockTokens, vocab).
// A trace read with another Options.BlockTokens needs TokensOf.
func Tokens(req Request, vocab int) []int64 {
	return TokensOf(req, BlockTokens, vocab)
}

// TokensOf returns the prompt of req as token ids: hash id h stands for
// blockTokens ids drawn from a generator seeded by h, and the last block is
// cut to make exactly InputLength tokens (fewer if req has too few hash ids).
// blockTokens must be the Options.BlockTokens req was read with, and > 0;
// every id is in [0, vocab), and vocab must be > 0. Equal hash ids give equal
// blocks whatever blockTokens is, so a block's first tokens do not depend on it.
// It allocates InputLength ids at once: Read refuses a line claiming more than
// Options.MaxInputTokens (DefaultMaxInputTokens, 128 MiB of ids), and a
// Request built by hand must be bounded by its maker.
func TokensOf(req Request, blockTokens, vocab int) []int64 {
	if blockTokens <= 0 {
		panic("kvtier: trace.TokensOf: blockTokens must be > 0")
	}
	out := make([]int64, 0, req.InputLength)
	for _, id := range req.HashIDs {
		n := min(blockTokens, req.InputLength-len(out))
		out = AppendBlockTokens(out, id, n, vocab)
	}
	return out
}

// AppendBlockTokens appends the first n token ids that hash id stands for.
func AppendBlockTokens(dst []int64, id int64, n, vocab int) []int64 {
	if vocab <= 0 {
		panic("kvtier: trace.AppendBlockTokens: vocab must be > 0")
	}
	s := uint64(id)*0x9E3779B97F4A7C15 + 0x6A09E667F3BCC909
	for range n {
		s += 0x9E3779B97F4A7C15
		z := s
		z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
		z = (z ^ (z >> 27)) * 0x94D049BB133111EB
		z ^= z >> 31
		dst = append(dst, int64(z%uint64(vocab)))
	}
	return dst
}
