package shaping

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestOptions(t *testing.T) {
	if got := (Options{}).WithDefaults(); got != (Options{Op: OpExtract, MaxChars: DefaultMaxChars}) {
		t.Errorf("WithDefaults = %+v", got)
	}
	tests := []struct {
		o     Options
		field string // "" for valid
	}{
		{Options{}, ""},
		{Options{Op: OpDrop, MaxChars: 1}, ""},
		{Options{Marker: true, MaxChars: MinMarkerMaxChars}, ""},
		{Options{Op: "summarize"}, "Op"},
		{Options{MaxChars: -1}, "MaxChars"},
		{Options{Marker: true, MaxChars: 20}, "MaxChars"},
	}
	for _, tt := range tests {
		err := tt.o.Validate()
		if tt.field == "" {
			if err != nil {
				t.Errorf("Validate(%+v) = %v, want nil", tt.o, err)
			}
			continue
		}
		if !errors.Is(err, ErrInvalidOptions) || !strings.Contains(err.Error(), tt.field) {
			t.Errorf("Validate(%+v) = %v, want ErrInvalidOptions naming %s", tt.o, err, tt.field)
		}
	}
}

const long = "Hmm, the user wants a faster export. Wait, let me think. The export reads every row twice, " +
	"once to count and once to write. That is 2x the I/O for 40 million rows. Hmm. " +
	"So the fix is to stream rows once and count while writing. I'll also drop the temp file."

func TestShapeOps(t *testing.T) {
	if out, ch := Shape(long, Options{Op: OpKeep}); out != long || ch {
		t.Errorf("keep: %q %v", out, ch)
	}
	if out, ch := Shape(long, Options{Op: OpDrop}); out != "" || !ch {
		t.Errorf("drop: %q %v", out, ch)
	}
	if out, ch := Shape("", Options{Op: OpDrop}); out != "" || ch {
		t.Errorf("drop empty: %q %v", out, ch)
	}
	if out, ch := Shape(long, Options{Op: "bogus"}); out != long || ch {
		t.Errorf("unknown op must keep: %q %v", out, ch)
	}
	out, ch := Shape(long, Options{MaxChars: 120})
	// The lead (best decision), the task without its "Hmm, " and the plan
	// fit; "That is 2x the I/O" does not come without what "That" is.
	want := "The user wants a faster export. So the fix is to stream rows once and count while writing. I'll also drop the temp file."
	if out != want || !ch {
		t.Errorf("extract:\n got %q\nwant %q", out, want)
	}
	if Extract(long, Options{MaxChars: 120, Marker: true, Op: OpDrop}) != want {
		t.Errorf("Extract must ignore Op and Marker")
	}
}

func TestShapeGuard(t *testing.T) {
	short := "Hmm. So I'll do it."
	if out, ch := Shape(short, Options{}); out != short || ch {
		t.Errorf("short block changed: %q", out)
	}
	// Exactly MaxChars runes, all filler: unchanged.
	s := strings.Repeat("嗯", 10)
	if out, ch := Shape(s, Options{MaxChars: 10}); out != s || ch {
		t.Errorf("block at MaxChars changed: %q", out)
	}
	// Only a fence larger than MaxChars: nothing can be cut, so unchanged.
	fence := "```\n" + strings.Repeat("x := 1\n", 100) + "```"
	if out, ch := Shape(fence, Options{MaxChars: 50}); out != fence || ch {
		t.Errorf("fence-only block changed: %q", out)
	}
	ws := strings.Repeat(" \n", 300)
	if out, ch := Shape(ws, Options{MaxChars: 50}); out != ws || ch {
		t.Errorf("white-space block changed: %q", out)
	}
}

