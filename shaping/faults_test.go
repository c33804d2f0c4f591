package shaping

import "testing"

func TestInspect(t *testing.T) {
	tests := []struct {
		name             string
		original, shaped string
		want             Faults
	}{
		{
			name:     "colon without its content",
			original: "The user wants a title.\nSo, in code:\nx = compute(y)\nThe loop ends there.",
			shaped:   "The user wants a title.\nSo, in code:\nThe loop ends there.",
			want:     Faults{DanglingColon: 1},
		},
		{
			name:     "colon with its content",
			original: "The user wants a title.\nSo, in code:\nx = compute(y)\nDone here.",
			shaped:   "So, in code:\nx = compute(y)",
			want:     Faults{},
		},
		{
			name:     "colon at the end of the original",
			original: "The user wants a title. Hmm. Let me look at the steps:",
			shaped:   "The user wants a title. Let me look at the steps:",
			want:     Faults{},
		},
		{
			name:     "short lines outside fences only",
			original: "Task here.\n}\n```\n}\n```\n0.",
			shaped:   "Task here.\n}\n```\n}\n```\n0.",
			want:     Faults{ShortLine: 2},
		},
		{
			name:     "bare filler",
			original: "The cache is cold. So. Yes. Let's see: So yes, that works. So the answer is yes.",
			shaped:   "The cache is cold. So. Yes. Let's see: So yes, that works. So the answer is yes.",
			want:     Faults{BareFiller: 3}, // "Let's see: So yes, that works." is one unit
		},
		{
			name:     "anaphor whose antecedent was dropped",
			original: "The cache is cold at startup. It misses every key. Hmm. This doubles the latency.",
			shaped:   "The cache is cold at startup. This doubles the latency.",
			want:     Faults{DanglingAnaphora: 1},
		},
		{
			name:     "anaphor after filler keeps its antecedent",
			original: "The cache is cold at startup. It misses every key. Hmm. This doubles the latency.",
			shaped:   "It misses every key. This doubles the latency.",
			want:     Faults{DanglingAnaphora: 1}, // "It" lost "The cache"
		},
		{
			name:     "filler stripped and capitalised",
			original: "The cache is cold. Okay, so it misses every key.",
			shaped:   "It misses every key.",
			want:     Faults{DanglingAnaphora: 1},
		},
		{
			name:     "anaphor at the start of the text",
			original: "This is a Go question about maps. Many words follow here to pad.",
			shaped:   "This is a Go question about maps.",
			want:     Faults{},
		},
		{
			name:     "chinese anaphor",
			original: "用户的服务很慢。我看了日志。这说明缓存失效了。",
			shaped:   "用户的服务很慢。这说明缓存失效了。",
			want:     Faults{DanglingAnaphora: 1},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Inspect(tt.original, tt.shaped); got != tt.want {
				t.Errorf("Inspect = %+v, want %+v", got, tt.want)
			}
		})
	}
}

// TestInspectIdentity: a text inspected against itself has no dangling
// colon or anaphora (nothing was dropped).
func TestInspectIdentity(t *testing.T) {
	for _, text := range append(edgeTexts, corpus(9, 20_000, 10)...) {
		if f := Inspect(text, text); f.DanglingColon != 0 || f.DanglingAnaphora != 0 {
			t.Fatalf("Inspect(x, x) = %+v for %q", f, text)
		}
	}
}

// TestShapeHasNoFaults shapes generated texts and the golden inputs and
// checks that extraction follows the rules Inspect measures.
func TestShapeHasNoFaults(t *testing.T) {
	texts := corpus(11, 200_000, 120)
	texts = append(texts, goldenInputs(t)...)
	for _, text := range texts {
		out, changed := Shape(text, Options{})
		if !changed {
			continue
		}
		if f := Inspect(text, out); f.any() {
			t.Errorf("faults %+v in\n%s\nfrom\n%s", f, out, text)
		}
	}
}
