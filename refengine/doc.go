// Package refengine is a small decoder-only transformer in pure Go (float32,
// RMSNorm, rotary position embeddings, grouped-query attention, a SiLU-gated
// MLP; weights drawn from Config.Seed), written as a test oracle for kvtier:
// its keys and values live in a KVStore the caller supplies, so a KV cache can
// hold them, and Reference recomputes a sequence with no cache. A cache is
// exact if Forward over it gives logits bit-identical to Reference's.
//
// internal/enginetest drives a Model through a kvtier.Manager as a serving
// engine does (its KVStore reads and writes the Manager's block arena) and
// checks every logit against Reference; MemKV is the plain in-memory store.
//
// # Usage
//
//	m, err := refengine.New(refengine.TinyConfig)
//	if err != nil { ... }
//	kv := m.NewMemKV()
//	logits, err := m.Forward(kv, prompt[:5], 0)        // prefill a first chunk
//	logits, err = m.Forward(kv, prompt[5:], 5)         // the rest, reading positions 0..4 from kv
//	ref, err := m.Reference(prompt)                    // no cache: the same rows, bit for bit
//	tokens, _, err := m.Generate(kv, []int64{refengine.Argmax(logits[len(logits)-1])}, len(prompt), 4)
package refengine
