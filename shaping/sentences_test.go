package shaping

import (
	"reflect"
	"strings"
	"testing"
)

func texts(ss []Sentence) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = s.Text
	}
	return out
}

func TestSentencesSplit(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []string
	}{
		{"simple", "One. Two? Three! Four", []string{"One.", "Two?", "Three!", "Four"}},
		{"abbreviation", "Use a map, e.g. Go maps. Then stop.", []string{"Use a map, e.g. Go maps.", "Then stop."}},
		{"abbreviation lower", "Pick one, i.e. the first. Done.", []string{"Pick one, i.e. the first.", "Done."}},
		{"decimal", "Pi is 3.14 here. Next.", []string{"Pi is 3.14 here.", "Next."}},
		{"file and version", "Edit main.go to v1.2.3. Then build.", []string{"Edit main.go to v1.2.3.", "Then build."}},
		{"ellipsis lower", "Hmm... let me think. Okay.", []string{"Hmm... let me think.", "Okay."}},
		{"ellipsis upper", "Hmm... Let me think.", []string{"Hmm...", "Let me think."}},
		{"unicode ellipsis", "Hmm… So it works.", []string{"Hmm…", "So it works."}},
		{"lowercase after period", "It ends with foo. bar continues.", []string{"It ends with foo. bar continues."}},
		{"closing quote", `He said "stop." Then left.`, []string{`He said "stop."`, "Then left."}},
		{"quoted exclamation", `"Hello there!" feels right.`, []string{`"Hello there!" feels right.`}},
		{"stray dots", "COPY . . comes first. Yes.", []string{"COPY . . comes first.", "Yes."}},
		{"inline code", "Call `a. B` now. Done.", []string{"Call `a. B` now.", "Done."}},
		{"unclosed tick", "It's `weird. Yes.", []string{"It's `weird.", "Yes."}},
		{"lines", "first line\nsecond line\n\n  third  ", []string{"first line", "second line", "third"}},
		{"crlf", "one\r\ntwo\r\n", []string{"one", "two"}},
		{"list", "Plan:\n- do A. Then B.\n* do C\n1. do D\n12) do E", []string{"Plan:", "- do A.", "Then B.", "* do C", "1. do D", "12) do E"}},
		{"not a list", "-5 degrees\n1.5 liters", []string{"-5 degrees", "1.5 liters"}},
		{"chinese", "嗯，好的。所以用A方案！对吗？是的；结束", []string{"嗯，好的。", "所以用A方案！", "对吗？", "是的；", "结束"}},
		{"chinese closers", "他说“好。”然后走了。", []string{"他说“好。”", "然后走了。"}},
		{"ascii ? before cjk", "真的吗?我觉得是", []string{"真的吗?", "我觉得是"}},
		{"period before cjk", "见main.go文件。好", []string{"见main.go文件。", "好"}},
		{"fence", "Look:\n```go\nx := 1. Y := 2\n\n```\nDone.", []string{"Look:", "```go\nx := 1. Y := 2\n\n```", "Done."}},
		{"tilde fence", "~~~\na\n~~~~\nb", []string{"~~~\na\n~~~~", "b"}},
		{"fence needs same char", "```\na\n~~~\nb\n```\nc", []string{"```\na\n~~~\nb\n```", "c"}},
		{"unclosed fence", "Text.\n```\ncode\n\n", []string{"Text.", "```\ncode"}},
		{"indented fence", "  ```\n  x\n  ```\nok", []string{"```\n  x\n  ```", "ok"}},
		{"no split before fence", "See this. ```go inline", []string{"See this. ```go inline"}},
		{"quoted sentences", `So my answer is: “Olá! Oi!” That covers it.`, []string{`So my answer is: “Olá! Oi!”`, "That covers it."}},
		{"straight quotes", `He said "Stop. Now." Then left.`, []string{`He said "Stop. Now."`, "Then left."}},
		{"unbalanced quote", `Content: "use glob. Possibly a snippet. Summarize: "Find it". Done.`,
			[]string{`Content: "use glob.`, "Possibly a snippet.", `Summarize: "Find it".`, "Done."}},
		{"glued bold title", "It costs 5.**Next step**\nGo.", []string{"It costs 5.", "**Next step**", "Go."}},
		{"code lines are one unit", "Here:\n{\n  'a': 1,\n}\nDone.", []string{"Here:", "{\n  'a': 1,\n}", "Done."}},
		{"only space", " \n\t\n ", nil},
		{"empty", "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Sentences(tt.in)
			if g := texts(got); !reflect.DeepEqual(g, tt.want) && !(len(g) == 0 && len(tt.want) == 0) {
				t.Errorf("Sentences(%q)\n got %q\nwant %q", tt.in, g, tt.want)
			}
			checkSentenceOffsets(t, tt.in, got)
		})
	}
}

