package promptcache

import (
	"math/rand/v2"
	"strings"
	"testing"
)

// naive is the prefix cache written the obvious way, keeping every
// prompt (the fake upstream's first implementation): the reference the
// hashed Cache must agree with.
type naive struct {
	unit    int
	entries []string
}

func (n *naive) hit(p string) int {
	best := 0
	for _, e := range n.entries {
		if strings.HasPrefix(p, e) {
			best = max(best, Tokens(e))
			continue
		}
		c := 0
		for c < len(e) && c < len(p) && e[c] == p[c] {
			c++
		}
		best = max(best, c/4/n.unit*n.unit)
	}
	return best
}

// TestCacheMatchesNaive grows, branches and rewrites random
// conversations and compares every lookup with the naive cache.
func TestCacheMatchesNaive(t *testing.T) {
	for _, unit := range []int{1, 4, 16, 64} {
		rng := rand.New(rand.NewPCG(uint64(unit), 7))
		c, ref := New(unit), &naive{unit: unit}
		words := []string{"alpha ", "beta ", "γάμμα ", "delta\n", "{\"x\":1}", "所以 "}
		gen := func(n int) string {
			var b strings.Builder
			for b.Len() < n {
				b.WriteString(words[rng.IntN(len(words))])
			}
			return b.String()
		}
		var prompts []string
		for i := 0; i < 300; i++ {
			var p string
			switch {
			case len(prompts) == 0 || rng.IntN(5) == 0:
				p = gen(rng.IntN(3000)) // a new conversation
			case rng.IntN(3) == 0: // an earlier prompt changed somewhere
				q := prompts[rng.IntN(len(prompts))]
				cut := rng.IntN(len(q) + 1)
				p = q[:cut] + gen(rng.IntN(500)+1)
			case rng.IntN(4) == 0: // an earlier prompt exactly, or a prefix of it
				q := prompts[rng.IntN(len(prompts))]
				p = q[:rng.IntN(len(q)+1)]
			default: // the last prompt extended
				p = prompts[len(prompts)-1] + gen(rng.IntN(800))
			}
			if got, want := c.Hit(p), ref.hit(p); got != want {
				t.Fatalf("unit %d, prompt %d (%d bytes): hit %d, naive %d", unit, i, len(p), got, want)
			}
			if rng.IntN(4) > 0 {
				c.Add(p)
				ref.entries = append(ref.entries, p)
				prompts = append(prompts, p)
			}
		}
	}
}

// TestBillPersistsTheReply: with the raw-message prompt, the next request
// that carries the reply and a tool result hits the whole first prompt
// and the reply; a request that changes the first message hits nothing
// past the unit before the change.
func TestBillPersistsTheReply(t *testing.T) {
	c := New(4)
	req := []byte(`{"tools":[{"type":"function","function":{"name":"f"}}],"messages":[{"role":"system","content":"` + strings.Repeat("be careful ", 20) + `"},{"role":"user","content":"go"}]}`)
	reply := []byte(`{"role":"assistant","content":"","reasoning_content":"` + strings.Repeat("think ", 30) + `"}`)
	b1 := c.Bill(nil, req, reply)
	if b1.Hit != 0 || b1.Tokens != Tokens(b1.Prompt) || b1.Tokens == 0 {
		t.Fatalf("first bill %+v", b1)
	}
	next := WithMessage(WithMessage(req, reply), []byte(`{"role":"tool","content":"ok"}`))
	b2 := c.Bill(nil, next, nil)
	withReply := Prompt(nil, WithMessage(req, reply), true)
	if b2.Hit != Tokens(withReply) {
		t.Errorf("second bill hit %d, want the first prompt and the reply: %d", b2.Hit, Tokens(withReply))
	}
	changed := []byte(strings.Replace(string(next), "be careful", "be CAREFUL", 1))
	if b3 := c.Bill(nil, changed, nil); b3.Hit >= b1.Tokens/2 || b3.Hit%4 != 0 {
		t.Errorf("changed bill hit %d of %d", b3.Hit, b3.Tokens)
	}
}
