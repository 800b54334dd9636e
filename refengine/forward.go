package refengine

import (
	"fmt"
	"math"
)

// MaxPositions bounds the length of a sequence (positions 0..MaxPositions-1).
// A forward pass holds the K and V of its whole context in scratch memory,
// so a wild start position is refused rather than allocated.
const MaxPositions = 1 << 20

// Forward computes the positions start..start+len(tokens)-1 of a sequence
// whose positions 0..start-1 are already in kv, writes their K and V of
// every layer into kv, and returns one row of Vocab logits per token: row
// i is the distribution of the token after tokens[i].
//
// The result depends only on the token ids at positions 0..start+i, not
// on how the sequence was split into Forward calls: a prefill in one call,
// in chunks, or token by token all give bit-identical logits, provided kv
// returns exactly what was written. On error nothing is returned and the
// positions >= start of kv are unspecified; argument errors (ErrBadArgument,
// ErrTokenOutOfRange) are reported before kv is touched.
func (m *Model) Forward(kv KVStore, tokens []int64, start int) ([][]float32, error) {
	return m.forward(kv, tokens, start, true /* allLogits */)
}

// ForwardLast is Forward returning only the logits of the last token, as a
// decode step or the end of a prefill needs; it skips the output
// projection of the other tokens. Its row is bit-identical to Forward's
// last row.
func (m *Model) ForwardLast(kv KVStore, tokens []int64, start int) ([]float32, error) {
	rows, err := m.forward(kv, tokens, start, false /* allLogits */)
	if err != nil {
		return nil, err
	}
	return rows[0], nil
}

// checkArgs validates the arguments of a forward pass.
func (m *Model) checkArgs(kv KVStore, tokens []int64, start int) error {
	switch {
	case kv == nil:
		return &ArgError{Arg: "kv", Value: 0, Reason: "nil KVStore"}
	case len(tokens) == 0:
		return &ArgError{Arg: "tokens", Value: 0, Reason: "no tokens to compute"}
	case start < 0:
		return &ArgError{Arg: "start", Value: start, Reason: "must not be negative"}
	case len(tokens) > MaxPositions || start > MaxPositions-len(tokens):
		return &ArgError{Arg: "start", Value: start, Reason: fmt.Sprintf("start+len(tokens) exceeds MaxPositions (%d)", MaxPositions)}
	}
	return m.checkTokens(tokens)
}

func (m *Model) checkTokens(tokens []int64) error {
	for i, t := range tokens {
		if t < 0 || t >= int64(m.cfg.Vocab) {
			return &TokenError{Index: i, Token: t, Vocab: m.cfg.Vocab}
		}
	}
	return nil
}

