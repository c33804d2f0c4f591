package shaping

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
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
// text: fences are taken whole or dropped whole, never cut. (Code lines
// outside fences are never taken, but a line of a result may look like
// code on its own, so only fences are compared.)
func checkFences(t testing.TB, text, out string) {
	t.Helper()
	in := map[string]bool{}
	for _, s := range Sentences(strings.ToValidUTF8(text, "\uFFFD")) {
		if s.Kind == KindCode && startsFence(s.Text) {
			in[s.Text] = true
		}
	}
	for _, s := range Sentences(out) {
		if s.Kind == KindCode && startsFence(s.Text) && !in[s.Text] {
			t.Fatalf("code fence %q in result is not a whole fence of the input %q", s.Text, text)
		}
	}
}

// propertyOptions are the option sets every property is checked under.
var propertyOptions = []Options{
	{},
	{MaxChars: 1},
	{MaxChars: 7},
	{MaxChars: 40},
	{MaxChars: 1000},
	{Marker: true},
	{Marker: true, MaxChars: MinMarkerMaxChars},
	{Marker: true, MaxChars: 10}, // invalid: marker left out
	{Op: OpKeep},
	{Op: OpDrop},
	{MaxChars: -5}, // invalid: default budget
}

// edgeTexts are small inputs that have broken splitters before.
var edgeTexts = []string{
	"", " ", "\n\n", ".", "...", "。", "`", "```", "```\n", "~~~\n~~\n", "- ", "1. ", "1.",
	"\xff", "a\xffb. C\xfe.", "\xe4\xb8", "Hmm.", "嗯", strings.Repeat("嗯", 300),
	strings.Repeat("a", 500), strings.Repeat("word ", 100), strings.Repeat("Hmm. ", 100),
	strings.Repeat("`", 300), strings.Repeat("``` ", 80), strings.Repeat("e\u0301", 200),
	"```\n" + strings.Repeat("code line\n", 50) + "```\n" + strings.Repeat("Hmm. ", 60),
	strings.Repeat("So I'll do it. ", 40) + "```\n" + strings.Repeat("x\n", 10),
	"See this. ```go inline\n" + strings.Repeat("And more text here. ", 30),
	"    ```\n  indented\n```\n" + strings.Repeat("Plain words go here. ", 30),
	"[reasoning extract: 12 chars omitted] " + strings.Repeat("So I'll do it. ", 30),
	strings.Repeat("👩\u200d💻", 120),
}

func TestProperties(t *testing.T) {
	var inputs []string
	inputs = append(inputs, edgeTexts...)
	inputs = append(inputs, corpus(7, 60_000, 40)...)
	golden, _ := filepath.Glob(filepath.Join("testdata", "*.txt"))
	for _, g := range golden {
		inputs = append(inputs, readFile(t, g))
	}
	for _, o := range propertyOptions {
		for _, in := range inputs {
			checkProperties(t, in, o)
			if got := Extract(Extract(in, o), o); got != Extract(in, o) {
				t.Fatalf("Extract not idempotent for %q", in)
			}
		}
	}
}

// TestPropertiesCanFail makes sure the checker catches what it claims to:
// a shaper that cuts a fence or adds a marker must be reported.
func TestPropertiesCanFail(t *testing.T) {
	text := "Intro.\n```\nline one\nline two\n```\nEnd."
	cutFence := "Intro.\n```\nline one"
	ft := &fakeT{}
	func() {
		defer func() { _ = recover() }()
		checkFences(ft, text, cutFence)
	}()
	if !ft.failed {
		t.Error("checkFences accepted a cut fence")
	}
	ft = &fakeT{}
	func() {
		defer func() { _ = recover() }()
		checkFences(ft, text, "Intro.\n```\nline one\nline two\n```")
	}()
	if ft.failed {
		t.Error("checkFences rejected a whole fence")
	}
}

// fakeT records Fatalf instead of stopping the test.
type fakeT struct {
	testing.TB
	failed bool
}

func (f *fakeT) Helper() {}
func (f *fakeT) Fatalf(format string, args ...any) {
	f.failed = true
	panic("fatal")
}

// pathological are inputs that make naive splitters quadratic.
func pathological(n int) map[string]string {
	return map[string]string{
		"dots":        "a" + strings.Repeat(".", n),
		"spaced dots": strings.Repeat(". ", n/2),
		"ticks":       strings.Repeat("`a``b```c", n/9),
		"tick runs":   strings.Repeat("`", n),
		"hm":          strings.Repeat("h", n) + "x",
		"fillers":     strings.Repeat("嗯", n/3),
		"one line":    strings.Repeat("word ", n/5),
		"units then gap": strings.Repeat("A b. ", n/10) + strings.Repeat(" ", n/2) +
			"So I'll do it.",
		"fences":   strings.Repeat("```\nx\n", n/6),
		"newlines": strings.Repeat("\n", n),
		"abbrevs":  strings.Repeat("vs. X ", n/6),
	}
}

// TestPathological checks the properties on the pathological inputs at
// 64 KiB. Their cost at 1 MiB is measured by BenchmarkPathological (speed
// lives in benchmarks, not in timed tests).
func TestPathological(t *testing.T) {
	cases := pathological(64 << 10)
	names := make([]string, 0, len(cases))
	for name := range cases {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		checkProperties(t, cases[name], Options{})
	}
}

// BenchmarkPathological shapes each 1 MiB pathological input once per
// iteration: a quadratic step shows as seconds instead of milliseconds.
func BenchmarkPathological(b *testing.B) {
	for name, text := range pathological(1 << 20) {
		b.Run(strings.ReplaceAll(name, " ", "_"), func(b *testing.B) {
			b.SetBytes(int64(len(text)))
			for b.Loop() {
				Shape(text, Options{})
			}
		})
	}
}

// TestConcurrent shapes the same texts from several goroutines (Shape
// reuses pooled scratch space) and compares with a sequential run.
func TestConcurrent(t *testing.T) {
	texts := corpus(3, 40_000, 30)
	want := make([]string, len(texts))
	for i, x := range texts {
		want[i], _ = Shape(x, Options{})
	}
	errs := make(chan string, 8)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for k := range texts {
				i := (k + g*7) % len(texts)
				if got, _ := Shape(texts[i], Options{}); got != want[i] {
					errs <- fmt.Sprintf("goroutine %d, text %d: %q != %q", g, i, got, want[i])
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}