func TestShapeMarker(t *testing.T) {
	out, ch := Shape(long, Options{Marker: true, MaxChars: 150})
	n := utf8.RuneCountInString(long)
	want := "[reasoning extract: 167 chars omitted] The user wants a faster export. So the fix is to stream rows once and count while writing."
	if !ch || out != want {
		t.Fatalf("marker:\n got %q\nwant %q (input %d runes)", out, want, n)
	}
	if again, ch := Shape(out, Options{Marker: true, MaxChars: 150}); again != out || ch {
		t.Errorf("marker output not stable: %q", again)
	}
	if out, _ := Shape(long, Options{}); strings.Contains(out, markerPrefix) {
		t.Errorf("marker without Marker: %q", out)
	}
	// A budget too small for the marker (Validate rejects it) leaves it out.
	if out, _ := Shape(long, Options{Marker: true, MaxChars: 30}); strings.Contains(out, markerPrefix) || utf8.RuneCountInString(out) > 30 {
		t.Errorf("tiny budget with marker: %q", out)
	}
}

func TestShapeIdempotentSeedCase(t *testing.T) {
	// The seed's sequence 863 → 62 → 62 → 62: once shaped, a block stays.
	text := readFile(t, "testdata/en_debug_timeout.txt")
	lens := []int{utf8.RuneCountInString(text)}
	for range 3 {
		text, _ = Shape(text, Options{})
		lens = append(lens, utf8.RuneCountInString(text))
	}
	t.Logf("rune lengths over 4 passes: %v", lens)
	if lens[1] >= lens[0] || lens[1] != lens[2] || lens[2] != lens[3] {
		t.Errorf("lengths %v, want a drop then a fixed point", lens)
	}
}

func TestCut(t *testing.T) {
	tests := []struct {
		in    string
		limit int
		want  string
	}{
		{"one two three", 20, "one two three"},
		{"one two three", 9, "one two"},
		{"one two three", 7, "one two"},
		{"one two three", 6, "one"},
		{"one  two", 5, "one"},
		{"abcdefgh ij", 4, "abcd"},    // first word too long: hard cut
		{"用户想要一个导出", 3, "用户想"},        // CJK: any rune boundary
		{"Go语言很好", 3, "Go语"},          // boundary next to CJK
		{"cafe\u0301s are", 4, "caf"}, // never split e from its accent
		{"a👩\u200d💻 b", 3, "a"},       // ZWJ sequence: back off
		{"👩\u200d💻 coder", 2, "👩"},    // one cluster: drop the joiner
		{"x", 1, "x"},
	}
	for _, tt := range tests {
		if got := cut(tt.in, tt.limit); got != tt.want {
			t.Errorf("cut(%q, %d) = %q, want %q", tt.in, tt.limit, got, tt.want)
		}
	}
}

func TestExtractFallback(t *testing.T) {
	// Nothing fits whole: the best non-filler unit is cut at a word.
	in := "Hmm. The cache key includes the request ID so nothing is ever reused across requests at all."
	if got := Extract(in, Options{MaxChars: 30}); got != "The cache key includes the" {
		t.Errorf("fallback cut = %q", got)
	}
	// Only filler: the last filler unit, cut.
	in = "Hmm, wait a moment. Let me think about it all over again now."
	if got := Extract(in, Options{MaxChars: 30}); got != "Let me think about it all over" {
		t.Errorf("all-filler cut = %q", got)
	}
	// A decisive unit too long for the budget does not beat a plain one that fits.
	in = "The port is taken. So I'll switch the listener to port 8081 and update every client config and the docs."
	if got := Extract(in, Options{MaxChars: 40}); got != "The port is taken." {
		t.Errorf("fit rule = %q", got)
	}
}

func TestExtractInvalidUTF8(t *testing.T) {
	in := "Hmm.\xff So I'll keep \xc3 the \xe4\xb8 bytes. " + strings.Repeat("Filler text that is plain. ", 20)
	got := Extract(in, Options{MaxChars: 60})
	if !utf8.ValidString(got) || got == "" {
		t.Fatalf("Extract of invalid UTF-8 = %q", got)
	}
	if out, ch := Shape("\xff\xfe", Options{}); out != "\xff\xfe" || ch {
		t.Errorf("short invalid input must be unchanged, got %q", out)
	}
}