// forward runs the model layer by layer over the chunk. For each layer it
// first computes and writes the K and V of every new position, then reads
// positions 0..end-1 back from kv and attends. Even the K and V computed a
// moment ago are used as read back from kv, so the float32 operations of
// a position are the same whether its keys were cached or fresh, and a
// store that loses or misplaces a write is caught by the first pass.
func (m *Model) forward(kv KVStore, tokens []int64, start int, allLogits bool) ([][]float32, error) {
	if err := m.checkArgs(kv, tokens, start); err != nil {
		return nil, err
	}
	cfg := m.cfg
	d, hd, kvDim, qDim := cfg.DModel, m.headDim, m.kvDim, cfg.Heads*m.headDim
	n, end := len(tokens), start+len(tokens)

	// Residual stream of the chunk, [n][d], starting as the embeddings.
	x := make([]float32, n*d)
	for t, tok := range tokens {
		copy(x[t*d:(t+1)*d], m.embed[int(tok)*d:(int(tok)+1)*d])
	}
	ropes := make([]ropeTable, n)
	for t := range ropes {
		ropes[t] = ropeTable{cos: make([]float32, hd/2), sin: make([]float32, hd/2)}
		ropes[t].fill(start+t, m.invFreq)
	}

	var (
		xn     = make([]float32, d)
		q      = make([]float32, n*qDim) // the chunk's queries, roped
		k      = make([]float32, kvDim)
		v      = make([]float32, kvDim)
		keys   = make([]float32, end*kvDim) // positions 0..end-1 as read from kv
		values = make([]float32, end*kvDim)
		scores = make([]float32, end)
		attn   = make([]float32, qDim)
		gate   = make([]float32, cfg.MLPHidden)
		up     = make([]float32, cfg.MLPHidden)
	)
	for l := range m.layers {
		w := &m.layers[l]
		for t := range n {
			rmsNorm(xn, x[t*d:(t+1)*d], w.attnNorm)
			qt := q[t*qDim : (t+1)*qDim]
			matVec(qt, w.wq, xn)
			matVec(k, w.wk, xn)
			matVec(v, w.wv, xn)
			rope(qt, hd, &ropes[t])
			rope(k, hd, &ropes[t])
			if err := kv.WriteKV(l, start+t, k, v); err != nil {
				return nil, &KVError{Op: "write", Layer: l, Pos: start + t, Err: err}
			}
		}
		for p := range end {
			if err := kv.ReadKV(l, p, keys[p*kvDim:(p+1)*kvDim], values[p*kvDim:(p+1)*kvDim]); err != nil {
				return nil, &KVError{Op: "read", Layer: l, Pos: p, Err: err}
			}
		}
		for t := range n {
			xt := x[t*d : (t+1)*d]
			ctx := start + t + 1 // a query at position p sees keys 0..p
			m.attend(attn, q[t*qDim:(t+1)*qDim], keys[:ctx*kvDim], values[:ctx*kvDim], scores[:ctx])
			matVecAdd(xt, w.wo, attn)

			rmsNorm(xn, xt, w.mlpNorm)
			matVec(gate, w.wGate, xn)
			matVec(up, w.wUp, xn)
			for i, g := range gate {
				gate[i] = silu(g) * up[i]
			}
			matVecAdd(xt, w.wDown, gate)
		}
	}

	first := 0
	if !allLogits {
		first = n - 1
	}
	out := make([][]float32, 0, n-first)
	for t := first; t < n; t++ {
		rmsNorm(xn, x[t*d:(t+1)*d], m.finalNorm)
		logits := make([]float32, cfg.Vocab)
		matVec(logits, m.lmHead, xn)
		out = append(out, logits)
	}
	return out, nil
}

// attend computes causal softmax attention of one position's queries q
// ([Heads][HeadDim]) over keys and values ([ctx][KVHeads][HeadDim]) into
// out ([Heads][HeadDim]). Every sum runs over key positions in increasing
// order; query head h reads KV head h/(Heads/KVHeads).
func (m *Model) attend(out, q, keys, values, scores []float32) {
	hd, kvDim := m.headDim, m.kvDim
	group := m.cfg.Heads / m.cfg.KVHeads
	scale := float32(1 / math.Sqrt(float64(hd)))
	for h := range m.cfg.Heads {
		qh := q[h*hd : (h+1)*hd]
		off := (h / group) * hd
		mx := float32(math.Inf(-1))
		for j := range scores {
			s := dot(qh, keys[j*kvDim+off:j*kvDim+off+hd]) * scale
			scores[j] = s
			mx = max(mx, s)
		}
		var sum float32
		for j, s := range scores {
			e := float32(math.Exp(float64(s - mx)))
			scores[j] = e
			sum += e
		}
		inv := 1 / sum
		oh := out[h*hd : (h+1)*hd]
		clear(oh)
		for j, e := range scores {
			p := e * inv
			vj := values[j*kvDim+off : j*kvDim+off+hd]
			for i, x := range vj {
				oh[i] += float32(p * x)
			}
		}
	}
}

// String describes the model's shape.
func (m *Model) String() string {
	c := m.cfg
	return fmt.Sprintf("refengine.Model{vocab=%d d=%d layers=%d heads=%d kv_heads=%d head_dim=%d mlp=%d seed=%d}",
		c.Vocab, c.DModel, c.Layers, c.Heads, c.KVHeads, m.headDim, c.MLPHidden, c.Seed)
}
