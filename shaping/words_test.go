package shaping

import (
	"strings"
	"testing"
)

func TestIsBareFiller(t *testing.T) {
	bare := []string{"So.", "Yes.", "Let's see:", "So yes, that works.", "Hmmm, okay.", "- Good.",
		"**Perfect.**", "That makes sense.", "好的。", "嗯，对。", "So:"}
	content := []string{"So the answer is yes.", "So 47 characters.", "Let's see the config.",
		"So [8, 0].", "Use English.", "所以用A。", "}", "...", "", "Return that line.", "Here's the plan:"}
	for _, s := range bare {
		if !isBareFiller(s) {
			t.Errorf("isBareFiller(%q) = false, want true", s)
		}
	}
	for _, s := range content {
		if isBareFiller(s) {
			t.Errorf("isBareFiller(%q) = true, want false", s)
		}
	}
}

func TestAnaphorAt(t *testing.T) {
	yes := []string{"This doubles it.", "That's 47.", "It works.", "They agree.", "Also, drop it.",
		"But wait.", "However, no.", "No, the query uses one.", "这说明问题。", "但是不行。", "它很慢。"}
	no := []string{"Thistle grows.", "Items are here.", "Italy is far.", "Butter.", "The cache.",
		"Now the fix.", "那么就这样。", "也许可以。", "No quotes, no colon.", "Alsoran."}
	for _, s := range yes {
		if anaphorAt(s, 0) == 0 {
			t.Errorf("anaphorAt(%q) = 0, want > 0", s)
		}
	}
	for _, s := range no {
		if anaphorAt(s, 0) != 0 {
			t.Errorf("anaphorAt(%q) > 0, want 0", s)
		}
	}
	s := "Hmm, this is it."
	if anaphorAt(s, bodyStart(s)) == 0 {
		t.Errorf("anaphor after filler not found in %q", s)
	}
}

func TestIsGeneric(t *testing.T) {
	generic := []string{"So the code should work.", "Thus, the function is correct as written.",
		"So this should handle all cases.", "Therefore, the code is correct."}
	named := []string{"So no error checking is needed.", "So the fix is to reset the buffer.",
		"So I'll use bufio.Writer here.", "所以用A。", "所以用流式写入。"}
	for _, s := range generic {
		if !isGeneric(s) {
			t.Errorf("isGeneric(%q) = false, want true", s)
		}
	}
	for _, s := range named {
		if isGeneric(s) {
			t.Errorf("isGeneric(%q) = true, want false", s)
		}
	}
}

func TestCountWords(t *testing.T) {
	tests := []struct {
		s    string
		want int
	}{
		{"So [8, 0].", 1}, {"Like 5.", 1}, {"So I'll ship.", 3}, {"So returns {a:1}.", 2},
		{"我决定用B。", 4}, {"a b c d", 0}, {"", 0}, {"one two three four five", 4},
	}
	for _, tt := range tests {
		if got := countWords(tt.s, 4); got != tt.want {
			t.Errorf("countWords(%q) = %d, want %d", tt.s, got, tt.want)
		}
	}
}

func TestIsCodeLine(t *testing.T) {
	code := []string{"}", "};", "<think> </think>", "'POP': 33", `"a": 1,`, "0.", "18%.", "[1, 2, 3],", "<think>", "</output>",
		"for key, value in obj.items():", "x = compute(y)", "cmd =32", "print(x)", "obj.items()",
		"const opcodeMap = {", "Score: 0.2947", "COND (128)", "tokens: [\"PUSH\", \"-1\"]",
		"// add the two bytes", "Content: {'name': 'x'}", "- 'POP': 33", "#   result[k] = v"}
	prose := []string{"So the output list is [4,5,8,0,32,1,33,0]", "If we have {'a': 1}, then it is flat.",
		"The user wants a title.", "for example, the key is x.", "- age: 30", "- name: Alice",
		"用户想要导出。", "嗯。", "</think>\" They want a short title.", "<think>\" They want a title. </think>", "Test case 7: [\"LOAD -1\"] → [4, 255].",
		` user: "Generate a concise title for the content". Need to output a short title.`,
		"## Plan", "**Final answer:** 42", "1. Parse each line of the program.",
		"- PUSH => 32"} // a list item is code only by its opening or ending
	for _, s := range code {
		if !isCodeLine(strings.TrimSpace(s)) {
			t.Errorf("isCodeLine(%q) = false, want true", s)
		}
	}
	for _, s := range prose {
		if isCodeLine(strings.TrimSpace(s)) {
			t.Errorf("isCodeLine(%q) = true, want false", s)
		}
	}
}

func TestIsHeadingAndNoisy(t *testing.T) {
	for s, want := range map[string]bool{"**Checking the config**": true, "## Plan": true, "#include": false,
		"**Note:** it works": false, "Plan": false} {
		if isHeading(s) != want {
			t.Errorf("isHeading(%q) = %v, want %v", s, !want, want)
		}
	}
	for s, want := range map[string]bool{
		"Count: C1 r2 e3 a4 t5 e6 space7 t8 e9 s10 t11 .12":    true,
		"The user wants a concise title for the content here.": false,
		"-5 % 256 is 251 (since 256*0=0; -5 +256=251).":        true,
		"0 1 2": false, // too short to judge
	} {
		if isNoisy(s) != want {
			t.Errorf("isNoisy(%q) = %v, want %v", s, !want, want)
		}
	}
}
