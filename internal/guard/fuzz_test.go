package guard

import (
	"bytes"
	"encoding/json"
	"math/big"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/shaperproxy/shaperproxy/conv"
)

// FuzzCanonical checks Canonical against encoding/json: a canonical form
// is valid JSON with the same meaning (numbers compared exactly), it is
// its own canonical form, and Signature agrees with it.
func FuzzCanonical(f *testing.F) {
	for _, s := range []string{
		`{"b":1,"a":[1,2,{"d":null,"c":true}]}`, `1.0`, `-0e-0`, `"\u00e9\ud800"`, `{"a":1,"a":2}`,
		`[1e400, 0.000001, 123456789012345678901234567890]`, ``, `{`, `{"":{"":[]}}`, "\"\\u0000\\n\"",
		strings.Repeat("[", 12_000), strings.Repeat("[", 127) + strings.Repeat("]", 127), strings.Repeat(`{"a":`, 200) + "1" + strings.Repeat("}", 200),
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, args string) {
		c, ok := canonical(args)
		if _, sok := signature("tool", args); sok != ok {
			t.Fatalf("Signature ok %v, Canonical ok %v", sok, ok)
		}
		if !ok {
			return
		}
		if !json.Valid([]byte(args)) || !json.Valid(c) {
			t.Fatalf("accepted invalid JSON %q -> %q", args, c)
		}
		again, ok := canonical(string(c))
		if !ok || !bytes.Equal(again, c) {
			t.Fatalf("not idempotent: %q -> %q -> %q", args, c, again)
		}
		s1, _ := signature("tool", args)
		s2, _ := signature("tool", string(c))
		if s1 != s2 {
			t.Fatal("signature differs from the signature of the canonical form")
		}
		a, b := decode(t, []byte(args)), decode(t, c)
		if !sameJSON(a, b) {
			t.Fatalf("meaning changed: %q -> %q", args, c)
		}
	})
}

func decode(t *testing.T, b []byte) any {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		t.Fatalf("decode %q: %v", b, err)
	}
	return v
}

// sameJSON compares decoded values, numbers by exact value.
func sameJSON(a, b any) bool {
	switch a := a.(type) {
	case map[string]any:
		b, ok := b.(map[string]any)
		if !ok || len(a) != len(b) {
			return false
		}
		for k, v := range a {
			if w, ok := b[k]; !ok || !sameJSON(v, w) {
				return false
			}
		}
		return true
	case []any:
		b, ok := b.([]any)
		if !ok || len(a) != len(b) {
			return false
		}
		for i := range a {
			if !sameJSON(a[i], b[i]) {
				return false
			}
		}
		return true
	case json.Number:
		b, ok := b.(json.Number)
		return ok && sameNumber(string(a), string(b))
	}
	return reflect.DeepEqual(a, b)
}

// sameNumber compares two JSON numbers exactly; huge exponents are
// compared by their canonical spelling only (big.Rat would need millions
// of digits).
func sameNumber(a, b string) bool {
	if bigExponent(a) || bigExponent(b) {
		ca, _ := appendNumber(nil, a)
		cb, _ := appendNumber(nil, b)
		return bytes.Equal(ca, cb)
	}
	ra, ok1 := new(big.Rat).SetString(a)
	rb, ok2 := new(big.Rat).SetString(b)
	return ok1 && ok2 && ra.Cmp(rb) == 0
}

func bigExponent(n string) bool {
	i := strings.IndexAny(n, "eE")
	if i < 0 {
		return len(n) > 400
	}
	e, err := strconv.Atoi(strings.TrimPrefix(n[i+1:], "+"))
	return err != nil || e > 400 || e < -400 || len(n) > 400
}

// FuzzFold folds arbitrary bodies: it never panics, a Projection agrees
// with Fold, and the edits the guard asks for keep a chat request valid.
func FuzzFold(f *testing.F) {
	f.Add(failingLoop(3).body())
	h, _ := causalHistory("interleaved", [4]bool{true, false, true, true}, []int{2, 0, 3, 1})
	f.Add(h.body())
	f.Add([]byte(`{"reasoning":{"effort":"high"},"messages":[{"role":"user","content":[{"type":"text","text":"x"}]},` +
		`{"role":"assistant","content":"<think>` + strings.Repeat("a", 200) + `","tool_calls":[{"id":"a","function":{"name":"f","arguments":{"x":1}}}]},` +
		`{"role":"tool","tool_call_id":"a","is_error":true},{"role":"tool","tool_call_id":"a","content":null}]}`))
	f.Add([]byte(`{"messages":[{"role":"tool","tool_call_id":"","content":"Error:"},7,null,{"role":"user"}]}`))
	g := mustGuard(f, func(c *Config) {
		c.EchoThreshold = 2
		c.StallStepChars = 100
		c.StallTurnChars = 150
		c.StallAction = StallInterrupt
		c.StepDownRequests = 1
	})
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := conv.ParseRequest(body)
		if err != nil {
			return
		}
		sig := g.Fold(req)
		p := g.NewProjection()
		if got, _ := p.Update(req); !reflect.DeepEqual(got, sig) {
			t.Fatalf("projection %+v != fold %+v", got, sig)
		}
		if _, st := p.Update(req); st.Processed != 0 {
			t.Fatalf("same request processed %d", st.Processed)
		}
		st := state{StallPending: true, Pending: stallCounts{1, 2, 3}}
		d, next := g.Decide(st, req, sig)
		out, err := applyPlacements(req, d.Placements)
		if err != nil {
			t.Fatalf("a decided placement failed: %v", err)
		}
		edited, err := conv.ParseRequest(out)
		if err != nil || len(edited.Messages) != len(req.Messages) {
			t.Fatalf("edited body: %v\n%s", err, out)
		}
		for _, l := range []Lowering{deepseek, openrouter} {
			if lowered, _ := stepDown(out, l, true); !json.Valid(lowered) {
				t.Fatalf("StepDown broke the body: %s", lowered)
			}
		}
		b, err := next.MarshalBinary()
		var back state
		if err != nil || back.UnmarshalBinary(b) != nil || !reflect.DeepEqual(back, next) {
			t.Fatalf("state round trip: %v", err)
		}
	})
}
