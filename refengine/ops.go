package refengine

import "math"

// The kernels below are the whole arithmetic of the model. Each one is a
// plain loop with a fixed order of float32 operations that depends only on
// its inputs, never on how a forward pass was chunked. Every product that
// is added to something is converted with float32(...) first: the Go spec
// lets a compiler fuse x*y+z into one FMA (arm64, ppc64, s390x and
// GOAMD64=v3 do), and an explicit conversion is what forbids it, so the
// results do not depend on the instruction set either. Transcendentals
// (exp, sqrt, sin, cos) go through package math in float64 and are
// rounded to float32 once.

// dot returns sum_i a[i]*b[i], accumulated in float32 in increasing i.
func dot(a, b []float32) float32 {
	b = b[:len(a)]
	var s float32
	for i, x := range a {
		s += float32(x * b[i])
	}
	return s
}

// matVec sets out[r] = dot(w[r*len(x):(r+1)*len(x)], x) for every row r;
// w is row-major [len(out)][len(x)].
func matVec(out, w, x []float32) {
	n := len(x)
	for r := range out {
		out[r] = dot(w[r*n:(r+1)*n], x)
	}
}

// matVecAdd adds matVec(w, x) into out (the residual connection).
func matVecAdd(out, w, x []float32) {
	n := len(x)
	for r := range out {
		out[r] += dot(w[r*n:(r+1)*n], x)
	}
}

// rmsNormEps keeps rmsNorm finite on an all-zero input.
const rmsNormEps = 1e-5

// rmsNorm sets out = x / sqrt(mean(x^2) + eps) * gain.
func rmsNorm(out, x, gain []float32) {
	ms := dot(x, x) / float32(len(x))
	inv := float32(1 / math.Sqrt(float64(ms+rmsNormEps)))
	for i, v := range x {
		out[i] = float32(v*inv) * gain[i]
	}
}

// silu returns g * sigmoid(g), rounded once from float64.
func silu(g float32) float32 {
	x := float64(g)
	return float32(x / (1 + math.Exp(-x)))
}

// ropeBase is the rotary embedding base of Llama-style models.
const ropeBase = 10000

// ropeTable holds cos and sin of the rotation angles of one absolute
// position, one pair per rotated dimension pair (headDim/2 of them).
type ropeTable struct {
	cos, sin []float32
}

// newInvFreq returns base^(-2i/headDim) for i in [0, headDim/2).
func newInvFreq(headDim int) []float64 {
	f := make([]float64, headDim/2)
	for i := range f {
		f[i] = math.Pow(ropeBase, -float64(2*i)/float64(headDim))
	}
	return f
}

// fill computes the table of position pos. The angle pos*invFreq[i] is
// computed in float64 from the integer position, so a position's table is
// the same whichever call computes it.
func (t *ropeTable) fill(pos int, invFreq []float64) {
	for i, f := range invFreq {
		s, c := math.Sincos(float64(pos) * f)
		t.cos[i], t.sin[i] = float32(c), float32(s)
	}
}

// rope rotates every head of x (heads*headDim floats) in place, pairing
// dimension i with i+headDim/2 as Llama's rotate_half does.
func rope(x []float32, headDim int, t *ropeTable) {
	half := headDim / 2
	for h := 0; h+headDim <= len(x); h += headDim {
		head := x[h : h+headDim]
		for i := 0; i < half; i++ {
			a, b := head[i], head[i+half]
			c, s := t.cos[i], t.sin[i]
			head[i] = float32(a*c) - float32(b*s)
			head[i+half] = float32(a*s) + float32(b*c)
		}
	}
}

// argmax returns the index of the largest value, the lowest index on a
// tie; NaNs never win over a number. It returns -1 for an empty slice.
func argmax(x []float32) int {
	best := -1
	for i, v := range x {
		if v != v { // NaN
			continue
		}
		if best < 0 || v > x[best] {
			best = i
		}
	}
	if best < 0 && len(x) > 0 {
		return 0 // all NaN
	}
	return best
}
