package conv

import (
	"bytes"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/shaperproxy/shaperproxy/fixtures"
)

// keysOf is the keys of body taken in one go.
func keysOf(body []byte) BodyKeys {
	var k BodyKeys
	k.Add(body, len(body))
	return k
}

// TestBodyKeysAdd: keys taken as a body is read, in reads of any length,
// are the keys taken in one go: one per whole block, the last partial
// block and a short body none.
func TestBodyKeysAdd(t *testing.T) {
	body := fixtures.SeedHistory()
	whole := keysOf(body)
	if len(whole.keys) != len(body)/keyBlock {
		t.Fatalf("%d keys for %d bytes", len(whole.keys), len(body))
	}
	rnd := rand.New(rand.NewPCG(1, 2))
	for range 20 {
		var k BodyKeys
		for n := 0; n < len(body); {
			n = min(len(body), n+1+rnd.IntN(3*keyBlock))
			k.Add(body, n)
		}
		if !slicesEqual(k, whole) {
			t.Fatal("keys taken in reads differ from keys taken whole")
		}
	}
	if k := keysOf(body[:keyBlock-1]); k.keys != nil {
		t.Fatal("a body shorter than a block keyed")
	}
	other := bytes.Clone(body)
	other[3*keyBlock+5] ^= 1
	ok := keysOf(other)
	if knownPrefix(whole.keys, ok.keys) != 3*keyBlock {
		t.Fatalf("a byte changed in block 3: %d bytes known the same", knownPrefix(whole.keys, ok.keys))
	}
}

func slicesEqual(a, b BodyKeys) bool {
	if len(a.keys) != len(b.keys) {
		return false
	}
	for i := range a.keys {
		if a.keys[i] != b.keys[i] {
			return false
		}
	}
	return true
}

// TestReparseKeyed: a long history's next request takes the messages its
// keys show the earlier request's without comparing them, exactly those
// whose bytes from the body's start are the same in whole blocks (found
// here by comparing the blocks), and each view is what ParseRequest gives
// — and stays so when the earlier body is written over (it holds none of
// its memory).
func TestReparseKeyed(t *testing.T) {
	seed := parseCopy(t, fixtures.SeedHistory())
	msgs := make([]string, 200)
	for i := range msgs {
		m := &seed.Messages[i]
		msgs[i] = string(seed.Body[m.Start:m.End])
	}
	body := func(model, sep string, ms []string) []byte {
		return []byte(`{"model":"` + model + `","messages":[` + strings.Join(ms, sep) + `],"stream":false}`)
	}
	with := func(i int, m string) []string {
		out := append([]string(nil), msgs...)
		out[i] = m
		return out
	}
	n := len(msgs)
	base := body("m", ",", msgs)
	cases := []struct {
		name string
		body []byte
		none bool // no message is taken on the keys
	}{
		{"the same", base, false},
		{"two more", body("m", ",", append(append([]string(nil), msgs...), `{"role":"user","content":"go on"}`, msgs[3])), false},
		{"the last other", body("m", ",", with(n-1, `{"role":"user","content":"something else entirely"}`)), false},
		{"one byte in the middle", body("m", ",", with(100, upLast(msgs[100]))), false},
		{"one byte in the second", body("m", ",", with(1, upLast(msgs[1]))), true},
		{"the separators", body("m", ", ", msgs), true},
		{"the messages moved", body("mm", ",", msgs), true},
		{"another model, as long", body("M", ",", msgs), true},
		{"fewer", body("m", ",", msgs[:n-30]), false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			prev, err := parseKeyed(bytes.Clone(base), keysOf(base).keys, nil)
			if err != nil {
				t.Fatal(err)
			}
			want, err := ParseRequest(bytes.Clone(c.body))
			if err != nil {
				t.Fatal(err)
			}
			got, err := parseKeyed(bytes.Clone(c.body), keysOf(c.body).keys, prev)
			if err != nil {
				t.Fatal(err)
			}
			// The messages whose bytes, and all before them, are the same
			// in whole blocks of both bodies.
			blocks := 0
			for (blocks+1)*keyBlock <= min(len(base), len(c.body)) && bytes.Equal(base[blocks*keyBlock:(blocks+1)*keyBlock], c.body[blocks*keyBlock:(blocks+1)*keyBlock]) {
				blocks++
			}
			taken := 0
			for taken < len(prev.Messages) && prev.Messages[taken].End <= blocks*keyBlock {
				taken++
			}
			if got.keyed != taken || c.none != (taken == 0) {
				t.Errorf("%d messages taken on the keys, want %d", got.keyed, taken)
			}
			sameView(t, got, want)
			// Unkeyed, the same view, every message compared.
			plain, err := parseReusing(bytes.Clone(c.body), prev)
			if err != nil {
				t.Fatal(err)
			}
			if plain.keyed != 0 {
				t.Fatalf("%d messages taken on keys not given", plain.keyed)
			}
			sameView(t, plain, want)
			for i := range prev.Body {
				prev.Body[i] = 'X'
			}
			sameView(t, got, want)
		})
	}
}

