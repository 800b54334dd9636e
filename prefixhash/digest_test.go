package prefixhash

import (
	"crypto/sha256"
	"encoding/binary"
	"strconv"
	"testing"
)

func TestDigestChainMatchesDefinition(t *testing.T) {
	tokens := make([]int64, 40)
	for i := range tokens {
		tokens[i] = int64(i*7919) - 5
	}
	var d Digester
	got := d.Chain(nil, "ns", tokens, 16)
	if len(got) != 2 {
		t.Fatalf("%d digests for 2 full blocks", len(got))
	}
	prev := sha256.Sum256([]byte(digestDomain + "ns"))
	for i := range got {
		var buf []byte
		buf = append(buf, prev[:]...)
		for _, x := range tokens[i*16 : (i+1)*16] {
			buf = binary.LittleEndian.AppendUint64(buf, uint64(x))
		}
		prev = sha256.Sum256(buf)
		if got[i] != Digest(prev) {
			t.Fatalf("block %d: digest differs from SHA-256 of parent||tokens", i)
		}
	}
}

func TestDigestSeparatesPrefixesAndNamespaces(t *testing.T) {
	a := []int64{1, 2, 3, 4, 5, 6, 7, 8}
	b := []int64{9, 2, 3, 4, 5, 6, 7, 8} // same second block, other first block
	var d Digester
	da, db := d.Chain(nil, "", a, 4), d.Chain(nil, "", b, 4)
	if da[1] == db[1] {
		t.Fatal("equal second-block digests after different first blocks")
	}
	if x, y := d.Chain(nil, "t1", a, 4), d.Chain(nil, "t2", a, 4); x[0] == y[0] {
		t.Fatal("equal digests in different namespaces")
	}
}

func TestNamespaceKey(t *testing.T) {
	if got := (Namespace{Salt: "tenant"}).Key(); got != "tenant" {
		t.Fatalf("salt-only namespace keys as %q, want the bare salt", got)
	}
	seen := map[string]Namespace{}
	for _, n := range []Namespace{
		{}, {Salt: "a"}, {Model: "a"}, {LoRA: "a"}, {Layout: "a"},
		{Model: "m", Salt: "x"}, {Model: "mx"}, {Model: "m", LoRA: "x"},
		{Model: "m@1"}, {Model: "m@2"},
	} {
		k := n.Key()
		if o, ok := seen[k]; ok {
			t.Fatalf("namespaces %+v and %+v share key %q", o, n, k)
		}
		seen[k] = n
	}
}

func BenchmarkDigestBlock(b *testing.B) {
	for _, bs := range []int{16, 512} {
		tokens := make([]int64, bs)
		b.Run("tokens="+strconv.Itoa(bs), func(b *testing.B) {
			var d Digester
			var prev Digest
			b.SetBytes(int64(8 * bs))
			for b.Loop() {
				prev = d.Block(prev, tokens)
			}
		})
	}
}

// TestSaltCannotImitateNamespace: a bare salt keys as itself (nano-vllm
// compatibility) unless it starts like an encoded namespace; then it is
// encoded too, so no salt can produce another namespace's key, seed or
// digests.
func TestSaltCannotImitateNamespace(t *testing.T) {
	victim := Namespace{Model: "m", Layout: "fp"}
	forged := Namespace{Salt: victim.Key()}
	if forged.Key() == victim.Key() {
		t.Fatalf("the salt-only namespace %+v keys as %+v", forged, victim)
	}
	var d Digester
	tokens := []int64{1, 2, 3, 4}
	if a, b := d.Chain(nil, forged.Key(), tokens, 4), d.Chain(nil, victim.Key(), tokens, 4); a[0] == b[0] {
		t.Fatal("a salt imitating an encoded namespace gets its digests")
	}
	if plain := (Namespace{Salt: "tenant-a"}); plain.Key() != "tenant-a" {
		t.Fatalf("a plain salt keys as %q, want the bare salt", plain.Key())
	}
}

// TestLoRAOf: the adapter named in a namespace key comes back out of it;
// the base model, a bare salt and what is not a key name none.
func TestLoRAOf(t *testing.T) {
	for _, c := range []struct {
		key  string
		want string
	}{
		{Namespace{Model: "m", LoRA: "sql-adapter", Salt: "t"}.Key(), "sql-adapter"},
		{Namespace{LoRA: "x"}.Key(), "x"},
		{Namespace{Model: "m", Layout: "l"}.Key(), ""},
		{Namespace{Salt: "tenant"}.Key(), ""},
		{"", ""},
		{nsMagic + "\xff", ""},
		{nsMagic + "\x05ab", ""},
	} {
		if got := LoRAOf(c.key); got != c.want {
			t.Errorf("LoRAOf(%q) = %q, want %q", c.key, got, c.want)
		}
	}
}