func TestSeparators(t *testing.T) {
	in := "Task: add a flag. Hmm, wait.\nI'll add it to the parser. Hmm.\n\n所以用A。嗯。我决定用B。" + strings.Repeat(" Hmm.", 20)
	want := "Task: add a flag.\nI'll add it to the parser.\n所以用A。我决定用B。"
	if got := Extract(in, Options{MaxChars: 80}); got != want {
		t.Errorf("Extract =\n%q\nwant\n%q", got, want)
	}
}

func TestValidRuneCount(t *testing.T) {
	for _, s := range append(edgeTexts, "héllo wörld, 你好，世界 👩\u200d💻 and more ascii text here") {
		s = strings.ToValidUTF8(s, "\uFFFD")
		if got, want := validRuneCount(s), utf8.RuneCountInString(s); got != want {
			t.Errorf("validRuneCount(%q) = %d, want %d", s, got, want)
		}
	}
}

func TestExtractRules(t *testing.T) {
	pad := " " + strings.Repeat("Hmm, wait. ", 30)
	tests := []struct {
		name  string
		in    string
		limit int
		want  string
	}{
		{
			name:  "lead task detail",
			in:    "The user wants a CSV export. Maybe use a pool? The writer flushes every 4096 bytes. I'll buffer rows." + pad,
			limit: 100,
			want:  "The user wants a CSV export. The writer flushes every 4096 bytes. I'll buffer rows.",
		},
		{
			name:  "later conclusion wins",
			in:    "Plain start here. So it is A. So it is B." + pad,
			limit: 30,
			want:  "Plain start here. So it is B.",
		},
		{
			name:  "numbered items come in order",
			in:    "Task: fix it.\nSo the fix is:\n1. reset the buffer\n2. return an error on timeout from load." + pad,
			limit: 60,
			want:  "1. reset the buffer\n2. return an error on timeout from load.",
		},
		{
			name:  "header comes with what follows",
			in:    "Task: fix the loader now.\nSo the fix is:\n- reset the buffer\n- return an error on timeout from load." + pad,
			limit: 60,
			want:  "Task: fix the loader now.\nSo the fix is:\n- reset the buffer",
		},
		{
			name:  "anaphor never without its antecedent",
			in:    "The user wants a CSV export. The writer flushes every 4096 bytes. That is too often for 40 GB." + pad,
			limit: 70,
			want:  "The user wants a CSV export. The writer flushes every 4096 bytes.",
		},
		{
			name:  "leading filler is stripped",
			in:    "Okay, so the user wants a CSV export. Hmm, so the fix is to flush every 4096 bytes." + pad,
			limit: 70,
			want:  "The user wants a CSV export. The fix is to flush every 4096 bytes.",
		},
		{
			name:  "scraps and bare filler are left out",
			in:    "The user wants a CSV export.\nSo:\n}\n0.\nYes.\nSo [8, 0].\nI'll stream the rows to the file." + pad,
			limit: 80,
			want:  "The user wants a CSV export.\nI'll stream the rows to the file.",
		},
		{
			name:  "no header without items",
			in:    "Task: fix it now please.\nSo the fix is:\n1. reset the buffer and every pooled writer too" + pad,
			limit: 30,
			want:  "Task: fix it now please.",
		},
		{
			name:  "line break between kept units",
			in:    "First plain line. Dropped plain.\nSecond: I'll do it." + pad,
			limit: 40,
			want:  "First plain line.\nSecond: I'll do it.",
		},
		{
			name:  "newline after fence",
			in:    "```\ncode\n```\n所以用A。嗯。我决定用B。" + pad,
			limit: 30,
			want:  "```\ncode\n```\n所以用A。我决定用B。",
		},
		{
			name:  "fence dropped whole",
			in:    "Intro line here.\n```\n" + strings.Repeat("code code\n", 20) + "```\nSo I'll ship." + pad,
			limit: 40,
			want:  "Intro line here.\nSo I'll ship.",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Extract(tt.in, Options{MaxChars: tt.limit}); got != tt.want {
				t.Errorf("Extract =\n%q\nwant\n%q", got, tt.want)
			}
		})
	}
}