// upLast is m with its last "e" made "E": the same length, another
// message.
func upLast(m string) string {
	i := strings.LastIndexByte(m, 'e')
	return m[:i] + "E" + m[i+1:]
}

// BenchmarkBodyKeys is what the keys stand in for on the seed's request:
// comparing its bytes with an earlier body's (cold, as at saturation: one
// of 24 bodies in turn), against keying its own (warm, as the proxy keys a
// read's bytes just read).
func BenchmarkBodyKeys(b *testing.B) {
	seed := fixtures.SeedHistory()
	earlier := make([][]byte, 24)
	for i := range earlier {
		earlier[i] = bytes.Clone(seed)
	}
	body := bytes.Clone(seed)
	b.Run("compare", func(b *testing.B) {
		b.SetBytes(int64(len(seed)))
		k := 0
		for b.Loop() {
			old := earlier[k%len(earlier)]
			k++
			if !bytes.Equal(body, old) {
				b.Fatal("the copies differ")
			}
		}
	})
	b.Run("key", func(b *testing.B) {
		b.SetBytes(int64(len(seed)))
		for b.Loop() {
			var k BodyKeys
			k.Add(body, len(body))
		}
	})
}

// FuzzReparseKeyed: a long history with one byte changed, put in or
// taken out anywhere, read on its keys against the history's keyed view:
// the view ParseRequest gives, or its error.
func FuzzReparseKeyed(f *testing.F) {
	seed := parseCopy(f, fixtures.SeedHistory())
	base := truncated(f, seed, 100)
	f.Add(uint32(40000), byte('x'), uint8(0))
	f.Add(uint32(len(base)-3), byte(','), uint8(1))
	f.Add(uint32(keyBlock), byte(' '), uint8(2))
	f.Fuzz(func(t *testing.T, at uint32, c byte, how uint8) {
		i := int(at) % len(base)
		var body []byte
		switch how % 3 {
		case 0:
			body = bytes.Clone(base)
			body[i] = c
		case 1:
			body = append(append(bytes.Clone(base[:i]), c), base[i:]...)
		default:
			body = append(bytes.Clone(base[:i]), base[i+1:]...)
		}
		prev, err := parseKeyed(bytes.Clone(base), keysOf(base).keys, parseCopy(t, base))
		if err != nil {
			t.Fatal(err)
		}
		want, werr := ParseRequest(bytes.Clone(body))
		got, gerr := parseKeyed(body, keysOf(body).keys, prev)
		if (gerr == nil) != (werr == nil) || gerr != nil && gerr.Error() != werr.Error() {
			t.Fatalf("keyed reparse error %v, ParseRequest error %v", gerr, werr)
		}
		if werr == nil {
			sameView(t, got, want)
		}
	})
}
