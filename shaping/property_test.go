package shaping

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// checkProperties asserts everything Shape promises for one text and one
// set of options. Fuzzing and the property tests share it.
func checkProperties(t testing.TB, text string, o Options) {
	t.Helper()
	out, changed := Shape(text, o)
	eff := o.effective()
	if again, againChanged := Shape(text, o); again != out || againChanged != changed {
		t.Fatalf("not deterministic for %q: %q then %q", text, out, again)
	}
	if changed == (out == text) {
		t.Fatalf("changed=%v but out==text is %v for %q", changed, out == text, text)
	}
	if again, ch := Shape(out, o); again != out || ch {
		t.Fatalf("not idempotent:\ninput  %q\nonce   %q\ntwice  %q", text, out, again)
	}
	n, m := utf8.RuneCountInString(text), utf8.RuneCountInString(out)
	if m > n {
		t.Fatalf("longer: %d runes -> %d runes for %q", n, m, text)
	}
	if eff.Op == OpDrop {
		if out != "" {
			t.Fatalf("drop returned %q", out)
		}
		return
	}
	if text != "" && out == "" {
		t.Fatalf("empty result for %q", text)
	}
	if !changed {
		return
	}
	if !utf8.ValidString(out) {
		t.Fatalf("invalid UTF-8 result %q for %q", out, text)
	}
	if m > eff.MaxChars {
		t.Fatalf("changed result has %d runes > MaxChars %d: %q", m, eff.MaxChars, out)
	}
	body := out
	markers := strings.Count(out, markerPrefix) - strings.Count(text, markerPrefix)
	if o.Marker && eff.MaxChars-markerRunes(n) >= 1 {
		if !strings.HasPrefix(out, markerPrefix) {
			t.Fatalf("Marker set but result %q has none", out)
		}
		body = out[strings.Index(out, "] ")+2:]
		markers--
	}
	if markers > 0 {
		t.Fatalf("result %q has a marker not in the input %q", out, text)
	}
	checkFences(t, text, body)
}

// checkFences asserts that every code fence of out is a whole code fence of
// text: fences are taken whole or dropped whole, never cut.
func checkFences(t testing.TB, text, out string) {
	t.Helper()
	in := map[string]bool{}
	for _, s := range Sentences(strings.ToValidUTF8(text, "\uFFFD")) {
		if s.Kind == KindCode {
			in[s.Text] = true
		}
	}
	for _, s := range Sentences(out) {
		if s.Kind == KindCode && !in[s.Text] {
			t.Fatalf("code fence %q in result is not a whole fence of the input %q", s.Text, text)
		}
	}
}