func checkSentenceOffsets(t testing.TB, text string, ss []Sentence) {
	t.Helper()
	prev := 0
	for _, s := range ss {
		if s.Start < prev || s.End <= s.Start || s.End > len(text) || text[s.Start:s.End] != s.Text {
			t.Fatalf("bad offsets %d:%d for %q in %q", s.Start, s.End, s.Text, text)
		}
		if strings.TrimSpace(s.Text) != s.Text {
			t.Fatalf("untrimmed unit %q", s.Text)
		}
		if strings.TrimSpace(text[prev:s.Start]) != "" {
			t.Fatalf("non-space gap %q before %q", text[prev:s.Start], s.Text)
		}
		prev = s.End
	}
	if strings.TrimSpace(text[prev:]) != "" {
		t.Fatalf("non-space tail %q", text[prev:])
	}
}

func TestSentencesKind(t *testing.T) {
	tests := []struct {
		in   string
		want SentenceKind
	}{
		{"Hmm.", KindFiller},
		{"Hmmm, wait.", KindFiller},
		{"Wait, maybe the cache is stale.", KindFiller},
		{"Let me think about it.", KindFiller},
		{"Okay so the user wants more.", KindFiller},
		{"Okay, so the fix is to reset it.", KindDecisive},
		{"Actually, wait, I'll use a map.", KindDecisive},
		{"Ohio is a state.", KindNormal},
		{"Okayish results.", KindNormal},
		{"So I'll use a map.", KindDecisive},
		{"So far nothing works.", KindNormal},
		{"Sorry, that is wrong.", KindNormal},
		{"Therefore the loop ends.", KindDecisive},
		{"The bug is here, so I'll patch it.", KindDecisive},
		{"I’ll patch it.", KindDecisive},
		{"**Final answer:** 42", KindDecisive},
		{"Finally it works.", KindDecisive},
		{"Finalize nothing.", KindNormal},
		{"- a list item", KindListItem},
		{"- Hmm, no.", KindFiller},
		{"1. I will do it", KindDecisive},
		{"嗯。", KindFiller},
		{"嗯嗯，等等。", KindFiller},
		{"好的方法是先测量。", KindNormal},
		{"所以用方案A。", KindDecisive},
		{"我决定用方案A。", KindDecisive},
		{"这里很慢，因此要加缓存。", KindDecisive},
		{"他问我应该从哪里开始。", KindNormal},
		{"```\ncode\n```", KindCode},
	}
	for _, tt := range tests {
		// A leading unit keeps the opening rule out of these cases.
		ss := Sentences("Start.\n" + tt.in)
		if len(ss) != 2 {
			t.Fatalf("Sentences(%q) = %q, want 2 units", tt.in, texts(ss))
		}
		if got := ss[1].Kind; got != tt.want {
			t.Errorf("kind of %q = %v, want %v", tt.in, got, tt.want)
		}
	}
}

func TestSentencesNeighbourRules(t *testing.T) {
	ss := Sentences("Hmm, the user wants a CSV export.\nHmm, the user wants more.\nSo the fix is:\n1. add a flag\n2. write rows\nDone here.")
	want := []SentenceKind{KindNormal, KindFiller, KindDecisive, KindDecisive, KindDecisive, KindNormal}
	for i, s := range ss {
		if s.Kind != want[i] {
			t.Errorf("unit %d %q: kind %v, want %v", i, s.Text, s.Kind, want[i])
		}
	}
	if ss := Sentences("Hmm, okay."); ss[0].Kind != KindFiller {
		t.Errorf("short opening filler: %v, want filler", ss[0].Kind)
	}
}

func TestKindString(t *testing.T) {
	if KindListItem.String() != "listItem" || SentenceKind(99).String() != "SentenceKind(99)" {
		t.Errorf("String: %q %q", KindListItem.String(), SentenceKind(99).String())
	}
}
